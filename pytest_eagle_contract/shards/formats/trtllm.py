"""TensorRT-LLM's hidden-state saver (``speculative_config: {decoding_type: SaveState}``).

``{output_directory}/{file_prefix}_{n}.pt`` (prefix ``data`` by default): ``torch.save`` of a
list of one dict per request, written every ``write_interval`` requests (20 by default), ``n``
the 1-based count of requests processed at the write. Each dict holds ``id`` (that count, an
int), ``input_ids`` (int64 [T], the prompt), ``hidden_state`` ([T, H], the post-norm final
state, id -1) and, when more than one layer is captured, the captured layers concatenated
along the last dim in ascending id order: ``aux_hidden_states`` in newer code,
``hidden_state_features`` in older. No loss mask is saved. The reader takes the file's first
record as its sample. See docs/formats.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .base import Format

if TYPE_CHECKING:
    import torch

    from ...layers import Layer


class TensorRTLLM(Format):
    def shard_name(self, index: int, compress: bool = False) -> str:
        return f"data_{index + 1}.pt"  # write_interval 1: one request per file

    def _state_keys(self, slots: Sequence[torch.Tensor]) -> dict[str, Any]:
        """One request's record (the saver keeps no loss mask: the format has no mask key)."""
        return {"id": 1, **self._aux_then_target(slots)}

    def default_layers(
        self, num_layers: int, metadata: dict[str, Any], arch: str | None = None
    ) -> list[Layer]:
        """TensorRT-LLM's default capture ``(1, L//2-1, L-4)``, then the post-norm state."""
        from ...engines.trtllm import default_ids, layer_of
        from ...layers import Layer

        return [*(layer_of(i) for i in default_ids(num_layers)), Layer(-1)]


FORMAT = TensorRTLLM(
    "trtllm",
    ("*_*.pt",),
    "input_ids",
    None,
    (
        ("aux_hidden_states", "concat"),
        ("hidden_state_features", "concat"),
        ("hidden_state", "single"),
    ),
    signature="id",
    target_post_norm=True,
    optional_keys=frozenset({"id", "aux_hidden_states", "hidden_state_features"}),
    engine="trtllm",
)
