"""Benchmark: ``eagle-contract check`` against a naive scan and a plain read of the bytes.

Makes Kimi-K2.5-sized shards (4 bf16 states of [1281, 7168], speculators v1 layout), then
times, side by side in one run, with the files in the page cache:

  read      cat FILES > /dev/null
  naive     torch.load(weights_only=False), then h.float().norm(dim=-1).mean() per state
  check     the core of `eagle-contract check` (all checks: structure, values, norms)

both in-process and as whole commands (interpreter start and imports included).

    python benchmarks/bench_check.py [--shards 8] [--repeat 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NAIVE = """
import sys, torch
for path in sys.argv[1:]:
    data = torch.load(path, weights_only=False)
    for h in data["hidden_states"]:
        h.float().norm(dim=-1).mean()
"""


def make_shards(root: Path, n: int) -> list[Path]:
    from pytest_eagle_contract.shards import synthetic
    from pytest_eagle_contract.shards.writing import write_shard

    paths = []
    for i in range(n):
        path = root / f"data_{i}.pt"
        if not path.exists():
            ids, mask, slots = synthetic.kimi_like_sample(seed=i)
            write_shard(root, "speculators-v1", i, ids, mask, slots)
        paths.append(path)
    contract = root / "kimi.yaml"
    contract.write_text("""contract: kimi-bench
version: 1
target: {num_hidden_layers: 61, hidden_size: 7168, vocab_size: 163840, dtype: bfloat16}
training:
  format: speculators-v1
  shards: .
  slots:
    - {layer: embed, norm: {median: 1.04, rtol: 0.5}}
    - {layer: residual:3, norm: {median: 37.2, rtol: 0.5}}
    - {layer: residual:31, norm: {median: 174.4, rtol: 0.5}}
    - {layer: residual:59, norm: {median: 111.3, rtol: 0.5}}
""")
    return paths


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    root = args.dir or Path(tempfile.gettempdir()) / "eagle-contract-bench"
    root.mkdir(parents=True, exist_ok=True)
    paths = make_shards(root, args.shards)
    files = [str(p) for p in paths]
    size = sum(p.stat().st_size for p in paths)

    import torch

    from pytest_eagle_contract.contract.model import load_contract
    from pytest_eagle_contract.planner import Runner, plan

    def read() -> None:
        subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)

    def naive() -> None:
        for path in files:
            data = torch.load(path, weights_only=False)
            for h in data["hidden_states"]:
                h.float().norm(dim=-1).mean()

    contract = load_contract(root / "kimi.yaml")

    def check() -> None:
        runner = Runner()
        findings = [f for u in plan(contract, sample=None) for f in runner.run(u)]
        assert not findings, findings

    exe = Path(sys.executable).with_name("eagle-contract")

    def naive_cmd() -> None:
        subprocess.run([sys.executable, "-c", NAIVE, *files], check=True)

    def check_cmd() -> None:
        subprocess.run(
            [str(exe), "check", str(root / "kimi.yaml"), "--sample", "all", "-q"],
            check=True,
            stdout=subprocess.DEVNULL,
        )

    read()  # warm the page cache
    t = {
        name: best(fn, args.repeat)
        for name, fn in (
            ("read", read),
            ("naive", naive),
            ("check", check),
            ("naive_cmd", naive_cmd),
            ("check_cmd", check_cmd),
        )
    }
    gb = size / 1e9
    print(
        f"{len(paths)} shards, {gb:.3f} GB, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, best of {args.repeat}"
    )
    print(f"{'':<26}{'seconds':>10}{'GB/s':>10}{'vs naive':>10}{'vs read':>10}")
    rows = (
        ("cat > /dev/null", "read", "naive"),
        ("naive scan (in-process)", "naive", "naive"),
        ("check (in-process)", "check", "naive"),
        ("naive scan (command)", "naive_cmd", "naive_cmd"),
        ("eagle-contract check", "check_cmd", "naive_cmd"),
    )
    for label, key, base in rows:
        print(
            f"{label:<26}{t[key]:>10.3f}{gb / t[key]:>10.2f}{t[base] / t[key]:>9.1f}x"
            f"{t['read'] / t[key]:>9.2f}x"
        )
    print(
        f"speed-up of check over the naive scan: in-process {t['naive'] / t['check']:.1f}x, "
        f"as commands {t['naive_cmd'] / t['check_cmd']:.1f}x; check runs at "
        f"{gb / t['check']:.2f} GB/s against {gb / t['read']:.2f} GB/s for cat "
        f"({statistics.fmean([t['read'] / t['check']]):.2f} of the page-cache read rate)"
    )


if __name__ == "__main__":
    main()
