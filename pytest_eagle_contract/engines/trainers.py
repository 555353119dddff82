"""The trainers' captures: which layers each one's data generation stores for the fc.

SpecForge captures through SGLang at the version it pins; speculators v1 after decoder
layers; speculators (2026) through vLLM; SafeAILab EAGLE-3 at fixed layers; ``hf`` is
transformers' ``output_hidden_states`` indices. None reads a draft config.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import replace
from typing import ClassVar

from ..errors import Unservable
from ..layers import Layer
from .base import Engine, Position, Query, Resolution, eagle3_default_ids, positions, straight
from .sglang import SGLang

SPECFORGE_SGLANG = "0.5.14"  # the sglang SpecForge pins for prepare_hidden_states.py


class SpecForge(Engine):
    name = "specforge"
    title = "SpecForge"

    def known_archs(self) -> frozenset[str]:
        return SGLang().known_archs()

    def default_ids(self, num_layers: int) -> list[int]:
        return [1, num_layers // 2 - 1, num_layers - 4]

    def _resolve(self, q: Query) -> Resolution:
        """Through SGLang at prep time; SpecForge's default ids are [1, L//2-1, L-4]."""
        if not q.arch:
            raise Unservable(
                "SpecForge captures through sglang, whose rules depend on the "
                "architecture: give --arch"
            )
        used = list(q.ids) if q.ids is not None else self.default_ids(q.num_layers)
        inner = SGLang().resolve(q.num_layers, used, q.arch, q.version or SPECFORGE_SGLANG)
        notes = (
            ((f"SpecForge default aux ids {used}",) if q.ids is None else ())
            + inner.notes
            + ("target (hidden_state) = final_norm",)
        )
        source = f"SpecForge prepare_hidden_states.py via {inner.source}"
        return replace(inner, engine=self.name, ids=q.given, source=source, notes=notes)


class _Trainer(Engine):
    """A trainer's own capture: no versions, no architecture rules, no draft config."""

    source: ClassVar[str]
    notes: ClassVar[tuple[str, ...]] = ()

    def _resolve(self, q: Query) -> Resolution:
        fed = self.fc_positions(q.num_layers, q.ids)
        return Resolution(
            self.name, None, None, q.num_layers, q.given, fed, self.source, self.notes
        )

    @abstractmethod
    def fc_positions(self, num_layers: int, ids: Sequence[int] | None) -> tuple[Position, ...]:
        """Where the ids (None: the trainer's default) land, in fc order. Raises Unservable."""


class SpeculatorsV1(_Trainer):
    name = "speculators-v1"
    title = "speculators v1"
    source = (
        "speculators v1 custom_worker.py: captured after layer k = residual:k+1; "
        "list order (torch.cat(hidden_states[:-1]))"
    )
    notes = ("the last entry is the pre-norm target",)

    def default_ids(self, num_layers: int) -> list[int]:
        return [2, num_layers // 2, num_layers - 3, num_layers - 1]

    def fc_positions(self, num_layers: int, ids: Sequence[int] | None) -> tuple[Position, ...]:
        L = num_layers
        used = list(ids) if ids is not None else self.default_ids(L)
        if any(i < 0 or i >= L for i in used):
            raise Unservable(f"speculators v1 captures after decoder layers [0, {L}): {used}")
        return positions(used, [i + 1 for i in used], [Layer(i + 1) for i in used])


class Speculators(_Trainer):
    name = "speculators"
    title = "speculators"
    source = "speculators data generation through vLLM: id k = residual:k, sorted"
    notes = ("the last entry is the pre-norm target",)

    def default_ids(self, num_layers: int) -> list[int]:
        return [2, num_layers // 2, num_layers - 3, num_layers]

    def fc_positions(self, num_layers: int, ids: Sequence[int] | None) -> tuple[Position, ...]:
        L = num_layers
        used = list(ids) if ids is not None else self.default_ids(L)
        if any(i < 0 or i > L for i in used):
            raise Unservable(f"speculators (vLLM capture) ids must lie in [0, {L}]: {used}")
        return straight(sorted(set(used)))


class SafeAILab(_Trainer):
    name = "eagle"
    title = "SafeAILab EAGLE-3"
    source = (
        "SafeAILab EAGLE-3 modeling_llama_kv.py: states before layers {2, L//2, L-3}, "
        "concatenated in that order"
    )

    def fc_positions(self, num_layers: int, ids: Sequence[int] | None) -> tuple[Position, ...]:
        if ids is not None:
            raise Unservable(
                "SafeAILab EAGLE-3 has no configurable layer ids: it captures "
                "before layers {2, L//2, L-3}"
            )
        return straight(eagle3_default_ids(num_layers))


class HF(_Trainer):
    name = "hf"
    title = "transformers"
    source = (
        "transformers output_hidden_states: [k] = residual:k for k < L, "
        "[L] = final_norm (post-norm)"
    )

    def default_ids(self, num_layers: int) -> None:
        return None

    def fc_positions(self, num_layers: int, ids: Sequence[int] | None) -> tuple[Position, ...]:
        if ids is None:
            raise Unservable("hf needs --ids: indices into output_hidden_states")
        if any(i < 0 or i > num_layers for i in ids):
            raise Unservable(f"output_hidden_states has indices 0..{num_layers}: {list(ids)}")
        return positions(ids, ids, [Layer(-1) if i == num_layers else Layer(i) for i in ids])
