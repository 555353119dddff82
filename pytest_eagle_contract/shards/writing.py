"""Write shards in each ecosystem format, exactly as its generator lays them out.

Used by the built-in demo, the benchmark and the tests; handy for users' own fixtures.
The layouts live in the formats (:mod:`.formats`); these take a format's name.
"""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..named import lookup
from .formats import FORMATS, Format
from .formats.speculators import write_dataset as write_speculators_dataset
from .formats.speculators_v1 import write_data_config

if TYPE_CHECKING:
    import torch

__all__ = [
    "save",
    "shard_dict",
    "shard_name",
    "write_data_config",
    "write_shard",
    "write_speculators_dataset",
]


def shard_name(format: str, index: int, compress: bool = False) -> str:
    """The relative path the format's generator gives sample ``index``."""
    return _format(format).shard_name(index, compress)


def shard_dict(
    format: str, input_ids: torch.Tensor, loss_mask: torch.Tensor, slots: Sequence[torch.Tensor]
) -> dict[str, Any]:
    """The dict the format's generator saves; ``slots`` are [T, H] in stored order."""
    return _format(format).shard_dict(input_ids, loss_mask, slots)


def _format(name: str) -> Format:
    return lookup(FORMATS, name, "format")


def save(path: Path, data: dict[str, Any] | list[dict[str, Any]]) -> Path:
    """Save a shard dict by the file's suffix (.safetensors, .gz, else torch.save)."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".safetensors") and isinstance(data, dict):
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in data.items()}, str(path))
    elif path.name.endswith(".gz"):
        with gzip.open(path, "wb", compresslevel=1) as f:
            torch.save(data, f)  # type: ignore[arg-type]
    else:
        torch.save(data, path)
    return path


def write_shard(
    root: Path,
    format: str,
    index: int,
    input_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    slots: Sequence[torch.Tensor],
    compress: bool = False,
) -> Path:
    data = shard_dict(format, input_ids, loss_mask, slots)
    path = root / shard_name(format, index, compress)
    return save(path, [data] if format == "trtllm" else data)  # TensorRT-LLM: a list of dicts
