"""Current speculators: ``hidden_states/hs_{i}.safetensors`` holding [T, k, H] states (the
last the pre-norm target) and ``token_ids``; ``input_ids`` and ``loss_mask`` in an Arrow
dataset beside ``hidden_states/`` (HF ``datasets.save_to_disk`` layout, IPC stream files
``data-XXXXX-of-NNNNN.arrow``), row i for ``hs_{i}``. Reading the rows needs pyarrow
(``pip install pytest-eagle-contract[arrow]``); without it the shard's metadata says which
checks could not run and why (``unread``), and the checks report it (EC009).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ShardReadError
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
        if row is not None:
            return {"dataset_row": row}
        if _dataset_files(path):  # there is a dataset, and no pyarrow to read it
            return {
                "unread": f"the Arrow dataset in {path.parent.parent} needs pyarrow "
                "(pip install pytest-eagle-contract[arrow])"
            }
        return {}

    def shard_name(self, index: int, compress: bool = False) -> str:
        return f"hidden_states/hs_{index}.safetensors"

    def _state_keys(self, slots: Sequence[torch.Tensor]) -> dict[str, Any] | None:
        import torch

        return {"hidden_states": torch.stack(list(slots), dim=1).contiguous()} if slots else None

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
    engine="vllm",  # made with vLLM's extract_hidden_states; its drafts carry vLLM ids
)


_EXTENSION = b"ARROW:extension:"  # field metadata of an extension type, in the schema
MAX_SCHEMA_BYTES = 1 << 20


def _schema_problem(path: Path) -> str:
    """Why an IPC stream file may not be opened: an extension type in its schema message
    (pyarrow would deserialize it, by pickle in old versions: CVE-2023-47248), or a schema
    that is not one. Read from the raw bytes, before pyarrow parses anything."""
    with open(path, "rb") as f:
        head = f.read(8)
        if head[:4] == b"\xff\xff\xff\xff":
            size = int.from_bytes(head[4:8], "little", signed=True)
        else:  # the format before 0.15: no continuation marker
            size = int.from_bytes(head[:4], "little", signed=True)
            f.seek(4)
        if not 0 < size <= MAX_SCHEMA_BYTES:
            return "it is not an Arrow IPC stream"
        schema = f.read(size)
    if _EXTENSION in schema:
        return "its schema declares an Arrow extension type (refused: it could run code)"
    return ""


@lru_cache(maxsize=4)
def _table(root: Path, stamp: tuple[tuple[str, float], ...]) -> Any:
    import pyarrow as pa

    tables = []
    for name, _ in stamp:
        problem = _schema_problem(root / name)
        if problem:
            raise ValueError(f"{name}: {problem}")
        with pa.memory_map(str(root / name)) as source:
            table = pa.ipc.open_stream(source).read_all()
        if any(isinstance(t, pa.ExtensionType) for t in table.schema.types):
            raise ValueError(f"{name}: an extension type in its columns")
        tables.append(table)
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def _column(table: Any, name: str, index: int) -> torch.Tensor | None:
    """Row ``index`` of a list-of-integers column as an int64 tensor (None: no column or a
    null row); ValueError when the column holds anything else."""
    import pyarrow as pa
    import torch

    if name not in table.column_names:
        return None
    column = table.column(name)
    kind = column.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not (
        pa.types.is_integer(kind.value_type) or pa.types.is_boolean(kind.value_type)
    ):
        raise ValueError(f"column {name} is {kind}, not a list of integers")
    values = column[index].values
    if values is None:
        return None
    if values.null_count:
        raise ValueError(f"row {index} of {name} holds nulls")
    return torch.from_numpy(values.to_numpy(zero_copy_only=False).astype("int64"))


def _dataset_files(shard: Path) -> list[Path]:
    """The Arrow files of the dataset above ``.../hidden_states/hs_{i}.safetensors``."""
    if _HS.match(shard.name) is None:
        return []
    return sorted(f for f in shard.parent.parent.glob("data-*.arrow") if f.is_file())


def dataset_row(shard: Path) -> dict[str, Any] | None:
    """``{"input_ids", "loss_mask", "row", "dataset"}`` for ``.../hidden_states/hs_{i}`` when
    an Arrow dataset sits above it and pyarrow is installed; else None. A dataset that
    cannot be read is a :class:`ShardReadError` (EC001)."""
    match = _HS.match(shard.name)
    root = shard.parent.parent
    files = _dataset_files(shard)
    if match is None or not files:
        return None
    try:
        import pyarrow as pa
    except ImportError:
        return None
    index = int(match.group(1))
    try:
        table = _table(root, tuple((f.name, f.stat().st_mtime) for f in files))
        if index >= table.num_rows:
            ids = mask = None
        else:
            ids, mask = _column(table, "input_ids", index), _column(table, "loss_mask", index)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise ShardReadError(
            "EC001",
            f"the Arrow dataset in {root} cannot be used: {str(exc)[:200]}",
            "regenerate the dataset (columns input_ids and loss_mask: lists of integers)",
        ) from None
    return {"row": index, "dataset": root, "input_ids": ids, "loss_mask": mask}


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
