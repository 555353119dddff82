"""GGUF metadata, read without the ``gguf`` package: the key/value header of a llama.cpp model
file (a draft's baked aux ids live there), bounded and checked at every step. The tensor data
is never read. Every malformation is an :class:`~..errors.EagleContractError` naming the
file and the byte offset, never a traceback.

Layout (GGUF v2 and v3, little-endian): ``b"GGUF"``, version u32, tensor count u64, key/value
count u64, then per pair a string key (u64 length + UTF-8), a value type u32 and the value;
an array is an element type u32, a count u64 and the elements.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

from ..errors import EagleContractError

MAGIC = b"GGUF"
GGUF_PREFIX = "gguf:"  # a DraftConfig id key read from a GGUF file's metadata
_MAX_PAIRS = 1 << 16
_MAX_STRING = 1 << 20  # a key or a string value (chat templates run to tens of kB)
_MAX_ARRAY = 1 << 22  # elements (a tokenizer's vocabulary: a few hundred thousand)
_MAX_KEPT = 4096  # elements of an integer array kept (the rest are skipped)
_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9
_INTS = {0, 1, 2, 3, 4, 5, 10, 11}

Value = int | float | bool | str | tuple[object, ...] | None


def is_gguf(path: Path) -> bool:
    """Whether ``path`` is a regular file that starts like a GGUF file."""
    try:
        if not path.is_file():
            return False
        with path.open("rb") as fh:
            return fh.read(4) == MAGIC
    except OSError:
        return False


class _Reader:
    def __init__(self, fh: BinaryIO, path: Path) -> None:
        self.fh, self.path = fh, path

    def fail(self, what: str) -> EagleContractError:
        return EagleContractError(
            f"{self.path}: not a valid GGUF file: {what} at byte {self.fh.tell()}"
        )

    def take(self, n: int) -> bytes:
        data = self.fh.read(n)
        if len(data) != n:
            raise self.fail(f"ends early (wanted {n} bytes)")
        return data

    def scalar(self, fmt: str) -> int | float | bool:
        value: int | float | bool = struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
        return value

    def count(self, limit: int, what: str) -> int:
        n = int(self.scalar("<Q"))
        if n > limit:
            raise self.fail(f"{what} {n} is over the limit of {limit}")
        return n

    def string(self) -> str:
        raw = self.take(self.count(_MAX_STRING, "string length"))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("a string that is not UTF-8") from None

    def value(self, kind: int) -> Value:
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            inner = int(self.scalar("<I"))
            n = self.count(_MAX_ARRAY, "array length")
            if inner in _SCALARS:
                size = struct.calcsize(_SCALARS[inner])
                if inner in _INTS and n <= _MAX_KEPT:
                    data = self.take(n * size)
                    return tuple(struct.unpack(f"<{n}{_SCALARS[inner][1]}", data))
                self.take_skip(n * size)
                return None
            if inner == _STRING:
                for _ in range(n):
                    self.take_skip(self.count(_MAX_STRING, "string length"))
                return None
            raise self.fail(f"an array of value type {inner}")
        raise self.fail(f"value type {kind}")

    def take_skip(self, n: int) -> None:
        here = self.fh.tell()
        self.fh.seek(n, 1)
        if self.fh.tell() > self.size:
            self.fh.seek(here)
            raise self.fail(f"ends early (wanted {n} bytes)")

    @property
    def size(self) -> int:
        here = self.fh.tell()
        end = self.fh.seek(0, 2)
        self.fh.seek(here)
        return end


def read_metadata(path: str | Path) -> dict[str, Value]:
    """Every key of a GGUF file's header with its value (integer arrays up to 4096 elements
    as tuples; longer arrays and string arrays as None). Raises EagleContractError."""
    path = Path(path)
    if not path.is_file():
        raise EagleContractError(f"{path}: not a regular file")
    try:
        with path.open("rb") as fh:
            reader = _Reader(fh, path)
            if reader.take(4) != MAGIC:
                raise reader.fail("no GGUF magic")
            version = int(reader.scalar("<I"))
            if version not in (2, 3):
                raise reader.fail(f"GGUF version {version} (2 and 3 are read)")
            reader.scalar("<Q")  # tensor count: the tensors are not read
            pairs = reader.count(_MAX_PAIRS, "key/value count")
            out: dict[str, Value] = {}
            for _ in range(pairs):
                key = reader.string()
                out[key] = reader.value(int(reader.scalar("<I")))
            return out
    except OSError as exc:
        raise EagleContractError(f"{path}: cannot read: {exc.strerror or exc}") from None


def draft_ids(path: Path, meta: dict[str, Value]) -> dict[str, tuple[int, ...]]:
    """Every ``*.target_layers`` / ``*.extract_layers`` key of a GGUF draft's metadata, as
    DraftConfig id keys (``gguf:eagle3.target_layers``). Raises EagleContractError."""
    out: dict[str, tuple[int, ...]] = {}
    for key, value in meta.items():
        if key.endswith((".target_layers", ".extract_layers")):
            if not isinstance(value, tuple) or not all(type(i) is int for i in value):
                raise EagleContractError(f"{path}: GGUF {key} is not a list of integers")
            out[f"{GGUF_PREFIX}{key}"] = tuple(int(i) for i in value)  # type: ignore[call-overload]
    return out


def size(meta: dict[str, Value], suffix: str) -> int | None:
    """A whole-number field whose key ends in ``suffix`` (``.target_hidden_size``)."""
    for key, value in meta.items():
        if key.endswith(suffix) and type(value) is int and value > 0:
            return value
    return None
