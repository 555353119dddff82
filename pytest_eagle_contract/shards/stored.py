"""A tensor of a shard file read without torch (:class:`Stored`): its elements as a numpy
view of the file's memory map, and where those bytes are in the file, so that a pass over
all of them (the norms) reads them with ``pread`` into a buffer that stays in cache instead
of faulting every page of the map in (``benchmarks/bench_throughput.py`` prints both ways:
the copy was 1.45x faster on one machine, 0.9-1.06x on another as its state changed, and
keeps a worker's memory to its buffers).

:func:`.mapped.read_stored` maps a file and reads what it holds; ``torch_zip`` and
``safetensors_file`` read the two layouts. Nothing in a file is run, and every offset,
shape and stride is checked against the bytes that are there; whatever the reader does not
fully understand raises :class:`NotUnderstood`, and the caller reads the file with torch.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, Union

import numpy as np

if TYPE_CHECKING:
    import torch

MAX_ENTRIES = 1 << 14  # zip entries (one per storage) and safetensors keys
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

Array = Union["torch.Tensor", "Stored"]


class NotUnderstood(Exception):
    """The file holds something this reader does not read: let torch read it."""


class Place(NamedTuple):
    """Where a C-contiguous tensor's bytes are: the file (by path, and its device, inode,
    size and modification time when it was mapped) and the byte offset of the first one."""

    path: str
    identity: tuple[int, int, int, int]
    offset: int


def identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class Mapping:
    """One mapped file: makes the :class:`Stored` views of it, each knowing its place."""

    def __init__(self, path: str, st: os.stat_result, buffer: mmap.mmap) -> None:
        self.path, self.identity, self.buffer = path, identity(st), buffer
        self._base = np.frombuffer(buffer, np.uint8).ctypes.data if len(buffer) else 0

    def view(self, dtype: str, start: int, count: int) -> np.ndarray[Any, Any]:
        """``count`` elements of ``dtype`` at byte ``start``, all inside the file."""
        if dtype not in _NUMPY:
            raise NotUnderstood(dtype)
        item = np.dtype(_NUMPY[dtype])
        if start < 0 or count < 0 or start + count * item.itemsize > len(self.buffer):
            raise NotUnderstood("past the end")
        return np.frombuffer(self.buffer, item, count, start)

    def stored(self, dtype: str, raw: np.ndarray[Any, Any]) -> Stored:
        place = None
        if raw.size and raw.flags.c_contiguous:
            place = Place(self.path, self.identity, raw.ctypes.data - self._base)
        return Stored(dtype, raw, place)


def is_array(value: Any) -> bool:
    """A tensor, torch or :class:`Stored` (not a number, string or list)."""
    return hasattr(value, "dim") and hasattr(value, "shape")


def to_torch(t: Array) -> torch.Tensor:
    """``t`` as a torch tensor (a :class:`Stored` over the same bytes)."""
    return t.torch() if isinstance(t, Stored) else t


class Stored:
    """One tensor of a shard file: its dtype's name (``bfloat16``), its shape, and its
    elements as a numpy view of the file (bfloat16 as the uint16 bits). Indexing gives
    another view; :meth:`values` the numbers; :meth:`torch` a tensor over the same bytes;
    :meth:`chunks` its rows a chunk at a time, read from the file where its place is known."""

    __slots__ = ("dtype", "place", "raw")

    def __init__(self, dtype: str, raw: np.ndarray[Any, Any], place: Place | None = None) -> None:
        self.dtype = dtype
        self.raw = raw
        self.place = place

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
        return Stored(self.dtype, self.raw[index])  # a view: its place is not kept

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

    def chunks(self, rows: int) -> Iterator[tuple[int, np.ndarray[Any, Any]]]:
        """``(start, raw[start:start + rows])`` over the first axis. Where the tensor's
        place is known and the file is the one mapped (same device, inode, size and
        modification time), each chunk is read with ``pread`` into one reused buffer (a
        chunk sized to stay in cache; no page of the map is touched); else each is a view."""
        total = self.raw.shape[0] if self.raw.ndim else 0
        fd = self._open()
        if fd is None:
            yield from ((s, self.raw[s : s + rows]) for s in range(0, total, rows))
            return
        try:
            assert self.place is not None
            buffer = np.empty((min(rows, total), *self.raw.shape[1:]), self.raw.dtype)
            row_bytes = buffer[:1].nbytes
            for start in range(0, total, rows):
                chunk = buffer[: min(rows, total - start)]
                at = self.place.offset + start * row_bytes
                if os.preadv(fd, [chunk.data.cast("B")], at) != chunk.nbytes:
                    chunk = self.raw[start : start + rows]  # cut short meanwhile: the map's
                yield start, chunk
        finally:
            os.close(fd)

    def _open(self) -> int | None:
        """The file of :attr:`place`, opened again, if it is the file that was mapped."""
        if self.place is None or not self.raw.flags.c_contiguous or not hasattr(os, "preadv"):
            return None
        try:  # never blocks: a FIFO put in the file's place opens, then fails the check
            fd = os.open(self.place.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            if identity(os.fstat(fd)) == self.place.identity:
                return fd
        except OSError:
            pass
        os.close(fd)
        return None


def widen_bf16(
    bits: np.ndarray[Any, Any], out: np.ndarray[Any, Any] | None = None
) -> np.ndarray[Any, Any]:
    """bfloat16 bits (uint16) as float32: the bits are the float32's upper half."""
    if out is None:
        out = np.empty(bits.shape, np.float32)
    np.left_shift(bits, 16, out=out.view(np.uint32), dtype=np.uint32)
    return out
