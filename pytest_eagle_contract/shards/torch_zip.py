"""The torch zip layout (what ``torch.save`` writes) read without torch: a pickle of the
tensor dict, read by an unpickler that knows only the names a tensor dict uses, and one
zip entry of stored bytes per storage. A storage compressed inside the zip (a re-zipped
shard) is refused (EC002): torch would read its packed bytes as numbers."""

from __future__ import annotations

import io
import pickle
import struct
import zipfile
from collections import OrderedDict
from typing import Any, BinaryIO

import numpy as np

from ..errors import ShardReadError
from .safetensors_file import ints
from .stored import _NUMPY, MAX_DIMS, MAX_ENTRIES, Mapping, NotUnderstood, Stored

MAX_PICKLE_BYTES = 4 << 20  # a tensor dict's data.pkl is about 100 bytes a tensor
MAX_DIRECTORY_BYTES = 4 << 20

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


class _Frozen:
    """A stand-in the pickle may not change (its BUILD opcode calls ``__setstate__``)."""

    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        raise NotUnderstood("state")


class _Storage(_Frozen):
    """A storage the pickle names: its dtype and the zip entry that holds its bytes."""

    __slots__ = ("dtype", "key", "numel")

    def __init__(self, dtype: str, key: str, numel: int) -> None:
        self.dtype, self.key, self.numel = dtype, key, numel


class _StorageType(_Frozen):
    __slots__ = ("dtype",)

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype


def read_torch_zip(file: BinaryIO, mapping: Mapping) -> Any:
    buffer = mapping.buffer
    _small_directory(buffer)
    archive = zipfile.ZipFile(file)  # reads the central directory; the data stays mapped
    infos = archive.infolist()
    pickles = [i for i in infos if i.filename.endswith("/data.pkl") and i.filename.count("/") == 1]
    if len(pickles) != 1 or pickles[0].file_size > MAX_PICKLE_BYTES:
        raise NotUnderstood("data.pkl")
    prefix = pickles[0].filename.removesuffix("data.pkl")
    if not infos[0].filename.startswith(prefix):
        raise NotUnderstood("archive name")  # torch names the archive by its first entry
    version = next(
        (i for i in infos if i.filename in (prefix + "version", prefix + ".data/version")), None
    )
    if version is None or version.file_size > 16 or not _supported(archive.read(version)):
        raise NotUnderstood("version")  # torch refuses a file without a version it reads
    data_dir = prefix + "data/"
    entries = {i.filename[len(data_dir) :]: i for i in infos if i.filename.startswith(data_dir)}
    order = next((i for i in infos if i.filename == prefix + "byteorder"), None)
    if order is not None and (order.file_size > 16 or archive.read(order) != b"little"):
        raise NotUnderstood("byte order")  # torch swaps a big-endian file's bytes; let it
    storages: dict[str, _Storage] = {}
    data = _Unpickler(io.BytesIO(archive.read(pickles[0])), storages).load()
    views = {k: _entry(mapping, entries.get(k), s.dtype, s.numel) for k, s in storages.items()}
    return _rebuild(data, views, mapping, 0)


def _supported(version: bytes) -> bool:
    """A format version torch.save writes (1 to 10; torch 2.x writes 3)."""
    text = version.strip()
    return text.isdigit() and 1 <= int(text) <= 10


def _small_directory(buffer: Any) -> None:
    """The zip's end record (zip64's, which torch always writes, when there is one) says its
    central directory is small, so parsing it costs little: zipfile parses a directory
    whole, whatever its entry count says."""
    start = max(0, len(buffer) - (1 << 16) - 22)
    at = buffer.rfind(b"PK\x05\x06", start)
    if at < 0 or at + 22 > len(buffer):
        raise NotUnderstood("no end record")
    entries, size = struct.unpack("<HI", buffer[at + 10 : at + 16])
    if at >= 20 and buffer[at - 20 : at - 16] == b"PK\x06\x07":  # the zip64 locator
        (record,) = struct.unpack("<Q", buffer[at - 12 : at - 4])
        if record + 56 > len(buffer) or buffer[record : record + 4] != b"PK\x06\x06":
            raise NotUnderstood("zip64 end record")
        entries, size = struct.unpack("<QQ", buffer[record + 32 : record + 48])
    if entries > MAX_ENTRIES or size > MAX_DIRECTORY_BYTES:
        raise NotUnderstood("directory")


