"""What the ``eagle_shard`` fixture hands a user's test: a shard, read and laid out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..contract.model import Contract
from .reading import Sample, read_sample

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class EagleShard:
    """A shard with its slots split as the contract says, ready for a user's assertions."""

    path: Path
    contract: Contract
    sample: Sample
    slots: list[torch.Tensor]

    @classmethod
    def read(cls, contract: Contract, path: Path) -> EagleShard:
        fmt = contract.training.format if contract.training else "auto"
        sample = read_sample(path, fmt)
        slots, problems = sample.slots(contract.target.hidden_size)
        if problems:
            raise ValueError(f"{path}: " + "; ".join(problems))
        return cls(path, contract, sample, [s.tensor for s in slots])

    @property
    def input_ids(self) -> torch.Tensor | None:
        return self.sample.input_ids

    @property
    def loss_mask(self) -> torch.Tensor | None:
        return self.sample.loss_mask

    @property
    def fc_input(self) -> torch.Tensor:
        """The [T, n*H] tensor the trainer feeds the draft's fc (slots by ``fc_input``)."""
        import torch

        assert self.contract.training is not None
        return torch.cat([self.slots[i] for i in self.contract.training.fc_input], dim=-1)

    @property
    def target(self) -> torch.Tensor | None:
        assert self.contract.training is not None
        index = self.contract.training.target_slot
        return None if index is None else self.slots[index]
