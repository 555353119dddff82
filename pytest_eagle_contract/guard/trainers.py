"""The guard inside the trainers that exist, without patching them (docs/online.md).

- SpecForge (0.2.0): the online consumer ``specforge.launch.build_disagg_online_consumer``
  and the domain ``specforge.training.Trainer`` take a ``collate_fn`` (the EAGLE-3 one is
  ``specforge.algorithms.eagle3.data.build_server_collator()``); :func:`specforge_collator`
  wraps it, so each ``TrainBatch``'s tensors are checked as the loader builds them (in the
  loader's threads, in order of collation).
- speculators (0.9.0): ``speculators.train.trainer.Trainer(model, config, train_loader,
  val_loader)`` iterates ``train_loader`` and reads its ``len`` and ``batch_sampler``;
  :class:`GuardedLoader` is that loader with each batch checked in the training process
  (the collator runs in spawned workers, which would each hold their own guard).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace
from typing import Any

from .core import Guard


class GuardedCollate:
    """A collate function whose every batch the guard checks before the loader takes it.
    ``target_repr`` is SpecForge's (``hidden_state``, ``logits``, ``pruned_logits``): with
    logits the batch's ``target`` is not held to a slot."""

    def __init__(
        self, guard: Guard, collate: Callable[[Sequence[Any]], Any], target_repr: str
    ) -> None:
        if not callable(collate):
            raise TypeError(f"collate is a {type(collate).__name__}, not a function")
        self.guard = guard
        self.collate = collate
        self.metadata = {"target_repr": target_repr}

    def __call__(self, features: Sequence[Any]) -> Any:
        batch = self.collate(features)
        self.guard.check(SimpleNamespace(tensors=batch, metadata=self.metadata))
        return batch


def specforge_collator(
    guard: Guard, collate: Callable[[Sequence[Any]], Any], target_repr: str = "hidden_state"
) -> GuardedCollate:
    """SpecForge's ``collate_fn`` with the guard inside: ``collate`` is the one the run
    would use (for EAGLE-3 online, ``build_server_collator()`` of
    ``specforge.algorithms.eagle3.data``)."""
    return GuardedCollate(guard, collate, target_repr)


class GuardedLoader:
    """``loader`` with each batch checked as the training loop takes it; everything else
    (``len``, ``batch_sampler``, ``dataset``) is the loader's own."""

    def __init__(self, loader: Any, guard: Guard) -> None:
        if not hasattr(loader, "__iter__"):
            raise TypeError(f"loader is a {type(loader).__name__}, not an iterable")
        self.loader = loader
        self.guard = guard

    def __iter__(self) -> Iterator[Any]:
        return self.guard.wrap(self.loader)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        if name in ("loader", "guard"):  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)
