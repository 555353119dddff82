"""How the trainers hold a batch: each trainer's batch dict as a shard layout, so the shard
families check a batch's rows exactly as they check a shard file (see docs/online.md).

Read from the trainers' released code (SpecForge 0.2.0, speculators 0.9.0):

- SpecForge ``TrainBatch.tensors`` (``runtime/contracts.py``; the EAGLE-3 collators in
  ``algorithms/eagle3/data.py`` and ``algorithms/common/collation.py``): ``input_ids``
  [B, T], ``attention_mask`` [B, T], ``loss_mask`` [B, T], ``hidden_state`` [B, T, n*H]
  (the aux states concatenated: the fc input), ``target`` [B, T, H] (the target's last
  state) when ``metadata["target_repr"]`` is ``hidden_state``, logits otherwise; optional
  ``position_ids``.
- speculators ``CollateFn`` (``train/data.py``): documents packed into one row,
  ``hidden_states`` [1, L, n*H] (the stored states but the last, flattened: the fc input),
  ``verifier_last_hidden_states`` [1, L, H] (the last: the target), ``input_ids``,
  ``loss_mask``, ``position_ids``, ``document_ids`` [1, L] (-1 on padding), the int
  ``error_records`` and recovery metadata under ``__``-prefixed keys.

A plain dict named by the contract's format (its shard keys, with a leading batch
dimension, or none) is read with that format itself.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..shards.formats import FORMATS, Format, detect

if TYPE_CHECKING:
    import torch

    from ..layers import Layer


@dataclass(frozen=True)
class BatchLayout(Format):
    """A trainer's batch dict: the fc input concatenated under one key, the target state
    under another. ``valid`` names the key that marks real tokens (``attention_mask``: 1;
    ``document_ids``: not -1), ``trainer`` the shard format whose trainer holds it."""

    valid: str = ""
    trainer: str = "specforge"

    def shard_name(self, index: int, compress: bool = False) -> str:
        return f"batch {index}"

    def _state_keys(self, slots: Sequence[torch.Tensor]) -> dict[str, Any]:
        """The fc input concatenated along the last dim, then the target apart (each [T, ...]
        without the batch dimension)."""
        return self._aux_then_target(slots)

    def default_layers(
        self, num_layers: int, metadata: dict[str, Any], arch: str | None = None
    ) -> list[Layer]:
        """Its trainer's defaults (docs/layers.md)."""
        return FORMATS[self.trainer].default_layers(num_layers, metadata, arch)


SPECFORGE_BATCH = BatchLayout(
    "specforge-batch",
    (),
    "input_ids",
    "loss_mask",
    (("hidden_state", "concat"), ("target", "single")),
    signature="target",
    target_post_norm=True,
    optional_keys=frozenset({"attention_mask", "position_ids"}),
    valid="attention_mask",
    trainer="specforge",
)
SPECULATORS_BATCH = BatchLayout(
    "speculators-batch",
    (),
    "input_ids",
    "loss_mask",
    (("hidden_states", "concat"), ("verifier_last_hidden_states", "single")),
    signature="verifier_last_hidden_states",
    target_post_norm=False,
    optional_keys=frozenset({"position_ids", "document_ids", "lengths", "error_records"}),
    valid="document_ids",
    trainer="speculators",
)
SPECFORGE_LOGITS_BATCH = BatchLayout(
    "specforge-batch-logits",
    (),
    "input_ids",
    "loss_mask",
    (("hidden_state", "concat"),),
    signature="hidden_state",
    target_post_norm=True,
    optional_keys=frozenset({"attention_mask", "position_ids"}),
    valid="attention_mask",
    trainer="specforge",
)
"""A SpecForge batch whose ``target`` is the teacher's logits (``target_repr`` logits or
pruned_logits): the fc input alone is held to the contract."""
LAYOUTS: dict[str, Format] = {
    SPECFORGE_BATCH.name: SPECFORGE_BATCH,
    SPECFORGE_LOGITS_BATCH.name: SPECFORGE_LOGITS_BATCH,
    SPECULATORS_BATCH.name: SPECULATORS_BATCH,
    **FORMATS,
}
LAYOUT_NAMES = ("auto", *LAYOUTS)


def detect_layout(keys: Collection[str], contract_format: str) -> Format:
    """The layout of a batch with these keys: a trainer's batch by its signature key (a
    SpecForge batch is one with ``target`` and ``hidden_state`` and no shard key
    ``aux_hidden_state``), else the contract's format."""
    if SPECULATORS_BATCH.signature in keys:
        return SPECULATORS_BATCH
    if {"target", "hidden_state"} <= set(keys) and "aux_hidden_state" not in keys:
        return SPECFORGE_BATCH
    if contract_format in FORMATS:
        return FORMATS[contract_format]
    return detect("", keys) or FORMATS["specforge"]
