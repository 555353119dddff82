"""Benchmark: memory under load, and what an interrupted run keeps.

Makes (once, deterministically) N small speculators v1 shards (3 bf16 states of [32, 64],
each file read by the tool; 15 KB each) in DIR (default: $TMPDIR/eagle-bench-load-N),
then runs, as whole processes,

  audit    eagle-contract audit CONTRACT DIR --workers W   (an empty --cache each time)
  pytest   pytest --eagle-contract CONTRACT --eagle-shards DIR --eagle-sample all -n W
           --eagle-batch B   (once per B of --batch: by default 1, one item per check and
           shard, then auto, the default, which batches above 1,000 shards)

and samples the resident memory of the whole process tree (the command and every
descendant: its workers; the sum of /proc/PID/status VmRSS) every 0.5 s, with the
progress at that moment (audit: the lines its cache holds, one per finished shard; pytest:
the share of its items xdist's controller has printed, of the shards). Per command it prints
the shards, the wall time, the peak tree RSS, the tree RSS at 10 %, 50 % and 90 % of the
progress, and the slope (MiB per 1,000 shards) of a least-squares line through the samples
after the warm-up (the first 10 % of the progress), for the tree, the main process and the
largest worker. A flat run has a slope near 0; a run that keeps 100 KiB per shard shows
about 98 MiB per 1,000 shards.

Then the interrupt (skipped with --no-interrupt):

  audit    SIGINT to its process group (what Ctrl-C on a terminal does) at half the
           shards, then the same command again: the second run must report every shard,
           taking from the cache every shard the first run reported as read;
  pytest   SIGINT at half the items, with --junitxml and --eagle-json-report PATH.json: says
           whether each file was written, and what it holds.

    python benchmarks/bench_load.py [--shards 10000 | --quick] [--workers 8] [--dir DIR]
                                    [--only audit|pytest] [--no-interrupt] [--samples CSV]
                                    [--batch 1,auto]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import kinds

sys.path.extend(kinds.folders())

T, H = 32, 64
UNITS_PER_SHARD = 3  # structure, values, norms
MIB = 1 << 20
WARM_UP = 0.10  # the share of the progress left out of the fit


def make_set(root: Path, n: int) -> Path:
    """``n`` shards under ``root/shards`` and the contract ``root/c.yaml``; made once (a
    stamp file says the set is complete)."""
    from test_audit import contract_text, write_set  # the audit tests' shards, larger

    stamp = root / f".made-{n}"
    contract = root / "c.yaml"
    text = contract_text("load-bench", H)
    if stamp.exists() and contract.read_text() == text:
        return contract
    shutil.rmtree(root / "shards", ignore_errors=True)
    (root / "shards").mkdir(parents=True)
    contract.write_text(text)
    start = time.perf_counter()
    write_set(root / "shards", n, tokens=T, hidden=H)
    stamp.touch()
    print(f"made {n} shards in {root / 'shards'} in {time.perf_counter() - start:.0f} s")
    return contract


# -- the process tree's memory ---------------------------------------------------------------


def _status(pid: int) -> tuple[int, int] | None:
    """(parent pid, VmRSS in bytes) of ``pid``, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    ppid = rss = 0
    for line in text.splitlines():
        if line.startswith("PPid:"):
            ppid = int(line.split()[1])
        elif line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    return ppid, rss


def tree_rss(root: int) -> tuple[int, int, int, int]:
    """(the tree's RSS, the root's, the largest descendant's, processes) in bytes."""
    info = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            got = _status(int(entry))
            if got is not None:
                info[int(entry)] = got
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _) in info.items():
        kids.setdefault(ppid, []).append(pid)
    total, largest, count = 0, 0, 0
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid not in info:
            continue
        rss = info[pid][1]
        total += rss
        count += 1
        if pid != root:
            largest = max(largest, rss)
        todo += kids.get(pid, [])
    return total, info.get(root, (0, 0))[1], largest, count


@dataclass
class Sample:
    t: float
    done: int  # shards finished
    tree: int
    main: int
    worker: int
    procs: int


@dataclass
class Run:
    name: str
    shards: int
    rc: int = 0
    wall: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    output: str = ""


