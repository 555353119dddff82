"""Benchmark: `eagle-contract check` over many shards against the naive scan and `cat`.

Makes (once, deterministically) Kimi-K2.5-sized speculators v1 shards (4 bf16 states of
[1281, 7168], 73 MB each) in DIR (default: $TMPDIR/eagle-bench-kimi; 4.7 GB for 64), warms
the page cache, then times as whole processes,
side by side and interleaved in one run (best of --repeat):

  cat         cat FILES > /dev/null                       (the page-cache read rate)
  naive       torch.load, then h.float().norm(dim=-1) per state, one process
  check -w1   eagle-contract check --sample all --workers 1
  check -wN   eagle-contract check --sample all --workers N (default: the cores)
              and the same without the sharpness self-test (a fixed cost per contract)
  audit -wN   eagle-contract audit --workers N, on an empty cache each time
  inspect -wN eagle-contract inspect --workers N

and, in one process, the pool as threads against processes (the choice the CLI makes).
It prints the load average, each row's GB/s, ratio to the naive scan and share of the
page-cache rate, and the peak RSS of the check's main process and of its largest worker
(in the run whose time is shown: the first run of a changed checkout also runs the
sharpness self-test, which imports torch, before the workers fork).

Then, in this process on one core, where the time goes: start-up (the whole command on one
file minus one file's checks), opening and parsing the files, reading the states (pread
into cache-sized chunks), the norm kernel (widening and reducing), and the rest of the
checks; and, side by side on fresh maps, the norms read with ``pread`` (the tool's way)
against the same kernel on the map's own pages (which wins depends on the machine: what
its page faults cost against its copy rate).

Every command also runs on the first eighth of the files. The difference between the two
runs is each command's steady state (its cost per byte once started): start-up (above all
``import torch``, 1-6 s on this machine depending on load, paid by the naive scan and the
check alike) cancels out. The second table prints those marginal rates side by side.

    python benchmarks/bench_throughput.py [--shards 64] [--repeat 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

NAIVE = """
import sys, torch
for path in sys.argv[1:]:
    data = torch.load(path, weights_only=False)
    for h in data["hidden_states"]:
        h.float().norm(dim=-1).mean()
"""

# The check as a command, with the peak RSS (KiB) of its own process and of its largest child.
# The process's own peak is VmHWM (its address space's, new at exec): ru_maxrss would carry
# over the benchmark's own peak from before the exec.
CHECK = """
import resource, sys
from pytest_eagle_contract.shells.cli import main
rc = main(sys.argv[1:])
try:
    status = open("/proc/self/status").read().split("VmHWM:")[1]
    me = int(status.split()[0])
except (OSError, IndexError, ValueError):
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"RSS {me} {kids}", file=sys.stderr)
sys.exit(rc)
"""

CONTRACT = """contract: kimi-bench
version: 1
target: {num_hidden_layers: 61, hidden_size: 7168, vocab_size: 163840, dtype: bfloat16}
training:
  format: speculators-v1
  shards: .
  slots:
    - {layer: embed, norm: {median: 1.04, rtol: 0.1}}
    - {layer: residual:3, norm: {median: 37.2, rtol: 0.1}}
    - {layer: residual:31, norm: {median: 174.4, rtol: 0.1}}
    - {layer: residual:59, norm: {median: 111.3, rtol: 0.1}}
