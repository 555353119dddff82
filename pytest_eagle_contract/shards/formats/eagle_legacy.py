"""EAGLE-1/2 (SafeAILab) ``ge_data``: ``{worker}/data_{i}.ckpt``, one post-norm state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .base import Format

if TYPE_CHECKING:
    import torch

    from ...layers import Layer


class EagleLegacy(Format):
    def shard_name(self, index: int, compress: bool = False) -> str:
        return f"0/data_{index}.ckpt"

    def shard_dict(
        self, input_ids: torch.Tensor, loss_mask: torch.Tensor, slots: Sequence[torch.Tensor]
    ) -> dict[str, Any]:
        (state,) = slots
        return {"input_ids": input_ids, "hidden_state": state, "loss_mask": loss_mask}

    def can_hold(self, n_slots: int) -> bool:
        return n_slots <= 1

    def record_dict(
        self, input_ids: torch.Tensor, loss_mask: torch.Tensor, slots: Sequence[torch.Tensor]
    ) -> dict[str, Any] | None:
        if not slots:
            return {"input_ids": input_ids, "loss_mask": loss_mask}
        return super().record_dict(input_ids, loss_mask, slots)

    def default_layers(
        self, num_layers: int, metadata: dict[str, Any], arch: str | None = None
    ) -> list[Layer]:
        from ...layers import Layer

        return [Layer(-1)]


FORMAT = EagleLegacy(
    "eagle-legacy",
    ("*.ckpt",),
    "input_ids",
    "loss_mask",
    (("hidden_state", "single"),),
    signature="hidden_state",
    target_post_norm=True,
    optional_keys=frozenset({"attention_mask"}),
)
