"""The safetensors layout read without the library: a JSON header, then every tensor's
bytes, end to end (as the library requires)."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np

from .stored import _NUMPY, MAX_DIMS, MAX_ENTRIES, Mapping, NotUnderstood, Stored

MAX_HEADER_BYTES = 16 << 20  # beyond, the safetensors library reads it (its cap: 100 MB)

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


def read_safetensors(mapping: Mapping) -> dict[str, Stored]:
    buffer = mapping.buffer
    (size,) = struct.unpack("<Q", buffer[:8])
    if size > min(MAX_HEADER_BYTES, len(buffer) - 8):
        raise NotUnderstood("header")
    header = json.loads(bytes(buffer[8 : 8 + size]))
    if not isinstance(header, dict) or len(header) > MAX_ENTRIES:
        raise NotUnderstood("header")
    base = 8 + size
    out: dict[str, Stored] = {}
    spans: list[tuple[int, int]] = []
    for key, entry in sorted(header.items()):  # in safetensors' own order: by name
        if key == "__metadata__":
            continue
        if not isinstance(entry, dict) or entry.get("dtype") not in _SAFETENSORS:
            raise NotUnderstood(key)
        dtype = _SAFETENSORS[entry["dtype"]]
        shape: Any = entry.get("shape")
        offsets: Any = entry.get("data_offsets")
        if not ints(shape, MAX_DIMS) or not ints(offsets, 2, exactly=True):
            raise NotUnderstood(key)
        count = product(shape)
        begin, end = int(offsets[0]), int(offsets[1])
        if end - begin != count * np.dtype(_NUMPY[dtype]).itemsize:
            raise NotUnderstood(key)
        out[key] = mapping.stored(dtype, mapping.view(dtype, base + begin, count).reshape(shape))
        spans.append((begin, end))
    if not _tiled(spans, len(buffer) - base):
        raise NotUnderstood("offsets")  # overlapping or gapped: the library refuses it; let it
    return out


def _tiled(spans: list[tuple[int, int]], length: int) -> bool:
    """The data spans cover [0, length) end to end, as the safetensors library requires."""
    at = 0
    for begin, end in sorted(spans):
        if begin != at:
            return False
        at = end
    return at == length


def ints(value: Any, most: int, exactly: bool = False) -> bool:
    return (
        isinstance(value, (list, tuple))
        and (len(value) == most if exactly else len(value) <= most)
        and all(type(v) is int and v >= 0 for v in value)
    )


def product(shape: Any) -> int:
    count = 1
    for n in shape:
        count *= n
    return count
