"""Memory under load (issue 22, "Load"): an audit and a pytest run over many small shards hold
the memory of their whole process tree flat, shard after shard. The full measurement, at
10,000 shards and 8 workers, is ``python benchmarks/bench_load.py`` (docs/audit.md, "Load").

Each run's tree RSS (the command and its workers, /proc VmRSS) is sampled as it goes; the peak
in the second half of the shards (before the last: the report at the end is not per shard)
may not exceed the first half's (after a warm-up of 10 %) by more than 15 % + 20 MiB, and
the least-squares slope after the warm-up may not exceed 100 KiB per shard. The audit's set
is large enough that per-shard growth of 100 KiB fails both: its tree (about 120 MiB on 2
workers) would grow 59 MiB over the 600-shard second half against an allowance of 38 MiB.
pytest's tree (about 170 MiB) grows by design: the controller keeps every item's report
(pytest's TerminalReporter does; with the JUnit properties about 24 KiB per shard, measured
2026-12-03), so its real check is the slope (about 33 KiB per shard measured, 100 allowed).
Growth injected at 50-100 KiB per shard (a leak in Runner.shard) fails both tests.

Batched, one item per 10 shards, the pytest run grows about 2 KiB per shard (the items'
reports), and that is checked at 10 KiB.

Also here: the pool submits only a few tasks ahead (pool.imap), so the main process of an
audit or a check does not hold a future per shard file.
"""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_load as load  # noqa: E402

from pytest_eagle_contract.pool import imap, imap_ordered  # noqa: E402

MIB = 1 << 20


def figures(run: load.Run) -> str:
    return f"{load.describe(run)}\n{run.output[-2000:]}"


def kib_per_shard(run: load.Run) -> float:
    """The tree's growth after the warm-up (the slope is in MiB per 1,000 shards)."""
    return float(load.slopes(run)["tree"]) * 1024 / 1000


def assert_flat(
    run: load.Run, samples: int, growth: float, slack_mib: int, kib_per_shard_max: float
) -> None:
    """The run passed with at least ``samples`` steady samples, its second half at most
    ``growth`` times the first plus ``slack_mib``, and under ``kib_per_shard_max`` a shard."""
    assert run.rc == 0, figures(run)
    assert len(load.steady(run)) >= samples, "too few samples: " + figures(run)
    first, second = load.halves(run)
    assert second <= first * growth + slack_mib * MIB, figures(run)
    assert kib_per_shard(run) < kib_per_shard_max, figures(run)


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("load")
    return {n: load.make_set(root / str(n), n) for n in (1200, 500, 3000)}


@pytest.mark.slow
def test_an_audit_holds_its_memory_flat(sets: dict[int, Path], tmp_path: Path) -> None:
    n = 1200
    run = load.run_audit(sets[n], tmp_path, n, 2, interval=0.05)
    assert_flat(run, samples=6, growth=1.15, slack_mib=20, kib_per_shard_max=100)


@pytest.mark.slow
def test_pytest_n2_holds_its_memory_flat(sets: dict[int, Path], tmp_path: Path) -> None:
    """The controller keeps each item's report (pytest's TerminalReporter does); beyond that,
    nothing per shard: not the shards read, not the items' findings, not the workers'
    runners."""
    n = 500
    run = load.run_pytest(sets[n], tmp_path, n, 2, "--eagle-no-sharpness", interval=0.1)
    assert_flat(run, samples=8, growth=1.15, slack_mib=20, kib_per_shard_max=100)


@pytest.mark.slow
def test_pytest_batched_holds_its_memory_flat(sets: dict[int, Path], tmp_path: Path) -> None:
    """Batched (``--eagle-batch``; ``auto`` above 1,000 shards) the run grows by the item, not
    by the shard: measured 2026-12-03, about 2 KiB per shard at 10 shards per item, against
    24 KiB one item per check and shard; 10 allowed."""
    n = 3000
    run = load.run_pytest(
        sets[n], tmp_path, n, 2, "--eagle-no-sharpness", "--eagle-batch=10", interval=0.05
    )
    assert run.rc == 0, figures(run)
    assert load.pytest_results(run.output)[1] == n // 10, figures(run)  # one item per batch
    assert_flat(run, samples=8, growth=1.05, slack_mib=10, kib_per_shard_max=10)


def test_imap_submits_only_a_few_tasks_ahead() -> None:
    running, most = 0, 0
    lock = threading.Lock()

    def work(x: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.001)
        with lock:
            running -= 1
        return x * 2

    submitted = 0

    def items(n: int):  # type: ignore[no-untyped-def]
        nonlocal submitted
        for i in range(n):
            submitted += 1
            yield i

    with ThreadPoolExecutor(2) as pool:
        seen: list[tuple[int, int]] = []
        for item, future in imap(work, items(200), pool, ahead=5):
            assert submitted - len(seen) <= 5  # never more than 5 handed out and not back
            seen.append((item, future.result()))
        assert sorted(seen) == [(i, 2 * i) for i in range(200)]
        assert list(imap_ordered(work, items(50), pool, ahead=3)) == [2 * i for i in range(50)]


def test_imap_starts_the_pool_before_the_first_result_is_read() -> None:
    """The check's own units (layout, sharpness) run in the main process while the pool
    works the shards: imap hands the first tasks out at the call, not at the first read."""
    started = threading.Event()

    def work(x: int) -> int:
        started.set()
        return x

    with ThreadPoolExecutor(2) as pool:
        results = imap(work, range(10), pool, ahead=4)
        assert started.wait(10), "no task started before the results were read"
        assert sorted(item for item, _ in results) == list(range(10))


def test_closing_imap_early_runs_nothing_more() -> None:
    ran: list[int] = []

    def work(x: int) -> int:
        ran.append(x)
        time.sleep(0.01)
        return x

    with ThreadPoolExecutor(2) as pool:
        it = imap(work, range(1000), pool, ahead=4)
        next(it)
        it.close()
        ordered = imap_ordered(work, range(1000, 2000), pool, ahead=4)
        next(ordered)
        ordered.close()
    assert len(ran) <= 2 * 4 + 2  # at most what was in flight at the close, of 2,000
