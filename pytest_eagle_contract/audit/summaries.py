"""What an audit keeps: one summary per shard file, and set summaries that merge.

A :class:`FileSummary` is plain data (JSON both ways): the worker's answer, the cache's
line. Set summaries (:class:`Moments`, :class:`Histogram`) have fixed bins, so two halves of
a set merge into exactly the summary of the whole, whichever machine summarised which half;
they are always built from the file summaries in path order, so every backend gives the
same floating-point sums.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import asdict, dataclass, field
from typing import Any

# Per-shard median norms: 8 log-spaced bins per decade from 1e-3 to 1e5.
NORM_EDGES = tuple(10 ** (k / 8) for k in range(-24, 41))
LENGTH_EDGES = tuple(float(2**k) for k in range(21))  # tokens: 1, 2, 4, ... 1Mi
COVERAGE_EDGES = tuple(k / 10 for k in range(11))  # share of tokens with loss_mask 1


@dataclass(frozen=True)
class FileSummary:
    """One shard file: its identity, findings, and per-slot median norms."""

    path: str
    label: str
    size: int
    mtime_ns: int
    inode: int
    findings: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None  # the read error's code, when it could not be read
    medians: list[float | None] = field(default_factory=list)  # per slot; None: not [T, H]
    tokens: int | None = None
    coverage: float | None = None  # share of tokens the loss mask keeps
    seconds: float = 0.0

    @property
    def identity(self) -> tuple[str, int, int, int]:
        return (self.path, self.size, self.mtime_ns, self.inode)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FileSummary:
        """Rebuild from :meth:`to_dict`; ValueError on anything else."""
        if not isinstance(data, dict) or set(data) != {f for f in cls.__dataclass_fields__}:
            raise ValueError("not a file summary")
        out = cls(**data)
        if not (
            isinstance(out.path, str)
            and all(isinstance(v, int) for v in (out.size, out.mtime_ns, out.inode))
            and isinstance(out.findings, list)
            and isinstance(out.medians, list)
            and all(m is None or isinstance(m, (int, float)) for m in out.medians)
        ):
            raise ValueError("not a file summary")
        return out


@dataclass
class Moments:
    """Count, sum, sum of squares, min and max: merge by adding."""

    count: int = 0
    total: float = 0.0
    squares: float = 0.0
    low: float = math.inf
    high: float = -math.inf

    def add(self, x: float) -> None:
        self.count += 1
        self.total += x
        self.squares += x * x
        self.low = min(self.low, x)
        self.high = max(self.high, x)

    def merge(self, other: Moments) -> None:
        self.count += other.count
        self.total += other.total
        self.squares += other.squares
        self.low = min(self.low, other.low)
        self.high = max(self.high, other.high)

    def to_dict(self) -> dict[str, float | int | None]:
        if not self.count:
            return {"count": 0, "mean": None, "std": None, "min": None, "max": None}
        mean = self.total / self.count
        var = max(0.0, self.squares / self.count - mean * mean)
        return {
            "count": self.count,
            "mean": mean,
            "std": math.sqrt(var),
            "min": self.low,
            "max": self.high,
        }


@dataclass
class Histogram:
    """Counts over fixed ``edges``: bin 0 below the first edge, bin i in [e[i-1], e[i])."""

    edges: tuple[float, ...]
    counts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.counts = self.counts or [0] * (len(self.edges) + 1)

    def add(self, x: float) -> None:
        self.counts[bisect.bisect_right(self.edges, x)] += 1

    def merge(self, other: Histogram) -> None:
        assert other.edges == self.edges
        self.counts = [a + b for a, b in zip(self.counts, other.counts)]

    def to_dict(self) -> dict[str, Any]:
        """The non-empty bins as ``[low, high, count]`` (None: unbounded)."""
        bounds = (None, *self.edges, None)
        return {"bins": [[bounds[i], bounds[i + 1], n] for i, n in enumerate(self.counts) if n]}


@dataclass
class SlotSummary:
    """One slot's per-shard median norms over the set."""

    moments: Moments = field(default_factory=Moments)
    histogram: Histogram = field(default_factory=lambda: Histogram(NORM_EDGES))

    def add(self, median: float) -> None:
        self.moments.add(median)
        self.histogram.add(median)

    def merge(self, other: SlotSummary) -> None:
        self.moments.merge(other.moments)
        self.histogram.merge(other.histogram)


@dataclass
class SetSummary:
    """The merged summaries of many files."""

    files: int = 0
    unreadable: int = 0
    slots: list[SlotSummary] = field(default_factory=list)
    lengths: Histogram = field(default_factory=lambda: Histogram(LENGTH_EDGES))
    coverage: Histogram = field(default_factory=lambda: Histogram(COVERAGE_EDGES))

    def add(self, f: FileSummary) -> None:
        self.files += 1
        self.unreadable += f.error is not None
        while len(self.slots) < len(f.medians):
            self.slots.append(SlotSummary())
        for slot, median in zip(self.slots, f.medians):
            if median is not None and math.isfinite(median):
                slot.add(median)
        if f.tokens is not None:
            self.lengths.add(f.tokens)
        if f.coverage is not None:
            self.coverage.add(f.coverage)

    def merge(self, other: SetSummary) -> None:
        self.files += other.files
        self.unreadable += other.unreadable
        while len(self.slots) < len(other.slots):
            self.slots.append(SlotSummary())
        for mine, theirs in zip(self.slots, other.slots):
            mine.merge(theirs)
        self.lengths.merge(other.lengths)
        self.coverage.merge(other.coverage)

    @classmethod
    def of(cls, files: list[FileSummary]) -> SetSummary:
        """The summary of ``files``, added in path order."""
        out = cls()
        for f in sorted(files, key=lambda f: f.path):
            out.add(f)
        return out
