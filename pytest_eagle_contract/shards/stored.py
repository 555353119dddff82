"""Shard files read without torch: a torch zip file or a safetensors file as numpy views
over one private memory map of the file.

The checks that need only keys, shapes, dtypes and numbers (structure, values, norms) run
on these, so a many-shard ``check``, ``audit``, ``infer`` or ``inspect`` never imports
torch; a check that needs a torch tensor gets one over the same bytes (:meth:`Stored.torch`,
no copy). Nothing in the file is run: the pickle of a torch file is read by an unpickler
that knows only the names a tensor dict uses, and every offset, shape and stride is checked
against the bytes that are there. Whatever this reader does not fully understand (a legacy
or gzip file, another global, a dtype numpy lacks, an extent past the storage) makes
:func:`read_stored` return None, and the caller reads the file with torch, whose refusal or
error then says what is wrong. One thing torch gets wrong is refused here: a storage
compressed inside the zip (a re-zipped shard), which torch reads as numbers (EC002).
"""

from __future__ import annotations

import io
import json
import mmap
import pickle
import struct
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Union

import numpy as np

from ..errors import ShardReadError

if TYPE_CHECKING:
    import torch

MAX_PICKLE_BYTES = 4 << 20  # a tensor dict's data.pkl is about 100 bytes a tensor
MAX_HEADER_BYTES = 16 << 20  # beyond, the safetensors library reads it (its cap: 100 MB)
MAX_ENTRIES = 1 << 14  # zip entries (one per storage) and safetensors keys
MAX_DIRECTORY_BYTES = 4 << 20
MAX_DIMS = 8

# dtype name -> how numpy holds its elements (bfloat16 as its uint16 bits)
_NUMPY: dict[str, str] = {
    "bfloat16": "<u2",
    "float16": "<f2",
    "float32": "<f4",
    "float64": "<f8",
    "int64": "<i8",
    "int32": "<i4",
    "int16": "<i2",
    "int8": "i1",
    "uint8": "u1",
    "bool": "?",
}
_STORAGES = {
    "BFloat16Storage": "bfloat16",
    "HalfStorage": "float16",
    "FloatStorage": "float32",
    "DoubleStorage": "float64",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
}
_SAFETENSORS = {
    "BF16": "bfloat16",
    "F16": "float16",
    "F32": "float32",
    "F64": "float64",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
}


Array = Union["torch.Tensor", "Stored"]
"""A tensor as a shard holds it: a torch tensor, or :class:`Stored` when torch was not
needed to read it. Both have ``dtype``, ``shape``, ``dim()``, ``numel()`` and indexing."""


def is_array(value: Any) -> bool:
    """A tensor, torch or :class:`Stored` (not a number, string or list)."""
    return hasattr(value, "dim") and hasattr(value, "shape")


def to_torch(t: Array) -> torch.Tensor:
    """``t`` as a torch tensor (a :class:`Stored` over the same bytes)."""
    return t.torch() if isinstance(t, Stored) else t


