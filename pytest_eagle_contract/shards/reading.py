"""Read one shard file into a :class:`Sample`, safely: no pickle code ever runs.

A torch zip file or a safetensors file is memory-mapped and read without torch
(:mod:`.stored`); anything that reader does not fully understand goes through
``torch.load(weights_only=True)`` (memory-mapped when the file allows) or safetensors.
Anything that fails becomes a :class:`ShardReadError` carrying the rule code, never a
crash.
"""

from __future__ import annotations

import functools
import gzip
import io
import os
import pickle
import re
import sys
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ShardReadError
from .formats import FORMATS, Format, Slot, detect, dtype_name
from .mapped import read_stored
from .precision import dequantized
from .stored import Array, Stored, is_array, to_torch

if TYPE_CHECKING:
    import numpy as np
    import torch

__all__ = ["Array", "Sample", "Slot", "comparable", "dtype_name", "read_sample", "widens"]

GUNZIP_CAP_ENV = "EAGLE_SHARD_MAX_GUNZIP_BYTES"
GUNZIP_CAP = 1 << 30  # a .ckpt.gz shard expands to at most 1 GiB unless the env var says more
GUNZIP_RATIO = 64  # ... and, past GUNZIP_FLOOR, to at most 64 times its compressed size
GUNZIP_FLOOR = 256 << 20
_CHUNK = 1 << 20


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
    def ids(self) -> Array | None:
        """The token ids as stored ([T]), torch or not."""
        return _flat_1d(self.tensors.get(self.format.ids_key))

    @property
    def mask(self) -> Array | None:
        """The loss mask as stored ([T]), torch or not."""
        key = self.format.mask_key
        mask = _flat_1d(self.tensors.get(key)) if key else None
        if mask is None and self.dataset_row is not None:
            mask = self.dataset_row.get("loss_mask")  # current speculators: the Arrow row
        return mask

    @property
    def input_ids(self) -> torch.Tensor | None:
        """The token ids as a torch tensor."""
        return None if (ids := self.ids) is None else to_torch(ids)

    @property
    def loss_mask(self) -> torch.Tensor | None:
        """The loss mask as a torch tensor."""
        return None if (mask := self.mask) is None else to_torch(mask)

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


def _flat_1d(t: Any) -> Array | None:
    if not is_array(t):
        return None
    out: Array = t[0] if t.dim() == 2 and t.shape[0] == 1 else t
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
        return load(_gunzip(path), False)
    with open(path, "rb") as raw:
        zipped = raw.read(4) == b"PK\x03\x04"
    if zipped and not zipfile.is_zipfile(path):
        raise ShardReadError(
            "EC002",
            "truncated zip container: its central directory is missing",
            "the file was probably cut short while writing",
        )
    return load(str(path), True)


def gunzip_cap(compressed: int | None = None) -> int:
    """The most bytes a compressed shard (of ``compressed`` bytes) may expand to:
    ``EAGLE_SHARD_MAX_GUNZIP_BYTES`` (a byte count, or with a K, M or G suffix), else 1 GiB
    and, past 256 MiB, 64 times the compressed size (real states compress less than 2:1;
    a gzip bomb, up to 1000:1)."""
    text = os.environ.get(GUNZIP_CAP_ENV, "").strip()
    if not text:
        if compressed is None:
            return GUNZIP_CAP
        return min(GUNZIP_CAP, max(GUNZIP_FLOOR, GUNZIP_RATIO * compressed))
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    try:
        value = int(text[:-1] if scale > 1 else text) * scale
    except ValueError:
        value = -1
    if value <= 0:
        raise ShardReadError(
            "EC001",
            f"{GUNZIP_CAP_ENV}={text!r} is not a size",
            "give a positive byte count such as 4G",
        )
    return value


def _gunzip(path: Path) -> io.BytesIO:
    """The expanded bytes of a gzip file, read a chunk at a time up to :func:`gunzip_cap`."""
    cap = gunzip_cap(path.stat().st_size)
    out = io.BytesIO()
    try:
        with gzip.open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                if out.tell() + len(chunk) > cap:
                    raise ShardReadError(
                        "EC001",
                        f"expands to more than {cap} bytes (a gzip bomb?)",
                        f"a shard this large is unusual; if it is real, set {GUNZIP_CAP_ENV}",
                    )
                out.write(chunk)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise ShardReadError(
            "EC002",
            f"gzip stream is truncated or corrupt: {exc}",
            "the file was probably cut short while writing",
        ) from None
    out.seek(0)
    return out


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
    except (TypeError, ValueError, RuntimeError) as exc:
        text = _first_line(str(exc))
        raise ShardReadError("EC001", f"unusable safetensors file: {text}") from None


