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

    def _state_keys(self, slots: Sequence[torch.Tensor]) -> dict[str, Any] | None:
        if not self.can_hold(len(slots)):
            return None
        return {"hidden_state": slots[0]} if slots else {}

    def can_hold(self, n_slots: int) -> bool:
        return n_slots <= 1

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
