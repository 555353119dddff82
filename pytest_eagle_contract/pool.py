"""Work over many shard files on every core: a pool of worker processes (or threads).

Each task is one shard file, read once and dropped before the next, so a worker holds at
most one shard. Most shard checks run on numpy without torch (shards/mapped.py); where torch
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
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
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
    see shards/mapped.py)."""
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


IN_FLIGHT = 4  # tasks submitted ahead per worker (bounds the caller's memory, see imap)


def _limit(pool: Executor, ahead: int | None) -> int:
    return max(1, ahead or IN_FLIGHT * (getattr(pool, "_max_workers", None) or 1))


def imap(
    fn: Callable[[T], R], items: Iterable[T], pool: Executor, ahead: int | None = None
) -> Generator[tuple[T, Future[R]], None, None]:
    """``fn`` over ``items`` on ``pool``: each item with its finished future, in order of
    completion. The first tasks are submitted at the call, so the pool works while the
    caller does something else before it reads the first result. At most ``ahead`` tasks
    (default: ``IN_FLIGHT`` per worker) are submitted and not yet handed back at any time,
    so the caller's memory does not grow with the number of items (a future and its work
    item cost about 2 KiB: 200 MB for 100,000 shard files submitted at once). Closing the
    iterator early (Ctrl-C) cancels what has not started; what was never submitted never
    runs (an iterator never read leaves its first ``ahead`` tasks to the pool's shutdown)."""
    from itertools import islice

    limit = _limit(pool, ahead)
    todo = iter(items)
    pending: dict[Future[R], T] = {pool.submit(fn, item): item for item in islice(todo, limit)}
    return _as_done(fn, todo, pending, pool, limit)


def _as_done(
    fn: Callable[[T], R],
    todo: Iterator[T],
    pending: dict[Future[R], T],
    pool: Executor,
    limit: int,
) -> Generator[tuple[T, Future[R]], None, None]:
    from concurrent.futures import FIRST_COMPLETED, wait
    from itertools import islice

    try:
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield pending.pop(future), future
            for item in islice(todo, limit - len(pending)):
                pending[pool.submit(fn, item)] = item
    finally:
        for future in pending:
            future.cancel()


def imap_ordered(
    fn: Callable[[T], R], items: Iterable[T], pool: Executor, ahead: int | None = None
) -> Generator[R, None, None]:
    """``fn`` over ``items`` on ``pool``, the results in the order given, with at most
    ``ahead`` tasks submitted ahead (as :func:`imap`; ``Executor.map`` submits them all at
    once). Closing the iterator early cancels what has not started."""
    from collections import deque
    from itertools import islice

    todo = iter(items)
    window: deque[Future[R]] = deque()
    try:
        window.extend(pool.submit(fn, item) for item in islice(todo, _limit(pool, ahead)))
        while window:
            result = window.popleft().result()
            window.extend(pool.submit(fn, item) for item in islice(todo, 1))
            yield result
    finally:
        for future in window:
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
            yield from imap_ordered(fn, items, pool)
        else:
            for _, future in imap(fn, items, pool):
                yield future.result()