def watch(
    name: str,
    cmd: list[str],
    shards: int,
    progress: Callable[[str], int],
    *,
    stop_at: float | None = None,
    cwd: Path | None = None,
    interval: float = 0.5,
) -> Run:
    """Run ``cmd``, sampling its tree's memory and ``progress(output so far)`` (shards done)
    every ``interval`` s; with ``stop_at`` (a share of ``shards``), SIGINT its process group
    there."""
    run = Run(name, shards)
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        start_new_session=True,  # its own process group: the SIGINT a terminal would send
        # Ctrl-C on, as on a terminal, whatever this process inherited
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    chunks: list[bytes] = []

    def read() -> None:
        assert proc.stdout is not None
        while data := os.read(proc.stdout.fileno(), 1 << 16):
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    sent = False
    while proc.poll() is None:
        tree, main, worker, procs = tree_rss(proc.pid)
        done = progress(b"".join(chunks).decode(errors="replace"))
        if tree:
            run.samples.append(Sample(time.perf_counter() - start, done, tree, main, worker, procs))
        if stop_at is not None and not sent and done >= stop_at * shards:
            os.killpg(proc.pid, signal.SIGINT)
            sent = True
        time.sleep(interval)
    run.rc = proc.wait()
    run.wall = time.perf_counter() - start
    reader.join(timeout=10)
    run.output = b"".join(chunks).decode(errors="replace")
    return run


def cache_progress(cache: Path) -> Callable[[str], int]:
    """Shards an audit has finished: the lines of its cache (one appended per shard)."""

    def done(_: str) -> int:
        n = 0
        for path in cache.glob("*.jsonl"):
            try:
                with open(path, "rb") as f:
                    n += sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
            except OSError:
                pass
        return n

    return done


_ITEMS = re.compile(r"\[(\d+) items?\]")
_PERCENT = re.compile(r"\[\s*\d+%\]")


def pytest_results(output: str) -> tuple[int, int]:
    """``(results printed, items)``: the result letters xdist's controller has printed after
    its ``N workers [M items]`` line, up to the summary, and M."""
    m = _ITEMS.search(output)
    if m is None:
        return 0, 0
    rest = output[m.end() :]
    end = rest.find("\n=")
    rest = _PERCENT.sub("", rest if end < 0 else rest[:end])
    return sum(rest.count(c) for c in ".FEsxX"), int(m.group(1))


def pytest_progress(shards: int) -> Callable[[str], int]:
    """Shards pytest has finished: its share of the items done, of ``shards`` (an item is
    one check on one shard, or --eagle-batch's every check on a batch of shards)."""

    def done(output: str) -> int:
        printed, items = pytest_results(output)
        return printed * shards // items if items else 0

    return done


# -- figures ----------------------------------------------------------------------------------