def _entry(mapping: Mapping, info: zipfile.ZipInfo | None, dtype: str, numel: int) -> Any:
    """The stored (uncompressed) bytes of a storage's zip entry, as ``numel`` elements."""
    buffer = mapping.buffer
    if info is None:
        raise NotUnderstood("storage entry")
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
        raise NotUnderstood("local header")
    name_len, extra_len = struct.unpack("<HH", buffer[start + 26 : start + 30])
    begin = start + 30 + name_len + extra_len
    if numel * np.dtype(_NUMPY.get(dtype, "u1")).itemsize > info.file_size:
        raise NotUnderstood("storage size")
    return mapping.view(dtype, begin, numel)


class _Tensor(_Frozen):
    """``_rebuild_tensor_v2``'s arguments; made a view once the storages are mapped."""

    __slots__ = ("offset", "size", "storage", "stride")

    def __init__(self, storage: Any, offset: Any, size: Any, stride: Any) -> None:
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride


def _rebuild_tensor_v2(storage: Any, offset: Any, size: Any, stride: Any, *rest: Any) -> _Tensor:
    """The stand-in for torch's: no gradient, no hooks (what torch.save writes for a plain
    tensor: ``False, OrderedDict()`` and maybe empty metadata)."""
    if len(rest) > 3 or (rest[:1] and rest[0] is not False) or any(rest[1:2]) or any(rest[2:3]):
        raise NotUnderstood("requires_grad, hooks or metadata")
    return _Tensor(storage, offset, size, stride)


def _rebuild(value: Any, views: dict[str, Any], mapping: Mapping, depth: int) -> Any:
    if depth > 4:
        raise NotUnderstood("nesting")
    if isinstance(value, _Tensor):
        return _strided(value, views, mapping)
    if isinstance(value, dict):
        return {k: _rebuild(v, views, mapping, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rebuild(v, views, mapping, depth + 1) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise NotUnderstood(type(value).__name__)


def _strided(t: _Tensor, views: dict[str, Any], mapping: Mapping) -> Stored:
    """The tensor's view of its storage, every element of it inside the storage."""
    storage, offset, size, stride = t.storage, t.offset, t.size, t.stride
    if not isinstance(storage, _Storage) or type(offset) is not int or offset < 0:
        raise NotUnderstood("tensor")
    if not ints(size, MAX_DIMS) or not ints(stride, MAX_DIMS) or len(size) != len(stride):
        raise NotUnderstood("tensor")
    raw = views[storage.key]
    if 0 in size:
        return Stored(storage.dtype, np.empty(tuple(size), raw.dtype))
    last = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    if last >= raw.size:
        raise NotUnderstood("tensor extent")
    shaped = np.lib.stride_tricks.as_strided(
        raw[offset:], shape=tuple(size), strides=tuple(s * raw.itemsize for s in stride)
    )
    return mapping.stored(storage.dtype, shaped)


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
            raise NotUnderstood(f"{module}.{name}") from None

    def persistent_load(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise NotUnderstood("persistent id")
        _, kind, key, _location, numel = pid
        if not isinstance(kind, _StorageType) or not isinstance(key, str) or type(numel) is not int:
            raise NotUnderstood("persistent id")
        if key in self._storages:
            return self._storages[key]
        if numel < 0 or len(self._storages) >= MAX_ENTRIES:
            raise NotUnderstood("storage")
        self._storages[key] = _Storage(kind.dtype, key, numel)
        return self._storages[key]
