"""SpecForge ``prepare_hidden_states.py``: ``rows_{g}-{g+2000}/data_{i}.ckpt[.gz]``, the aux
states concatenated along the last dim, then the post-norm target apart."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .base import Format

if TYPE_CHECKING:
    import torch

    from ...layers import Layer


class SpecForge(Format):
    def shard_name(self, index: int, compress: bool = False) -> str:
        group = (index // 2000) * 2000
        return f"rows_{group}-{group + 2000}/data_{index}.ckpt" + (".gz" if compress else "")

    def _state_keys(self, slots: Sequence[torch.Tensor]) -> dict[str, Any] | None:
        """The aux states concatenated, then the target, each with a batch dimension."""
        return {key: state.unsqueeze(0) for key, state in self._aux_then_target(slots).items()}

    def default_layers(
        self, num_layers: int, metadata: dict[str, Any], arch: str | None = None
    ) -> list[Layer]:
        """The aux states through SGLang, then the post-norm ``hidden_state``."""
        from ...engines.resolve import resolve
        from ...layers import Layer

        aux = resolve("specforge", num_layers, None, arch or "LlamaForCausalLM").layers
        return [*aux, Layer(-1)]


FORMAT = SpecForge(
    "specforge",
    ("*.ckpt", "*.ckpt.gz"),
    "input_ids",
    "loss_mask",
    (("aux_hidden_state", "concat"), ("hidden_state", "single")),
    signature="aux_hidden_state",
    target_post_norm=True,
)
