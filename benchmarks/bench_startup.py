"""pytest start-up with the plugin installed but off, against ``-p no:eagle_contract``.

Runs ``pytest --collect-only -q`` on a one-test project, alternating the two, and prints
the median wall time of each and their ratio.

    python benchmarks/bench_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    project = Path(tempfile.mkdtemp(prefix="eagle-startup-"))
    (project / "test_one.py").write_text("def test_one():\n    pass\n")
    base = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    variants = {"installed, off": base, "-p no:eagle_contract": [*base, "-p", "no:eagle_contract"]}
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.runs):
        for name, cmd in variants.items():
            start = time.perf_counter()
            subprocess.run(cmd, cwd=project, check=True, stdout=subprocess.DEVNULL)
            times[name].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    for name, value in med.items():
        print(f"{name:<24}{value * 1000:>8.1f} ms  (median of {args.runs})")
    ratio = med["installed, off"] / med["-p no:eagle_contract"]
    print(f"ratio: {ratio:.3f} ({(ratio - 1) * 100:+.1f} %)")


if __name__ == "__main__":
    main()