def _as_torch(value: Any) -> Any:
    """What the mapped reader gave, with each :class:`Stored` a torch tensor (no copy)."""
    if isinstance(value, Stored):
        return value.torch()
    if isinstance(value, dict):
        return {k: _as_torch(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_torch(v) for v in value]
    return value


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "unknown error"
    return line.split(". ")[0][:200]


def read_sample(path: str | Path, format: str = "auto", *, arrays: bool = False) -> Sample:
    """Load one shard. Raises :class:`ShardReadError` with a rule code on any failure.

    The tensors are torch tensors; with ``arrays`` those the torch-free reader mapped stay
    :class:`~.stored.Stored` (the tool's own checks, which then never import torch)."""
    path = Path(path)
    if not path.is_file():
        raise ShardReadError("EC001", "no such file" if not path.exists() else "not a file")
    if path.stat().st_size == 0:
        raise ShardReadError(
            "EC002", "the file is empty", "the file was probably cut short while writing"
        )
    try:
        tensors: Any = read_stored(path)
        if tensors is not None and not arrays:
            tensors = _as_torch(tensors)
        elif tensors is None and path.name.endswith(".safetensors"):
            tensors = _safetensors_load(path)
        elif tensors is None:
            tensors = _torch_load(path)
    except OSError as exc:
        raise ShardReadError("EC001", f"cannot read: {exc.strerror or exc}") from None
    except MemoryError:
        raise ShardReadError(
            "EC001", "not enough memory to read it", "a shard is one sample: is this one?"
        ) from None
    if isinstance(tensors, list) and tensors and isinstance(tensors[0], dict):
        tensors = tensors[0]  # TensorRT-LLM saves a list of per-request dicts: the first
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
    tensors = _screened(tensors)
    fmt = FORMATS[format] if format != "auto" else detect(path.name, set(tensors))
    if fmt is None:
        raise ShardReadError(
            "EC001",
            "not a shard of any known format",
            "name the format in the contract: training.format",
        )
    for key in (fmt.ids_key, fmt.mask_key):
        value, flat = tensors.get(key or ""), _flat_1d(tensors.get(key or ""))
        if value is not None and (flat is None or flat.dim() != 1):
            found = (
                f"of shape {list(value.shape)}"
                if hasattr(value, "shape")
                else f"a {type(value).__name__}"
            )
            raise ShardReadError(
                "EC001",
                f"{key} is {found}, not a [T] or [1, T] tensor",
                "one id or mask value per token",
            )
    tensors, stored = dequantized(fmt, tensors)  # FP8 states as the trainer reads them
    extras = fmt.read_extras(path, tensors)
    return Sample(path, fmt, tensors, extras | ({"precision": stored} if stored else {}))


@functools.cache
def widens(dtype: Any) -> bool:
    """Whether torch can widen ``dtype`` to float64 (not the packed sub-byte dtypes, such as
    float4_e2m1fn_x2 or uint4, which it stores but cannot convert)."""
    import torch

    try:
        torch.zeros(1, dtype=dtype).to(torch.float64)
    except (RuntimeError, NotImplementedError, TypeError):
        return False
    return True


_DENSE_HINT = "a shard holds dense CPU tensors: save them with .to_dense() / .dequantize()"


def _screened(tensors: dict[Any, Any]) -> dict[str, Any]:
    """The dict with plain tensors only (a Parameter or a tensor that requires grad is
    detached); non-string keys and sparse, quantized, nested or meta tensors are refused."""
    torch = sys.modules.get("torch")  # no torch tensor exists unless torch was imported

    def plain(key: str, value: Any, top: bool = True) -> Any:
        if top and isinstance(value, (list, tuple)):
            return [plain(key, v, False) for v in value]
        if torch is None or not isinstance(value, torch.Tensor):
            return value
        kind = (
            "a nested"
            if value.is_nested
            else "a sparse"
            if value.layout != torch.strided
            else "a quantized"
            if value.is_quantized
            else "a meta"
            if value.is_meta
            else ""
        )
        if kind:
            raise ShardReadError("EC001", f"{key} holds {kind} tensor", _DENSE_HINT)
        if not widens(value.dtype):
            raise ShardReadError(
                "EC001",
                f"{key} holds {dtype_name(value.dtype)}, a packed dtype that cannot be read "
                "as numbers",
                "store hidden states as bfloat16, float16 or float32, and ids as integers",
            )
        return value.detach()

    bad = [k for k in tensors if not isinstance(k, str)]
    if bad:
        raise ShardReadError(
            "EC001",
            f"key {bad[0]!r} is a {type(bad[0]).__name__}, not a name",
            "a shard is a dict of named tensors",
        )
    return {k: plain(k, v) for k, v in tensors.items()}


def comparable(t: Array) -> np.ndarray[Any, Any] | None:
    """``t`` as int64 (integers, bool) or float64 (floating) numpy numbers, so every
    comparison works whatever the stored dtype (uint16, float8); None for complex and other
    dtypes."""
    import numpy as np

    if isinstance(t, Stored):
        return t.values().astype(np.float64 if t.is_floating_point() else np.int64)
    if t.is_complex():
        return None
    import torch

    wide = t.detach().to(torch.float64 if t.is_floating_point() else torch.int64)
    return wide.numpy()
