"""When the guard measures the norm profile, and what it keeps of it.

The profile (each slot's median per-token norm, held to the contract's bounds: EC401) is
measured on every batch of the first ``warmup`` and then on one batch in ``every``; the
cheap checks run on every batch; with a target model, one profiled batch in
``identify_every`` also gets the slot identity (EC604). Each slot keeps a running profile
of the medians measured, which a violation's hint quotes (what the slot was before it
changed).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

KEPT = 256  # medians kept per slot for the running profile


@dataclass(frozen=True)
class Schedule:
    """Profile every batch below ``warmup``, then batches ``warmup``, ``warmup + every``, ..."""

    warmup: int = 100
    every: int = 100

    def __post_init__(self) -> None:
        for name, value, low in (("warmup", self.warmup, 0), ("every", self.every, 1)):
            if type(value) is not int or value < low:
                raise ValueError(f"{name} is {value!r}: a whole number >= {low}")

    def profiles(self, batch: int) -> bool:
        """Whether batch number ``batch`` (from 0) gets the norm profile."""
        return batch < self.warmup or (batch - self.warmup) % self.every == 0

    def identifies(self, batch: int, every_profiled: int) -> bool:
        """Whether batch number ``batch`` gets the slot identity: the profiled batches
        0, ``every_profiled``, 2 ``every_profiled``, ... (counted among profiled ones)."""
        if not self.profiles(batch):
            return False
        ordinal = (
            batch if batch < self.warmup else self.warmup + (batch - self.warmup) // self.every
        )
        return ordinal % every_profiled == 0


@dataclass
class RunningProfile:
    """One slot's medians over the batches profiled: how many, their median, range, last."""

    count: int = 0
    low: float = float("inf")
    high: float = float("-inf")
    last: float = float("nan")
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=KEPT), repr=False)

    def add(self, median: float) -> None:
        self.count += 1
        self.low, self.high = min(self.low, median), max(self.high, median)
        self.last = median
        self.recent.append(median)

    @property
    def median(self) -> float:
        """The median of the last :data:`KEPT` medians (NaN before any)."""
        return statistics.median(self.recent) if self.recent else float("nan")

    def describe(self) -> str:
        if not self.count:
            return "not measured yet"
        return (
            f"median {self.median:.4g} over {self.count} profiled row(s) "
            f"(range {self.low:.4g}-{self.high:.4g})"
        )
