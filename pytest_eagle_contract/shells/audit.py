"""``eagle-contract audit``: every shard read once, per-slot distributions, outlier shards,
drift against a previous audit; a cache by file identity so a rerun reads only new files."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .args import add_report_json, add_shards, add_workers
from .exit_codes import EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_OK


@contextmanager
def _ctrl_c_after() -> Iterator[None]:
    """Hold a Ctrl-C that lands inside the block until its end (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    before = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
    if held:
        raise KeyboardInterrupt


def add_parser(sub: Any) -> None:
    aud = sub.add_parser(
        "audit", help="read every shard: distributions, outlier shards, drift between runs"
    )
    aud.add_argument("contract", type=Path, metavar="CONTRACT", help="the contract YAML file")
    add_shards(aud)
    add_report_json(aud)
    aud.add_argument(
        "--against",
        type=Path,
        metavar="PREVIOUS",
        help="a previous audit's JSON report: name the slots whose norms moved",
    )
    add_workers(aud)
    aud.add_argument(
        "--cache",
        type=Path,
        metavar="DIR",
        help="keep per-file summaries here; it must be writable (default: "
        "$XDG_CACHE_HOME/eagle-contract/audit, skipped where it cannot be written)",
    )
    aud.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="local: worker processes here (default); ray: one Ray task per file (the ray extra)",
    )
    aud.add_argument(
        "--address", metavar="ADDR", help="Ray cluster to join (default: start a local one)"
    )


def audit(args: argparse.Namespace) -> int:
    from .. import outputs
    from ..audit import local
    from ..audit.cache import Cache
    from ..audit.report import build, findings_of, format_text, load_previous
    from ..contract.model import load_contract
    from ..pool import workers_option
    from ..reports.json_report import write
    from ..shards.discovery import shard_paths
    from .check import findings_text
    from .progress import steps

    if args.address is not None and args.backend != "ray":
        raise UsageError("--address is for --backend ray")
    workers = workers_option(args.workers)
    contract = load_contract(args.contract)
    if contract.training is None:
        raise UsageError(f"{args.contract}: no training section: no shards to audit")
    roots = list(args.paths) or [p for p in (contract.training.shards,) if p is not None]
    found = shard_paths(contract, args.paths or None, None, 0)
    reads = outputs.inputs(args.contract, *roots)
    if args.json_report is not None:
        outputs.checked_output(
            args.json_report, "--json-report", reads=reads, ours=b'"schema_version"'
        )
    previous = load_previous(args.against) if args.against is not None else None
    cache = Cache(args.cache, args.contract.read_bytes(), roots)
    checks = local.shard_families(contract)
    done, todo = [], []
    for path, label in found:
        full = os.path.abspath(path)
        kept = cache.get(full, label)
        if kept is not None:
            done.append(kept)
        else:
            todo.append((contract, full, label, checks))
    start = time.perf_counter()
    summaries = (
        _ray(todo, args.address) if args.backend == "ray" else local.run_local(todo, workers)
    )
    fresh = []
    complete = True
    try:
        for summary in steps(summaries, len(todo), "auditing"):
            with _ctrl_c_after():  # the cache and the report keep the same shards
                cache.put(summary)
                fresh.append(summary)
    except KeyboardInterrupt:
        complete = False
    finally:
        summaries.close()
        cache.close()
    if cache.problem and cache.asked:  # the default folder's: a note under -v
        print(f"warning: {cache.problem}; the next audit reads these shards again", file=sys.stderr)
    took = time.perf_counter() - start
    cost = {
        "backend": args.backend,
        "workers": workers if args.backend == "local" else None,
        "seconds": took,
        "bytes_read": sum(s.size for s in fresh),
        "file_seconds": sum(s.seconds for s in fresh),
    }
    report = build(
        contract,
        done + fresh,
        checks=checks,
        read=len(fresh),
        complete=complete,
        previous=previous,
        against=str(args.against),
        cost=cost,
    )
    findings = [f for s in sorted(done + fresh, key=lambda s: s.path) for f in findings_of(s)]
    if args.json:
        from ..render import to_json

        print(to_json(report))
    else:  # the verdict first, then what it rests on
        print(_summary(report, took))
        if not args.quiet:
            if findings:
                print(findings_text(findings, args.verbose))
            print("\n" + format_text(report))
    if args.json_report is not None:
        write(args.json_report, report, "--json-report", reads=reads)
    if not complete:
        where = f"kept in {cache.path}" if cache.kept else "not kept"
        print(
            f"interrupted: {len(fresh)} of {len(todo)} new shard(s) done and {where}; run the "
            "same command again to resume",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    return EXIT_OK if report["ok"] else EXIT_FINDINGS


def _ray(todo: list[Any], address: str | None) -> Any:
    from ..audit.ray_backend import run_ray

    return run_ray(todo, address)


def _summary(report: dict[str, Any], took: float) -> str:
    outl = len({o["path"] for o in report["outliers"]})
    moved = report["drift"]["moved"] if report["drift"] else []
    gb = report["cost"]["bytes_read"] / 1e9
    return (
        f"{_verdict(report)}: audit of {report['shards']} shard(s) "
        f"({report['read']} read, {report['cached']} cached, {gb:.2f} GB in {took:.1f} s): "
        f"{len(report['findings'])} finding(s), {outl} outlier shard(s)"
        + (f", drift in slot(s) {', '.join(map(str, moved))}" if moved else "")
    )


def _verdict(report: dict[str, Any]) -> str:
    if not report["complete"]:
        return "INTERRUPTED"
    return "ok" if report["ok"] else "FAILED"
