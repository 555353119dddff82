"""The audit on a Ray cluster: one task per shard file, the same per-file work as the local
backend (:func:`.local.summarize_file`), the summaries merged by the caller.

``ray`` is an optional extra (``pip install 'pytest-eagle-contract[ray]'``). Every node must
see the shard paths (a shared or identically mounted filesystem) and have this package
installed; each task asks for one CPU, so Ray spreads the files over the cluster's cores.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator, Sequence
from typing import Any

from ..errors import UsageError
from .local import Task, summarize_file
from .summaries import FileSummary

IN_FLIGHT = 4  # tasks per cluster CPU submitted ahead (bounds the driver's memory)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError(
            "--backend ray needs Ray: pip install 'pytest-eagle-contract[ray]'"
        ) from None
    return ray


def run_ray(tasks: Sequence[Task], address: str | None) -> Generator[FileSummary, None, None]:
    """Each task's summary as it finishes, one Ray task per file. Connects to ``address``
    (``auto``: the running cluster), or starts a local one when neither it nor a cluster
    in this process is there."""
    ray = _ray()
    if not ray.is_initialized():
        try:
            extra = {} if address else {"include_dashboard": False}  # a local one: no dashboard
            ray.init(address=address, log_to_driver=False, configure_logging=False, **extra)
        except Exception as exc:  # Ray raises bare Exception when its node cannot start
            what = (
                f"--address {address}: cannot join the Ray cluster"
                if address
                else ("--backend ray: cannot start a local Ray cluster")
            )
            raise UsageError(f"{what}: {_first_line(exc)}") from None
    remote = ray.remote(num_cpus=1, max_retries=2)(_one_thread_summary)
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    todo = deque(tasks)
    pending: list[Any] = []
    try:
        while todo or pending:
            while todo and len(pending) < IN_FLIGHT * cpus:
                pending.append(remote.remote(todo.popleft()))
            done, pending = ray.wait(pending, num_returns=1)
            try:
                yield ray.get(done[0])
            except ray.exceptions.RayError as exc:  # a worker died (memory, a node lost)
                raise UsageError(
                    f"--backend ray: a task failed on the cluster after retries: "
                    f"{_first_line(exc)}; the files done so far are in the cache, run the "
                    "same command again to resume"
                ) from None
    finally:
        for ref in pending:
            ray.cancel(ref)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def _one_thread_summary(task: Task) -> FileSummary:
    """One file on a Ray worker, torch on the one CPU the task holds."""
    from ..pool import one_thread

    one_thread()
    return summarize_file(task)