class Stored:
    """One tensor of a shard file: its dtype's name (``bfloat16``), its shape, and its
    elements as a numpy view of the file (bfloat16 as the uint16 bits). Indexing gives
    another view; :meth:`values` the numbers; :meth:`torch` a tensor over the same bytes."""

    __slots__ = ("dtype", "raw")

    def __init__(self, dtype: str, raw: np.ndarray[Any, Any]) -> None:
        self.dtype = dtype
        self.raw = raw

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.raw.shape)

    def dim(self) -> int:
        return int(self.raw.ndim)

    def numel(self) -> int:
        return int(self.raw.size)

    def is_floating_point(self) -> bool:
        return self.dtype.startswith(("float", "bfloat"))

    def __getitem__(self, index: Any) -> Stored:
        return Stored(self.dtype, self.raw[index])

    def __repr__(self) -> str:
        return f"Stored({self.dtype}, {list(self.shape)})"

    @classmethod
    def of(cls, tensor: torch.Tensor) -> Stored | None:
        """A torch tensor's elements as numpy holds them (no copy); None for a dtype numpy
        lacks (float8, complex, the wider unsigned ints)."""
        dtype = str(tensor.dtype).removeprefix("torch.")
        if dtype not in _NUMPY:
            return None
        plain = tensor.detach()
        if dtype == "bfloat16":
            import torch

            return cls(dtype, plain.view(torch.int16).numpy().view(np.uint16))
        return cls(dtype, plain.numpy())

    def values(self, out: np.ndarray[Any, Any] | None = None) -> np.ndarray[Any, Any]:
        """The numbers: bfloat16 widened to float32, other dtypes the view itself; into
        ``out`` (cast to its dtype) when given."""
        if self.dtype == "bfloat16":
            return widen_bf16(self.raw, out)
        if out is None:
            return self.raw
        np.copyto(out, self.raw, casting="unsafe")
        return out

    def torch(self) -> torch.Tensor:
        """A torch tensor over the same bytes (no copy)."""
        import torch

        if self.dtype == "bfloat16":
            return torch.from_numpy(self.raw.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(self.raw)


def widen_bf16(
    bits: np.ndarray[Any, Any], out: np.ndarray[Any, Any] | None = None
) -> np.ndarray[Any, Any]:
    """bfloat16 bits (uint16) as float32: the bits are the float32's upper half."""
    if out is None:
        out = np.empty(bits.shape, np.float32)
    np.left_shift(bits, 16, out=out.view(np.uint32), dtype=np.uint32)
    return out


class _Unknown(Exception):
    """The file holds something this reader does not read: let torch read it."""


def read_stored(path: Path) -> Any | None:
    """What a torch zip file or a safetensors file holds (dicts and lists of
    :class:`Stored`, plain numbers and strings), or None when torch should read it."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return None
            buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
            if path.name.endswith(".safetensors"):
                return _safetensors(buffer)
            if head[:4] == b"PK\x03\x04":
                return _torch_zip(f, buffer)
    except ShardReadError:
        raise
    except Exception:  # anything else at all: torch reads it, and says what is wrong
        return None
    return None


def _view(buffer: mmap.mmap, dtype: str, start: int, count: int) -> np.ndarray[Any, Any]:
    """``count`` elements of ``dtype`` at byte ``start``, all inside the file."""
    if dtype not in _NUMPY:
        raise _Unknown(dtype)
    item = np.dtype(_NUMPY[dtype])
    if start < 0 or count < 0 or start + count * item.itemsize > len(buffer):
        raise _Unknown("past the end")
    return np.frombuffer(buffer, item, count, start)


def _safetensors(buffer: mmap.mmap) -> dict[str, Stored]:
    (size,) = struct.unpack("<Q", buffer[:8])
    if size > min(MAX_HEADER_BYTES, len(buffer) - 8):
        raise _Unknown("header")
    header = json.loads(bytes(buffer[8 : 8 + size]))
    if not isinstance(header, dict) or len(header) > MAX_ENTRIES:
        raise _Unknown("header")
    base = 8 + size
    out: dict[str, Stored] = {}
    spans: list[tuple[int, int]] = []
    for key, entry in sorted(header.items()):  # in safetensors' own order: by name
        if key == "__metadata__":
            continue
        if not isinstance(entry, dict) or entry.get("dtype") not in _SAFETENSORS:
            raise _Unknown(key)
        dtype = _SAFETENSORS[entry["dtype"]]
        shape: Any = entry.get("shape")
        offsets: Any = entry.get("data_offsets")
        if not _ints(shape, MAX_DIMS) or not _ints(offsets, 2, exactly=True):
            raise _Unknown(key)
        count = _product(shape)
        begin, end = int(offsets[0]), int(offsets[1])
        if end - begin != count * np.dtype(_NUMPY[dtype]).itemsize:
            raise _Unknown(key)
        out[key] = Stored(dtype, _view(buffer, dtype, base + begin, count).reshape(shape))
        spans.append((begin, end))
    if not _tiled(spans, len(buffer) - base):
        raise _Unknown("offsets")  # overlapping or gapped: the library refuses it; let it
    return out


def _tiled(spans: list[tuple[int, int]], length: int) -> bool:
    """The data spans cover [0, length) end to end, as the safetensors library requires."""
    at = 0
    for begin, end in sorted(spans):
        if begin != at:
            return False
        at = end
    return at == length


def _ints(value: Any, most: int, exactly: bool = False) -> bool:
    return (
        isinstance(value, (list, tuple))
        and (len(value) == most if exactly else len(value) <= most)
        and all(type(v) is int and v >= 0 for v in value)
    )


def _product(shape: Any) -> int:
    count = 1
    for n in shape:
        count *= n
    return count


class _Frozen:
    """A stand-in the pickle may not change (its BUILD opcode calls ``__setstate__``)."""

    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        raise _Unknown("state")


class _Storage(_Frozen):
    """A storage the pickle names: its dtype and the zip entry that holds its bytes."""

    __slots__ = ("dtype", "key", "numel")

    def __init__(self, dtype: str, key: str, numel: int) -> None:
        self.dtype, self.key, self.numel = dtype, key, numel


class _StorageType(_Frozen):
    __slots__ = ("dtype",)

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype


def _torch_zip(file: BinaryIO, buffer: mmap.mmap) -> Any:
    _small_directory(buffer)
    archive = zipfile.ZipFile(file)  # reads the central directory; the data stays mapped
    infos = archive.infolist()
    pickles = [i for i in infos if i.filename.endswith("/data.pkl") and i.filename.count("/") == 1]
    if len(pickles) != 1 or pickles[0].file_size > MAX_PICKLE_BYTES:
        raise _Unknown("data.pkl")
    prefix = pickles[0].filename.removesuffix("data.pkl")
    if not infos[0].filename.startswith(prefix):
        raise _Unknown("archive name")  # torch names the archive by its first entry
    version = next(
        (i for i in infos if i.filename in (prefix + "version", prefix + ".data/version")), None
    )
    if version is None or version.file_size > 16 or not _supported(archive.read(version)):
        raise _Unknown("version")  # torch refuses a file without a version it reads
    data_dir = prefix + "data/"
    entries = {i.filename[len(data_dir) :]: i for i in infos if i.filename.startswith(data_dir)}
    order = next((i for i in infos if i.filename == prefix + "byteorder"), None)
    if order is not None and (order.file_size > 16 or archive.read(order) != b"little"):
        raise _Unknown("byte order")  # torch swaps a big-endian file's bytes; let it
    storages: dict[str, _Storage] = {}
    data = _Unpickler(io.BytesIO(archive.read(pickles[0])), storages).load()
    views = {key: _entry(buffer, entries.get(key), s.dtype, s.numel) for key, s in storages.items()}
    return _rebuild(data, views, 0)


def _supported(version: bytes) -> bool:
    """A format version torch.save writes (1 to 10; torch 2.x writes 3)."""
    text = version.strip()
    return text.isdigit() and 1 <= int(text) <= 10


def _small_directory(buffer: mmap.mmap) -> None:
    """The zip's end record (zip64's, which torch always writes, when there is one) says its
    central directory is small, so parsing it costs little: zipfile parses a directory
    whole, whatever its entry count says."""
    start = max(0, len(buffer) - (1 << 16) - 22)
    at = buffer.rfind(b"PK\x05\x06", start)
    if at < 0 or at + 22 > len(buffer):
        raise _Unknown("no end record")
    entries, size = struct.unpack("<HI", buffer[at + 10 : at + 16])
    if at >= 20 and buffer[at - 20 : at - 16] == b"PK\x06\x07":  # the zip64 locator
        (record,) = struct.unpack("<Q", buffer[at - 12 : at - 4])
        if record + 56 > len(buffer) or buffer[record : record + 4] != b"PK\x06\x06":
            raise _Unknown("zip64 end record")
        entries, size = struct.unpack("<QQ", buffer[record + 32 : record + 48])
    if entries > MAX_ENTRIES or size > MAX_DIRECTORY_BYTES:
        raise _Unknown("directory")


def _entry(buffer: mmap.mmap, info: zipfile.ZipInfo | None, dtype: str, numel: int) -> Any:
    """The stored (uncompressed) bytes of a storage's zip entry, as ``numel`` elements."""
    if info is None:
        raise _Unknown("storage entry")
    if info.compress_type != zipfile.ZIP_STORED:  # torch.load would read the packed bytes
        raise ShardReadError(
            "EC002",
            f"storage {info.filename} is compressed inside the zip: torch reads its packed "
            "bytes as numbers",
            "torch.save never compresses; the file was re-zipped: save the shard again with "
            "torch.save",
        )
    start = info.header_offset
    if start + 30 > len(buffer) or buffer[start : start + 4] != b"PK\x03\x04":
        raise _Unknown("local header")
    name_len, extra_len = struct.unpack("<HH", buffer[start + 26 : start + 30])
    begin = start + 30 + name_len + extra_len
    if numel * np.dtype(_NUMPY.get(dtype, "u1")).itemsize > info.file_size:
        raise _Unknown("storage size")
    return _view(buffer, dtype, begin, numel)


