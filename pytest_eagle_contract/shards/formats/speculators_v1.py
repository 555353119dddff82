"""speculators v1 data generation: ``data_{i}.pt`` with a list of [T, H] states (the last
the pre-norm target), and ``data_config.json`` beside (or one level above) the shards."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .base import MAX_SLOTS, Format

MAX_CONFIG_BYTES = 1 << 20  # data_config.json is a few hundred bytes
MAX_LAYER = 1 << 16  # a layer id beyond this is garbage, not a model

if TYPE_CHECKING:
    import torch

    from ...layers import Layer


class SpeculatorsV1(Format):
    def read_extras(self, path: Path, tensors: dict[str, Any]) -> dict[str, Any]:
        """The sidecar ``data_config.json`` (its fields of the wrong type left out), or {}
        when there is none or it is unreadable."""
        for folder in (path.parent, path.parent.parent):
            candidate = folder / "data_config.json"
            if candidate.is_file():
                try:
                    if candidate.stat().st_size > MAX_CONFIG_BYTES:
                        return {}
                    data = json.loads(candidate.read_text("utf-8"))
                except (OSError, ValueError, RecursionError):
                    return {}
                return _clean(data)
        return {}

    def shard_name(self, index: int, compress: bool = False) -> str:
        return f"data_{index}.pt"

    def _state_keys(self, slots: Sequence[torch.Tensor]) -> dict[str, Any] | None:
        return {"hidden_states": [s.contiguous() for s in slots]} if slots else None

    def default_layers(
        self, num_layers: int, metadata: dict[str, Any], arch: str | None = None
    ) -> list[Layer]:
        """The sidecar's ``layer_ids`` when it has them, else the generator's defaults."""
        from ...engines.resolve import resolve

        ids = metadata.get("hidden_states", {}).get("layer_ids")
        L = num_layers or (max(ids) + 1 if ids else 0)
        return list(resolve("speculators-v1", L, ids).layers)


def _clean(data: Any) -> dict[str, Any]:
    """The sidecar's ``model`` and ``hidden_states`` as this tool reads them: objects, with
    ``layer_ids`` a list of layer numbers; anything else is dropped."""
    if not isinstance(data, dict):
        return {}
    out = {k: v for k, v in data.items() if k in ("version", "model", "hidden_states", "format")}
    for key in ("model", "hidden_states", "format"):
        if not isinstance(out.get(key, {}), dict):
            del out[key]
    ids = out.get("hidden_states", {}).get("layer_ids")
    if ids is not None and not (
        isinstance(ids, list)
        and len(ids) <= MAX_SLOTS
        and all(type(i) is int and 0 <= i < MAX_LAYER for i in ids)
    ):
        out["hidden_states"] = {k: v for k, v in out["hidden_states"].items() if k != "layer_ids"}
    return out


def write_data_config(root: Path, layer_ids: Sequence[int], hidden_size: int) -> Path:
    """speculators v1's data_config.json (the fields this tool reads)."""
    path = root / "data_config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "version": "2.0",
                "model": {"hidden_size": hidden_size},
                "hidden_states": {
                    "layer_ids": list(layer_ids),
                    "description": "Layers selected for EAGLE3 fusion and target logits",
                },
                "format": {"file_pattern": "data_{idx}.pt"},
            },
            indent=2,
        ),
        "utf-8",
    )
    return path


FORMAT = SpeculatorsV1(
    "speculators-v1",
    ("data_*.pt",),
    "input_ids",
    "loss_mask",
    (("hidden_states", "list"),),
    signature="hidden_states",
    target_post_norm=False,
    engine="vllm",  # made with vLLM's hidden-state extraction; its drafts carry vLLM ids
)
