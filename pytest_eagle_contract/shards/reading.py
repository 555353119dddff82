"""Read one shard file into a :class:`Sample`, safely: no pickle code ever runs.

torch files go through ``torch.load(weights_only=True)`` (memory-mapped when the file
allows); safetensors files are memory-mapped. Anything that fails becomes a
:class:`ShardReadError` carrying the rule code, never a crash.
"""

from __future__ import annotations

import gzip
import io
import pickle
import re
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ShardReadError
from .formats import FORMATS, Format, Slot, detect, dtype_name

if TYPE_CHECKING:
    import torch

__all__ = ["Sample", "Slot", "dtype_name", "read_sample"]


@dataclass
class Sample:
    """What one shard file holds, with the format's keys mapped onto ids, mask and slots."""

    path: Path
    format: Format
    tensors: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def keys(self) -> set[str]:
        return set(self.tensors)

    @property
    def input_ids(self) -> torch.Tensor | None:
        return _flat_1d(self.tensors.get(self.format.ids_key))

    @property
    def loss_mask(self) -> torch.Tensor | None:
        key = self.format.mask_key
        mask = _flat_1d(self.tensors.get(key)) if key else None
        if mask is None and self.dataset_row is not None:
            mask = self.dataset_row.get("loss_mask")  # current speculators: the Arrow row
        return mask

    @property
    def dataset_row(self) -> dict[str, Any] | None:
        row: dict[str, Any] | None = self.metadata.get("dataset_row")
        return row

    def describe(self) -> dict[str, dict[str, Any]]:
        """key -> {dtype, shape}; a list key shows its entries."""
        out: dict[str, dict[str, Any]] = {}
        for key, value in self.tensors.items():
            if isinstance(value, (list, tuple)):
                out[key] = {"list": [_describe(v) for v in value]}
            else:
                out[key] = _describe(value)
        return out

    def slots(self, hidden_size: int | None = None) -> tuple[list[Slot], list[str]]:
        """The state keys split into [T, H] slots in stored order, and why any key could not
        be (these become width findings); see :meth:`Format.split`."""
        return self.format.split(self.tensors, hidden_size)


def _describe(value: Any) -> dict[str, Any]:
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        return {"dtype": dtype_name(value.dtype), "shape": list(value.shape)}
    return {"type": type(value).__name__}


def _flat_1d(t: Any) -> torch.Tensor | None:
    if t is None or not hasattr(t, "dim"):
        return None
    out: torch.Tensor = t[0] if t.dim() == 2 and t.shape[0] == 1 else t
    return out


_UNSAFE_MARKERS = ("Unsupported global", "Unsupported class", "not an allowed global", "GLOBAL")
_CULPRIT = re.compile(r"(?:GLOBAL|global:?)\s+([\w.]+)")


def _torch_load(path: Path) -> Any:
    import torch

    def load(source: Any, mmap: bool) -> Any:
        retry = False
        try:
            return torch.load(source, map_location="cpu", weights_only=True, mmap=mmap)
        except pickle.UnpicklingError as exc:
            text = str(exc)
            if any(marker in text for marker in _UNSAFE_MARKERS):
                match = _CULPRIT.search(text)
                culprit = f" ({match.group(1)})" if match else ""
                raise ShardReadError(
                    "EC003",
                    f"refused to load: the pickle asks to call code{culprit}",
                    "a hidden-state shard holds only tensors; regenerate it, and never load "
                    "it with weights_only=False",
                ) from None
            raise ShardReadError(
                "EC002",
                f"corrupt pickle: {_first_line(text)}",
                "the file was probably cut short while writing",
            ) from None
        except (EOFError, zlib.error) as exc:
            raise ShardReadError(
                "EC002",
                f"file ends early: {_first_line(str(exc))}",
                "the file was probably cut short while writing",
            ) from None
        except RuntimeError as exc:
            text = str(exc)
            if mmap and "mmap" in text:
                retry = True  # a legacy (non-zip) torch file: load it without mmap
            elif any(m in text for m in ("zip archive", "PytorchStreamReader", "unexpected EOF")):
                raise ShardReadError(
                    "EC002",
                    f"truncated or corrupt zip container: {_first_line(text)}",
                    "the file was probably cut short while writing",
                ) from None
            else:
                raise ShardReadError("EC001", f"torch.load failed: {_first_line(text)}") from None
        except Exception as exc:  # garbage makes the unpickler fail in many ways
            raise ShardReadError(
                "EC001",
                f"not a torch file ({type(exc).__name__}: {_first_line(str(exc))})",
                "point training.shards at shard files, or set training.format",
            ) from None
        return load(source, False) if retry else None

    if path.name.endswith(".gz"):
        try:
            with gzip.open(path, "rb") as f:
                data = f.read()
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise ShardReadError(
                "EC002",
                f"gzip stream is truncated or corrupt: {exc}",
                "the file was probably cut short while writing",
            ) from None
        return load(io.BytesIO(data), False)
    with open(path, "rb") as raw:
        zipped = raw.read(4) == b"PK\x03\x04"
    if zipped and not zipfile.is_zipfile(path):
        raise ShardReadError(
            "EC002",
            "truncated zip container: its central directory is missing",
            "the file was probably cut short while writing",
        )
    return load(str(path), True)


def _safetensors_load(path: Path) -> dict[str, Any]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return {key: f.get_tensor(key) for key in f.keys()}
    except SafetensorError as exc:
        raise ShardReadError(
            "EC002",
            f"truncated or corrupt safetensors file: {exc}",
            "the file was probably cut short while writing",
        ) from None


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "unknown error"
    return line.split(". ")[0][:200]


def read_sample(path: str | Path, format: str = "auto") -> Sample:
    """Load one shard. Raises :class:`ShardReadError` with a rule code on any failure."""
    path = Path(path)
    if not path.is_file():
        raise ShardReadError("EC001", "no such file" if not path.exists() else "not a file")
    if path.stat().st_size == 0:
        raise ShardReadError(
            "EC002", "the file is empty", "the file was probably cut short while writing"
        )
    try:
        if path.name.endswith(".safetensors"):
            tensors: Any = _safetensors_load(path)
        else:
            tensors = _torch_load(path)
    except OSError as exc:
        raise ShardReadError("EC001", f"cannot read: {exc.strerror or exc}") from None
    if not isinstance(tensors, dict):
        raise ShardReadError(
            "EC001",
            f"holds a {type(tensors).__name__}, not a dict of tensors",
            "a shard is a dict of named tensors",
        )
    if not any(hasattr(v, "shape") or isinstance(v, (list, tuple)) for v in tensors.values()):
        raise ShardReadError(
            "EC001",
            f"holds no tensors (keys {sorted(map(str, tensors))})",
            "a shard is a dict of named tensors",
        )
    fmt = FORMATS[format] if format != "auto" else detect(path.name, set(tensors))
    if fmt is None:
        raise ShardReadError(
            "EC001",
            "not a shard of any known format",
            "name the format in the contract: training.format",
        )
    return Sample(path, fmt, dict(tensors), fmt.read_extras(path, tensors))