class _Tensor(_Frozen):
    """``_rebuild_tensor_v2``'s arguments; made a view once the storages are mapped."""

    __slots__ = ("offset", "size", "storage", "stride")

    def __init__(self, storage: Any, offset: Any, size: Any, stride: Any) -> None:
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride


def _rebuild_tensor_v2(storage: Any, offset: Any, size: Any, stride: Any, *rest: Any) -> _Tensor:
    """The stand-in for torch's: no gradient, no hooks (what torch.save writes for a plain
    tensor: ``False, OrderedDict()`` and maybe empty metadata)."""
    if len(rest) > 3 or (rest[:1] and rest[0] is not False) or any(rest[1:2]) or any(rest[2:3]):
        raise _Unknown("requires_grad, hooks or metadata")
    return _Tensor(storage, offset, size, stride)


def _rebuild(value: Any, views: dict[str, Any], depth: int) -> Any:
    if depth > 4:
        raise _Unknown("nesting")
    if isinstance(value, _Tensor):
        return _strided(value, views)
    if isinstance(value, dict):
        return {k: _rebuild(v, views, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rebuild(v, views, depth + 1) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise _Unknown(type(value).__name__)


def _strided(t: _Tensor, views: dict[str, Any]) -> Stored:
    """The tensor's view of its storage, every element of it inside the storage."""
    storage, offset, size, stride = t.storage, t.offset, t.size, t.stride
    if not isinstance(storage, _Storage) or type(offset) is not int or offset < 0:
        raise _Unknown("tensor")
    if not _ints(size, MAX_DIMS) or not _ints(stride, MAX_DIMS) or len(size) != len(stride):
        raise _Unknown("tensor")
    raw = views[storage.key]
    if 0 in size:
        return Stored(storage.dtype, np.empty(tuple(size), raw.dtype))
    last = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    if last >= raw.size:
        raise _Unknown("tensor extent")
    shaped = np.lib.stride_tricks.as_strided(
        raw[offset:], shape=tuple(size), strides=tuple(s * raw.itemsize for s in stride)
    )
    return Stored(storage.dtype, shaped)


_GLOBALS: dict[tuple[str, str], Any] = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("collections", "OrderedDict"): OrderedDict,
    **{("torch", name): _StorageType(dtype) for name, dtype in _STORAGES.items()},
}


class _Unpickler(pickle.Unpickler):
    """Builds only dicts, lists, numbers, strings and the tensor stand-ins above."""

    def __init__(self, file: io.BytesIO, storages: dict[str, _Storage]) -> None:
        super().__init__(file)
        self._storages = storages

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _GLOBALS[(module, name)]
        except KeyError:
            raise _Unknown(f"{module}.{name}") from None

    def persistent_load(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise _Unknown("persistent id")
        _, kind, key, _location, numel = pid
        if not isinstance(kind, _StorageType) or not isinstance(key, str) or type(numel) is not int:
            raise _Unknown("persistent id")
        if key in self._storages:
            return self._storages[key]
        if numel < 0 or len(self._storages) >= MAX_ENTRIES:
            raise _Unknown("storage")
        self._storages[key] = _Storage(kind.dtype, key, numel)
        return self._storages[key]