"""


EMPTY_CACHE = "{a new empty folder}"


def make_shards(root: Path, n: int) -> list[Path]:
    """``n`` Kimi-like shards in ``root`` (kept between runs) and a sharp contract."""
    from pytest_eagle_contract.shards import synthetic
    from pytest_eagle_contract.shards.writing import write_shard

    paths = []
    for i in range(n):
        path = root / f"data_{i}.pt"
        if not path.exists():
            ids, mask, slots = synthetic.kimi_like_sample(seed=i)
            write_shard(root, "speculators-v1", i, ids, mask, slots)
        paths.append(path)
    (root / "bench.yaml").write_text(CONTRACT)
    return paths


def run(cmd: list[str]) -> tuple[float, str]:
    cmd = [tempfile.mkdtemp() if part == EMPTY_CACHE else part for part in cmd]
    start = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{cmd[:4]} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return took, done.stderr


def in_process(root: Path, files: list[Path], workers: int, kind: str) -> float:
    from pytest_eagle_contract.contract.model import load_contract
    from pytest_eagle_contract.plan.planner import Runner, iter_units, plan

    contract = load_contract(root / "bench.yaml")
    units = plan(contract, files, sample=None, checks=("structure", "values", "norms"))
    start = time.perf_counter()
    done = iter_units(units, Runner(), workers, kind)  # type: ignore[arg-type]
    found = [f for _, checked in done for f in checked.findings]
    assert not found, found[:3]
    return time.perf_counter() - start


def where_time_goes(root: Path, paths: list[Path], whole_one: float) -> list[tuple[str, float]]:
    """One core, in this process, over every file: what each stage of the check costs.
    ``whole_one``: the whole command on one file (start-up plus that file)."""
    from pytest_eagle_contract.shards.mapped import read_stored
    from pytest_eagle_contract.shards.stats import CHUNK_ELEMENTS, token_norms
    from pytest_eagle_contract.shards.stored import Stored

    def states(data: Any) -> list[Any]:  # speculators v1: a list of [T, H] states
        return list(data["hidden_states"])

    def fresh_norms() -> float:  # fresh maps, as a check reads them: the parse included
        start = time.perf_counter()
        for path in paths:
            for h in states(read_stored(path)):
                token_norms(h)
        return time.perf_counter() - start

    start = time.perf_counter()
    held = [read_stored(p) for p in paths]
    parse = time.perf_counter() - start
    start = time.perf_counter()
    for data in held:
        for h in states(data):
            for _ in h.chunks(max(1, CHUNK_ELEMENTS // h.shape[-1])):
                pass
    read = time.perf_counter() - start
    start = time.perf_counter()
    for data in held:
        for h in states(data):
            token_norms(h)
    norms = time.perf_counter() - start
    del held
    by_pread = fresh_norms()
    opened = Stored._open
    Stored._open = lambda self: None  # type: ignore[method-assign]  # the map's views
    try:
        mapped = fresh_norms()
    finally:
        Stored._open = opened  # type: ignore[method-assign]
    checks = in_process(root, paths, 1, "process")
    per_file = checks / len(paths)
    return [
        ("start-up (one file's command minus one file's checks)", whole_one - per_file),
        ("open, map, parse the zip and pickle", parse),
        ("read the states (pread, cache-sized chunks)", read),
        ("widen and reduce (the norm kernel)", norms - read),
        ("the rest of the checks (verdicts, quantiles)", checks - parse - norms),
        ("all the checks, one core", checks),
        ("  side by side: parse and norms by pread (the tool's way)", by_pread),
        ("  side by side: parse and norms over the map's pages", mapped),
    ]


def compiled() -> None:
    """Byte-compile the package, as pip does when it installs the wheel: a checkout run with
    PYTHONDONTWRITEBYTECODE (or never imported) would otherwise compile every module in
    every command, about 0.2 s of start-up that no installed copy pays."""
    import compileall

    import pytest_eagle_contract

    compileall.compile_dir(Path(pytest_eagle_contract.__file__).parent, quiet=1)


def main() -> None:
    from pytest_eagle_contract.pool import default_workers

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=default_workers())
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "eagle-bench-kimi")
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    compiled()
    paths = make_shards(args.dir, args.shards)
    files = [str(p) for p in paths]
    gb = sum(p.stat().st_size for p in paths) / 1e9
    py = sys.executable
    contract = str(args.dir / "bench.yaml")
    check = [py, "-c", CHECK, "check", contract, *files, "--sample", "all", "-q"]
    commands = {
        "cat > /dev/null": ["cat", *files],
        "naive scan": [py, "-c", NAIVE, *files],
        "check --workers 1": [*check, "--workers", "1"],
        f"check --workers {args.workers}": [*check, "--workers", str(args.workers)],
        "  the same, --no-sharpness": [*check, "--workers", str(args.workers), "--no-sharpness"],
        f"audit --workers {args.workers}": [
            *check[:3], "audit", contract, *files, "-q", "--workers", str(args.workers),
            "--cache", EMPTY_CACHE,
        ],
        f"inspect --workers {args.workers}": [
            *check[:3], "inspect", *files, "--workers", str(args.workers),
        ],
    }  # fmt: skip
    few = files[: max(1, len(files) // 8)]
    gb_few = sum(Path(f).stat().st_size for f in few) / 1e9
    run(commands["cat > /dev/null"])  # warm the page cache
    best: dict[str, float] = {}
    best_few: dict[str, float] = {}
    rss: dict[str, tuple[int, int]] = {}
    for _ in range(args.repeat):  # interleaved: a load spike hits every row alike
        for name, cmd in commands.items():
            took_few, _ = run([*cmd[: cmd.index(files[0])], *few, *cmd[cmd.index(files[-1]) + 1 :]])
            best_few[name] = min(best_few.get(name, took_few), took_few)
            took, err = run(cmd)
            if took <= best.get(name, took):  # the peak memory of the run whose time is shown
                best[name] = took
                for line in err.splitlines():
                    if line.startswith("RSS "):
                        me, kids = map(int, line.split()[1:])
                        rss[name] = (me, kids)
        for kind, kinds in (("process", "processes"), ("thread", "threads")):
            name = f"in-process pool of {args.workers} {kinds}"
            took = in_process(args.dir, paths, args.workers, kind)
            best[name] = min(best.get(name, took), took)
    one = [py, "-c", CHECK, "check", contract, files[0], "--sample", "all", "-q", "--workers", "1"]
    whole_one = min(run([*one, "--no-sharpness"])[0] for _ in range(args.repeat))
    stages = min(
        (where_time_goes(args.dir, paths, whole_one) for _ in range(args.repeat)),
        key=lambda rows: rows[-1][1],
    )
    shard_mb = paths[0].stat().st_size / 2**20
    print(
        f"{len(paths)} shards, {gb:.2f} GB ({shard_mb:.0f} MiB each), {os.cpu_count()} cores, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, best of {args.repeat}"
    )
    print(f"{'':<34}{'seconds':>9}{'GB/s':>8}{'x naive':>9}{'of cat':>8}  peak RSS MiB")
    for name, took in best.items():
        peak = ""
        if name in rss:
            me, kids = (v / 1024 for v in rss[name])
            peak = f"main {me:.0f}" + (f", worker {kids:.0f}" if kids else "")
        ratio = f"{best['naive scan'] / took:>8.2f}x" if name in commands else f"{'-':>9}"
        print(
            f"{name:<34}{took:>9.2f}{gb / took:>8.2f}{ratio}"
            f"{best['cat > /dev/null'] / took:>7.0%}  {peak}"
        )
    print(f"goal: worker peak <= one shard + 300 MiB = {shard_mb + 300:.0f} MiB")
    print(f"\nwhere the time goes: one core, {gb:.2f} GB (in-process; start-up: whole commands)")
    for name, took in stages:
        print(f"{name:<60}{took:>7.3f} s")
    print(
        f"\nsteady state: {len(files)} files minus the first {len(few)} "
        f"({gb - gb_few:.2f} GB), start-up cancelled out"
    )
    print(f"{'':<34}{'seconds':>9}{'GB/s':>8}{'x naive':>9}{'of cat':>8}")
    margin = {name: max(best[name] - best_few[name], 1e-3) for name in commands}
    for name, took in margin.items():
        print(
            f"{name:<34}{took:>9.2f}{(gb - gb_few) / took:>8.2f}"
            f"{margin['naive scan'] / took:>8.2f}x{margin['cat > /dev/null'] / took:>7.0%}"
        )


if __name__ == "__main__":
    main()