def fit(points: list[tuple[float, float]]) -> float:
    """The least-squares slope of y over x (0 when x does not vary)."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    return sxy / sxx if sxx else 0.0


def steady(run: Run) -> list[Sample]:
    """The samples after the warm-up and before the end (the last shard is counted)."""
    return [s for s in run.samples if WARM_UP * run.shards <= s.done < run.shards]


def at(run: Run, share: float) -> Sample | None:
    """The first sample at or past ``share`` of the progress."""
    for s in run.samples:
        if s.done >= share * run.shards:
            return s
    return None


def slopes(run: Run) -> dict[str, float]:
    """MiB per 1,000 shards, after the warm-up, of the tree, the main process, a worker."""
    pts = steady(run)
    out = {}
    for key in ("tree", "main", "worker"):
        out[key] = fit([(s.done, getattr(s, key)) for s in pts]) * 1000 / MIB
    return out


def halves(run: Run) -> tuple[int, int]:
    """The peak tree RSS in the first half of the progress (after the warm-up) and in the
    second (before the last shard: the report at the end is not per shard)."""
    first = [s.tree for s in steady(run) if s.done < run.shards / 2]
    second = [s.tree for s in steady(run) if s.done >= run.shards / 2]
    return max(first, default=0), max(second, default=0)


def mib(b: float) -> str:
    return f"{b / MIB:.1f}"


def describe(run: Run) -> str:
    peak = max(run.samples, key=lambda s: s.tree, default=None)
    lines = [
        f"{run.name}: {run.shards} shards, exit {run.rc}, {run.wall:.1f} s, "
        f"{len(run.samples)} samples, up to {max((s.procs for s in run.samples), default=0)} "
        "processes"
    ]
    if peak is None:
        return lines[0] + "\n  no samples"
    lines.append(f"  peak tree RSS {mib(peak.tree)} MiB (at {peak.done} shards, {peak.t:.0f} s)")
    marks = []
    for share in (0.1, 0.5, 0.9):
        s = at(run, share)
        marks.append(
            f"{share:.0%}: {mib(s.tree)} (main {mib(s.main)}, worker {mib(s.worker)})"
            if s
            else f"{share:.0%}: -"
        )
    lines.append("  tree RSS MiB at  " + ";  ".join(marks))
    sl = slopes(run)
    lines.append(
        f"  slope after warm-up, MiB per 1,000 shards: tree {sl['tree']:+.2f}, "
        f"main {sl['main']:+.2f}, largest worker {sl['worker']:+.2f} "
        f"({len(steady(run))} samples)"
    )
    first, second = halves(run)
    lines.append(
        f"  peak tree RSS after the warm-up: first half {mib(first)} MiB, second half "
        f"{mib(second)} MiB"
    )
    return "\n".join(lines)


# -- the commands ----------------------------------------------------------------------------


def tool() -> list[str]:
    exe = Path(sys.executable).with_name("eagle-contract")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "pytest_eagle_contract"]


def audit_cmd(contract: Path, shards: Path, workers: int, cache: Path, *extra: str) -> list[str]:
    return [
        *tool(),
        "audit",
        str(contract),
        str(shards),
        "--workers",
        str(workers),
        "--cache",
        str(cache),
        "-q",
        *extra,
    ]


def pytest_cmd(contract: Path, shards: Path, workers: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        "--eagle-contract",
        str(contract),
        "--eagle-shards",
        str(shards),
        "--eagle-sample",
        "all",
        "-n",
        str(workers),
        *extra,
    ]


def run_audit(
    contract: Path, work: Path, n: int, workers: int, *extra: str, interval: float = 0.5
) -> Run:
    cache = work / "audit-cache"
    shutil.rmtree(cache, ignore_errors=True)
    cmd = audit_cmd(contract, contract.parent / "shards", workers, cache, *extra)
    name = f"audit --workers {workers}"
    return watch(name, cmd, n, cache_progress(cache), interval=interval)


def run_pytest(
    contract: Path, work: Path, n: int, workers: int, *extra: str, interval: float = 0.5
) -> Run:
    cmd = pytest_cmd(contract, contract.parent / "shards", workers, *extra)
    name = " ".join(["pytest", f"-n {workers}", *extra])
    return watch(name, cmd, n, pytest_progress(n), cwd=work, interval=interval)


def save_samples(path: Path, runs: list[Run]) -> None:
    """The samples as CSV: run, seconds, shards done, tree, main and largest worker RSS."""
    lines = ["run,seconds,shards,tree_bytes,main_bytes,worker_bytes,processes"]
    for run in runs:
        lines += [
            f"{run.name},{s.t:.2f},{s.done},{s.tree},{s.main},{s.worker},{s.procs}"
            for s in run.samples
        ]
    path.write_text("\n".join(lines) + "\n")


def interrupt_audit(contract: Path, work: Path, n: int, workers: int) -> list[str]:
    cache = work / "audit-cache-interrupt"
    shutil.rmtree(cache, ignore_errors=True)
    a, b = work / "interrupted.json", work / "resumed.json"
    for p in (a, b):
        p.unlink(missing_ok=True)
    shards = contract.parent / "shards"
    first = watch(
        "audit, interrupted",
        audit_cmd(contract, shards, workers, cache, "--json", str(a)),
        n,
        cache_progress(cache),
        stop_at=0.5,
    )
    out = [f"audit: SIGINT at half the shards: exit {first.rc} after {first.wall:.1f} s"]
    if not a.exists():
        return [*out, "  FAIL: no report written by the interrupted run"]
    ra = json.loads(a.read_text())
    kept = cache_progress(cache)("")
    out.append(
        f"  interrupted report: complete {ra['complete']}, read {ra['read']}, "
        f"shards {ra['shards']}; cache lines {kept}"
    )
    second = watch(
        "audit, resumed",
        audit_cmd(contract, shards, workers, cache, "--json", str(b)),
        n,
        cache_progress(cache),
    )
    rb = json.loads(b.read_text())
    out.append(
        f"  rerun: exit {second.rc} in {second.wall:.1f} s, complete {rb['complete']}, "
        f"shards {rb['shards']} = read {rb['read']} + cached {rb['cached']}"
    )
    ok = (
        first.rc == 130
        and not ra["complete"]
        and rb["complete"]
        and rb["shards"] == n
        and rb["read"] + rb["cached"] == n
        and rb["cached"] >= ra["read"]
    )
    out.append(
        "  PASS: every shard reported, and every shard the first run reported came from the cache"
        if ok
        else "  FAIL: see the figures above"
    )
    return out


def interrupt_pytest(contract: Path, work: Path, n: int, workers: int) -> list[str]:
    xml, report = work / "interrupted.xml", work / "interrupted-eagle.json"
    for p in (xml, report):
        p.unlink(missing_ok=True)
    cmd = pytest_cmd(
        contract,
        contract.parent / "shards",
        workers,
        f"--junitxml={xml}",
        f"--eagle-json-report={report}",
    )
    run = watch("pytest, interrupted", cmd, n, pytest_progress(n), stop_at=0.5, cwd=work)
    printed, items = pytest_results(run.output)
    tail = [line for line in run.output.splitlines() if line.startswith("=")][-1:]
    out = [
        f"pytest: SIGINT at half the shards: exit {run.rc} after {run.wall:.1f} s; "
        f"about {printed} of {items} results printed; last line {tail[0] if tail else '-'}"
    ]
    if xml.exists():
        try:
            suite = ET.parse(xml).getroot()
            suite = suite if suite.tag == "testsuite" else suite[0]
            out.append(
                f"  --junitxml written: tests {suite.get('tests')}, failures "
                f"{suite.get('failures')}, errors {suite.get('errors')}, skipped "
                f"{suite.get('skipped')}, testcases {len(suite.findall('testcase'))}"
            )
        except (ET.ParseError, IndexError) as exc:
            out.append(f"  --junitxml written but unreadable: {exc}")
    else:
        out.append("  --junitxml NOT written")
    if report.exists():
        data = json.loads(report.read_text())
        reports = data.get("reports", [])
        units = sum(len(r.get("units", [])) for r in reports)
        flags = "; ".join(
            f"complete {r.get('complete')}, summary {r.get('summary')!r}" for r in reports
        )
        out.append(
            f"  --eagle-json-report written: ok {data.get('ok')}, {units} of "
            f"{n * UNITS_PER_SHARD + 2} unit(s) ({printed} of {items} items printed); "
            f"{flags or 'no contract reports'}"
        )
    else:
        out.append("  --eagle-json-report NOT written")
    if "Traceback" in run.output:
        out.append("  a traceback was printed:")
        at_tb = run.output.index("Traceback")
        out += ["    " + line for line in run.output[at_tb:].splitlines()[:20]]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=10000)
    parser.add_argument("--quick", action="store_true", help="1,000 shards")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--dir", type=Path, default=None, help="where the shard set is made")
    parser.add_argument("--only", choices=("audit", "pytest"), default=None)
    parser.add_argument("--no-interrupt", action="store_true")
    parser.add_argument("--samples", type=Path, help="write every sample here (CSV)")
    parser.add_argument(
        "--batch",
        default="1,auto",
        help="the pytest runs' --eagle-batch values, side by side (default 1,auto: one item "
        "per check and shard, then the default)",
    )
    args = parser.parse_args()
    n = 1000 if args.quick else args.shards
    root = args.dir or Path(tempfile.gettempdir()) / f"eagle-bench-load-{n}"
    contract = make_set(root, n)
    work = root / "work"
    work.mkdir(exist_ok=True)
    print(
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {n} shards of "
        f"3 x [{T}, {H}] bf16; --workers/-n {args.workers}\n"
    )
    runs = []
    todo: list[tuple[str, Callable[[], Run]]] = [
        ("audit", lambda: run_audit(contract, work, n, args.workers))
    ]
    for batch in args.batch.split(","):
        flag = f"--eagle-batch={batch}"
        todo.append(("pytest", lambda f=flag: run_pytest(contract, work, n, args.workers, f)))
    for name, fn in todo:
        if args.only not in (None, name):
            continue
        run = fn()
        runs.append(run)
        print(describe(run), flush=True)
        if run.rc not in (0, 1):
            print("  output tail:\n" + run.output[-3000:])
        print()
    if args.samples is not None:
        save_samples(args.samples, runs)
    if not args.no_interrupt:
        for name, stop in (("audit", interrupt_audit), ("pytest", interrupt_pytest)):
            if args.only not in (None, name):
                continue
            print("\n".join(stop(contract, work, n, args.workers)), flush=True)
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
