"""Current speculators: ``hidden_states/hs_{i}.safetensors`` holding [T, k, H] states (the
last the pre-norm target) and ``token_ids``; ``input_ids`` and ``loss_mask`` in an Arrow
dataset beside ``hidden_states/`` (HF ``datasets.save_to_disk`` layout, IPC stream files
``data-XXXXX-of-NNNNN.arrow``), row i for ``hs_{i}``. Reading the rows needs pyarrow
(``pip install pytest-eagle-contract[arrow]``); without it the mask is simply not there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .base import Format

if TYPE_CHECKING:
    import torch

    from ...layers import Layer

_HS = re.compile(r"^hs_(\d+)\.safetensors$")


class Speculators(Format):
    def read_extras(self, path: Path, tensors: dict[str, Any]) -> dict[str, Any]:
        """The shard's dataset row, when the file holds no ``loss_mask`` of its own."""
        if "loss_mask" in tensors:
            return {}
        row = dataset_row(path)
        return {} if row is None else {"dataset_row": row}

    def shard_name(self, index: int, compress: bool = False) -> str:
        return f"hidden_states/hs_{index}.safetensors"

    def shard_dict(
        self, input_ids: torch.Tensor, loss_mask: torch.Tensor, slots: Sequence[torch.Tensor]
    ) -> dict[str, Any]:
        import torch

        return {
            "hidden_states": torch.stack(list(slots), dim=1).contiguous(),
            "token_ids": input_ids,
            "loss_mask": loss_mask,
        }

    def default_layers(
        self, num_layers: int, metadata: dict[str, Any], arch: str | None = None
    ) -> list[Layer]:
        from ...engines.resolve import resolve

        return list(resolve("speculators", num_layers).layers)


FORMAT = Speculators(
    "speculators",
    ("hs_*.safetensors",),
    "token_ids",
    "loss_mask",
    (("hidden_states", "stacked"),),
    signature="token_ids",
    target_post_norm=False,
    optional_keys=frozenset({"loss_mask"}),
)


@lru_cache(maxsize=4)
def _table(root: Path, stamp: tuple[tuple[str, float], ...]) -> Any:
    import pyarrow as pa

    tables = []
    for name, _ in stamp:
        with pa.memory_map(str(root / name)) as source:
            tables.append(pa.ipc.open_stream(source).read_all())
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def dataset_row(shard: Path) -> dict[str, Any] | None:
    """``{"input_ids", "loss_mask", "row", "dataset"}`` for ``.../hidden_states/hs_{i}`` when
    an Arrow dataset sits above it and pyarrow is installed; else None."""
    match = _HS.match(shard.name)
    root = shard.parent.parent
    if match is None:
        return None
    files = sorted(root.glob("data-*.arrow"))
    if not files:
        return None
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return None
    import torch

    table = _table(root, tuple((f.name, f.stat().st_mtime) for f in files))
    index = int(match.group(1))
    if index >= table.num_rows or "input_ids" not in table.column_names:
        return {"row": index, "dataset": root, "input_ids": None, "loss_mask": None}
    row = table.slice(index, 1).to_pylist()[0]
    mask = row.get("loss_mask")
    return {
        "row": index,
        "dataset": root,
        "input_ids": torch.tensor(row["input_ids"], dtype=torch.long),
        "loss_mask": None if mask is None else torch.tensor(mask, dtype=torch.long),
    }


def write_dataset(root: Path, rows: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> Path:
    """The Arrow dataset beside ``hidden_states/``: columns ``input_ids``, ``loss_mask``,
    ``seq_len``, in ``datasets.save_to_disk``'s layout (one IPC stream file plus
    ``state.json``). Row i belongs to ``hidden_states/hs_{i}.safetensors``."""
    import pyarrow as pa

    root.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "input_ids": [ids.tolist() for ids, _ in rows],
            "loss_mask": [mask.tolist() for _, mask in rows],
            "seq_len": [len(ids) for ids, _ in rows],
        }
    )
    name = "data-00000-of-00001.arrow"
    with pa.OSFile(str(root / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    (root / "state.json").write_text(
        json.dumps({"_data_files": [{"filename": name}], "_format_type": "torch"}), "utf-8"
    )
    return root / name
