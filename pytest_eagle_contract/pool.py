"""Work over many shard files on every core: a pool of worker processes (or threads).

Each task is one shard file, read once and dropped before the next, so a worker holds at
most one shard. Most shard checks run on numpy without torch (shards/stored.py); where torch
is used, workers run it with one intra-op thread: the cores are shared between files, not
inside one (small chunked reductions only lose to thread hand-offs).
Processes are the default: on 2 cores benchmarks/bench_throughput.py measured 64 shards
in 0.70 s with 2 processes against 0.84 s with 2 threads (2026-12-01), and processes keep
a worker's memory its own (one shard each) and scale past the GIL on many cores, where
unpickling and the checks' Python run in parallel too.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Literal, TypeVar

from .errors import UsageError

T = TypeVar("T")
R = TypeVar("R")
Kind = Literal["process", "thread"]


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def workers_option(value: int | None) -> int:
    """``--workers``: a positive count, or the machine's cores when not given."""
    if value is None:
        return default_workers()
    if value < 1:
        raise UsageError(f"--workers takes a positive number, not {value}")
    return value


def one_thread() -> None:
    """torch, when it is in use, on one intra-op thread (most shard checks never import it:
    see shards/stored.py)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


@contextmanager
def single_threaded() -> Iterator[None]:
    """torch on one intra-op thread inside the block (a worker's work done here), when
    torch is in use."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _worker_init() -> None:
    """A worker process: Ctrl-C is the parent's to handle (no traceback per worker)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ["OMP_NUM_THREADS"] = "1"  # what torch starts with, if this worker imports it
    one_thread()


def executor(workers: int, kind: Kind = "process") -> Executor:
    """A pool of ``workers``, each running torch (if it needs it) on one thread. Processes
    fork where the platform can (what is imported here is not imported again), else
    spawn."""
    if kind == "thread":
        one_thread()
        return ThreadPoolExecutor(workers)
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    return ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_init)


def imap(fn: Callable[[T], R], items: Iterable[T], pool: Executor) -> Iterator[tuple[T, Future[R]]]:
    """``fn`` over ``items`` on ``pool``: each item with its finished future, in order of
    completion. Closing the iterator early (Ctrl-C) cancels what has not started."""
    from concurrent.futures import as_completed

    futures = {pool.submit(fn, item): item for item in items}
    try:
        for future in as_completed(futures):
            yield futures[future], future
    finally:
        for future in futures:
            future.cancel()


def each(
    fn: Callable[[T], R], items: Sequence[T], workers: int, ordered: bool = False
) -> Iterator[R]:
    """``fn`` over ``items``, one item per task: here (torch on one thread) when there is
    one worker or one item, else on a pool of processes; results in the order given when
    ``ordered``, else as they finish. Closing the iterator early cancels what has not
    started."""
    if not items:
        return  # nothing to do: torch is not even imported
    if workers <= 1 or len(items) == 1:
        one_thread()
        yield from map(fn, items)
        return
    with executor(min(workers, len(items))) as pool:
        if ordered:
            yield from pool.map(fn, items)
        else:
            for _, future in imap(fn, items, pool):
                yield future.result()
