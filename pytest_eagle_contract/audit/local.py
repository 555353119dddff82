"""The per-file work of an audit, and the local backend: a pool of worker processes."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .summaries import FileSummary

if TYPE_CHECKING:
    from ..contract.model import Contract

Task = tuple["Contract", str, str, tuple[str, ...]]
"""What one file's work needs: the contract, the path, its label, the families to run."""


def shard_families(contract: Contract) -> tuple[str, ...]:
    """The families an audit runs on every shard: the default per-shard ones that need
    nothing beyond the shard (structure, values, norms)."""
    from ..plan.planner import families

    return tuple(
        f.name for f in families(contract) if f.scope == "shard" and f.needs <= {"training"}
    )


def summarize_file(task: Task) -> FileSummary:
    """Read one shard once: its findings, per-slot median norms, length and mask coverage."""
    from ..checks.unit import Unit
    from ..plan.planner import Runner
    from ..shards.reading import comparable

    contract, path, label, checks = task
    start = time.perf_counter()
    st = os.stat(path)
    runner = Runner(keep=1)
    findings = [
        f.to_dict() for name in checks for f in runner.run(Unit(contract, name, Path(path), label))
    ]
    shard = runner.shard(contract, Path(path), label)
    medians: list[float | None] = []
    tokens = coverage = None
    if shard.sample is not None:
        for slot in shard.slots:
            median = shard.stats(slot.index).median if slot.array.dim() == 2 else math.nan
            medians.append(None if math.isnan(median) else median)
        ids, mask = shard.sample.ids, shard.sample.mask
        tokens = None if ids is None else int(ids.numel())
        values = None if mask is None else comparable(mask)
        if values is not None and values.size:
            coverage = float((values != 0).sum()) / values.size
    runner.forget()
    return FileSummary(
        path,
        label,
        st.st_size,
        st.st_mtime_ns,
        st.st_ino,
        findings=findings,
        error=None if shard.error is None else shard.error.code,
        medians=medians,
        tokens=tokens,
        coverage=coverage,
        seconds=time.perf_counter() - start,
    )


def run_local(tasks: Sequence[Task], workers: int) -> Generator[FileSummary, None, None]:
    """Each task's summary as it finishes, on ``workers`` processes (here when 1)."""
    from ..pool import each

    yield from each(summarize_file, tasks, workers)
