"""The Arrow dataset beside current speculators shards: row i holds input_ids and loss_mask
for ``hidden_states/hs_{i}.safetensors`` (HF ``datasets.save_to_disk`` layout, IPC stream
files ``data-XXXXX-of-NNNNN.arrow``). Needs pyarrow (``pip install
pytest-eagle-contract[arrow]``); without it the mask is simply not available.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

_HS = re.compile(r"^hs_(\d+)\.safetensors$")


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
    return {"row": index, "dataset": root,
            "input_ids": torch.tensor(row["input_ids"], dtype=torch.long),
            "loss_mask": None if mask is None else torch.tensor(mask, dtype=torch.long)}
