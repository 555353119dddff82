"""Write shards in each ecosystem format, exactly as its generator lays them out.

Used by the built-in demo, the benchmark and the tests; handy for users' own fixtures.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def shard_name(format: str, index: int, compress: bool = False) -> str:
    """The relative path the format's generator gives sample ``index``."""
    if format == "specforge":
        group = (index // 2000) * 2000
        return f"rows_{group}-{group + 2000}/data_{index}.ckpt" + (".gz" if compress else "")
    if format == "speculators-v1":
        return f"data_{index}.pt"
    if format == "speculators":
        return f"hidden_states/hs_{index}.safetensors"
    if format == "eagle-legacy":
        return f"0/data_{index}.ckpt"
    raise ValueError(f"unknown format {format!r}")


def shard_dict(format: str, input_ids: torch.Tensor, loss_mask: torch.Tensor,
               slots: Sequence[torch.Tensor]) -> dict[str, Any]:
    """The dict the format's generator saves; ``slots`` are [T, H] in stored order."""
    import torch

    if format == "specforge":
        return {"input_ids": input_ids, "loss_mask": loss_mask,
                "aux_hidden_state": torch.cat(list(slots[:-1]), dim=-1).unsqueeze(0),
                "hidden_state": slots[-1].unsqueeze(0)}
    if format == "speculators-v1":
        return {"input_ids": input_ids, "hidden_states": [s.contiguous() for s in slots],
                "loss_mask": loss_mask}
    if format == "speculators":
        return {"hidden_states": torch.stack(list(slots), dim=1).contiguous(),
                "token_ids": input_ids, "loss_mask": loss_mask}
    if format == "eagle-legacy":
        (state,) = slots
        return {"input_ids": input_ids, "hidden_state": state, "loss_mask": loss_mask}
    raise ValueError(f"unknown format {format!r}")


def save(path: Path, data: dict[str, Any]) -> Path:
    """Save a shard dict by the file's suffix (.safetensors, .gz, else torch.save)."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".safetensors"):
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in data.items()}, str(path))
    elif path.name.endswith(".gz"):
        with gzip.open(path, "wb", compresslevel=1) as f:
            torch.save(data, f)  # type: ignore[arg-type]
    else:
        torch.save(data, path)
    return path


def write_shard(root: Path, format: str, index: int, input_ids: torch.Tensor,
                loss_mask: torch.Tensor, slots: Sequence[torch.Tensor],
                compress: bool = False) -> Path:
    return save(root / shard_name(format, index, compress),
                shard_dict(format, input_ids, loss_mask, slots))


def write_data_config(root: Path, layer_ids: Sequence[int], hidden_size: int) -> Path:
    """speculators v1's data_config.json (the fields this tool reads)."""
    path = root / "data_config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "version": "2.0",
        "model": {"hidden_size": hidden_size},
        "hidden_states": {"layer_ids": list(layer_ids),
                          "description": "Layers selected for EAGLE3 fusion and target logits"},
        "format": {"file_pattern": "data_{idx}.pt"},
    }, indent=2), "utf-8")
    return path


def write_speculators_dataset(root: Path, rows: Sequence[tuple[torch.Tensor, torch.Tensor]],
                              ) -> Path:
    """The Arrow dataset current speculators keeps beside ``hidden_states/``: columns
    ``input_ids``, ``loss_mask``, ``seq_len``, in ``datasets.save_to_disk``'s layout (one IPC
    stream file plus ``state.json``). Row i belongs to ``hidden_states/hs_{i}.safetensors``."""
    import pyarrow as pa

    root.mkdir(parents=True, exist_ok=True)
    table = pa.table({
        "input_ids": [ids.tolist() for ids, _ in rows],
        "loss_mask": [mask.tolist() for _, mask in rows],
        "seq_len": [len(ids) for ids, _ in rows],
    })
    name = "data-00000-of-00001.arrow"
    with pa.OSFile(str(root / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    (root / "state.json").write_text(json.dumps({"_data_files": [{"filename": name}],
                                                 "_format_type": "torch"}), "utf-8")
    return root / name
