"""One shard: read once, its slots split and norm statistics computed on first use.

The checks hold one per sampled file (``Shard.load``: a read error is kept, not raised);
the ``eagle_shard`` fixture hands users one bound to their contract (``Shard.read``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ShardReadError
from .reading import Sample, Slot, read_sample
from .stats import NormStats, norm_stats

if TYPE_CHECKING:
    import torch

    from ..contract.model import Contract, TrainingSpec


@dataclass(eq=False)
class Shard:
    """A shard file's contents (``sample``) or why it could not be read (``error``)."""

    path: Path
    label: str
    hidden_size: int | None
    sample: Sample | None = None
    error: ShardReadError | None = None
    contract: Contract | None = None
    _stats: dict[int, NormStats] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, path: Path, label: str, format: str, hidden_size: int | None) -> Shard:
        """Read ``path`` for the checks (torch-free where the file allows: a family that
        needs torch asks a slot for ``.tensor``); a read error becomes ``error``."""
        try:
            return cls(path, label, hidden_size, sample=read_sample(path, format, arrays=True))
        except ShardReadError as exc:
            return cls(path, label, hidden_size, error=exc)

    @classmethod
    def read(cls, contract: Contract, path: Path) -> Shard:
        """Read ``path`` as ``contract`` says, for a user's test: raises ShardReadError when
        it cannot be read, ValueError when its slots cannot be split."""
        fmt = contract.training.format if contract.training else "auto"
        shard = cls(
            path,
            str(path),
            contract.target.hidden_size,
            sample=read_sample(path, fmt),
            contract=contract,
        )
        if shard.split_problems:
            raise ValueError(f"{path}: " + "; ".join(shard.split_problems))
        return shard

    @cached_property
    def _split(self) -> tuple[list[Slot], list[str]]:
        assert self.sample is not None, self.error
        return self.sample.slots(self.hidden_size)

    @property
    def slots(self) -> list[Slot]:
        return self._split[0]

    @property
    def split_problems(self) -> list[str]:
        return self._split[1]

    def stats(self, index: int) -> NormStats:
        """Per-token norm statistics of slot ``index``, computed once."""
        if index not in self._stats:
            self._stats[index] = norm_stats(self.slots[index].array)
        return self._stats[index]

    @property
    def input_ids(self) -> torch.Tensor | None:
        return None if self.sample is None else self.sample.input_ids

    @property
    def loss_mask(self) -> torch.Tensor | None:
        return None if self.sample is None else self.sample.loss_mask

    @property
    def fc_input(self) -> torch.Tensor:
        """The [T, n*H] tensor the trainer feeds the draft's fc (slots by ``fc_input``)."""
        import torch

        spec = self._training()
        return torch.cat([self.slots[i].tensor for i in spec.fc_input], dim=-1)

    @property
    def target(self) -> torch.Tensor | None:
        """The target slot's [T, H] states, or None when the contract names none."""
        index = self._training().target_slot
        return None if index is None else self.slots[index].tensor

    def _training(self) -> TrainingSpec:
        if self.contract is None or self.contract.training is None:
            raise ValueError(
                f"{self.label}: read without a contract with a 'training' section (Shard.read)"
            )
        return self.contract.training


EagleShard = Shard
"""The ``eagle_shard`` fixture's value: a :class:`Shard` read with ``Shard.read``."""
