"""Throw issue 16's classes of hostile input at the ``eagle-contract`` CLI and tally the ends.

Inputs are made in code, each in a folder of its own: shards (the regression cases of
tests/hostile/test_hostile_shards.py, pickles that run code, a gzip bomb, truncations, flipped
bytes, random contents, safetensors headers), contracts (tests/hostile/test_hostile_contracts.py's
cases and random edits of a valid one), target model folders (tests/hostile/test_hostile_models.py),
capture files (tests/hostile/test_hostile_captures.py), HTTP answers from the SGLang stand-in
(tests/hostile/test_hostile_http.py's faults, a trickling and a silent server) and output paths
(onto a shard, a contract, /dev/full, through a link). Each runs as a child process with
an address-space limit and a timeout, and ends in one class, the first that applies:

    payload ran   a marker file a payload would create exists
    overwrote     a file beside the input changed, vanished or appeared (outputs go to out/)
    hang          still running at the timeout (killed)
    >4GB          peak RSS over 4 GiB, or the run ran out of memory
    traceback     a Python traceback on stderr, or an exit code outside {0, 1, 2, 69}
    changed verdict  (the matrix's fs class) not the exit code a normal run gives
    no finding    a shard's ``check`` has no finding for the bad file, or skipped the good one
    zero compared the run passed ("ok", exit 0) on 0 shards while running a family that
                  compares shards: a family that compared nothing must say so (EC009)
    ok            none of the above

    python benchmarks/hostile_sweep.py [--jobs 2] [--timeout 90] [--surfaces shards,http]
        [--fresh] [--keep]
    python benchmarks/hostile_sweep.py --matrix [--quick] ...   (benchmarks/hostile_matrix.py)

By default the children are forked from this process once it has imported the package and
torch (the same ``main(argv)`` the ``eagle-contract`` script calls, at a fraction of the
start-up cost); ``--fresh`` starts ``python -m pytest_eagle_contract`` for each input.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import kinds

sys.path.extend(kinds.folders())

import torch
from hostile_inputs import (
    Case,
    capture_cases,
    contract_cases,
    demo_world,
    doctor_cases,
    draft_config_cases,
    gguf_cases,
    http_cases,
    model_cases,
    output_cases,
    shard_cases,
    tokenizer_cases,
    vllm_file_cases,
)
from hostile_runner import report, run_all


def main() -> None:
    if "--matrix" in sys.argv[1:]:  # issue 22: input class x check family x shell
        import hostile_matrix

        hostile_matrix.main(sys.argv[1:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=90.0, help="seconds before a run is a hang")
    ap.add_argument(
        "--surfaces",
        default="shards,contracts,models,captures,vllm-files,gguf,draft-config,doctor,tokenizer,http,"
        "outputs",
    )
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--fresh", action="store_true", help="a new interpreter per input")
    ap.add_argument("--keep", action="store_true", help="keep the inputs and logs")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)  # forked children must not inherit a busy thread pool
    import pytest_eagle_contract.shells.cli  # noqa: F401  (imported once, forked many times)

    root = Path(tempfile.mkdtemp(prefix="eagle-hostile-"))
    logs = root / "logs"
    logs.mkdir()
    rng = random.Random(args.seed)
    wanted = args.surfaces.split(",")
    start = time.monotonic()
    cases: list[Case] = []
    world = demo_world(root) if {"captures", "http"} & set(wanted) else None
    makers: dict[str, Callable[[], list[Case]]] = {
        "shards": lambda: shard_cases(root, rng),
        "contracts": lambda: contract_cases(root, rng),
        "models": lambda: model_cases(root),
        "captures": lambda: capture_cases(root, world) if world else [],
        "vllm-files": lambda: vllm_file_cases(root),
        "gguf": lambda: gguf_cases(root, rng),
        "draft-config": lambda: draft_config_cases(root, rng),
        "doctor": lambda: doctor_cases(root, rng),
        "tokenizer": lambda: tokenizer_cases(root, rng),
        "http": lambda: http_cases(root, world) if world else [],
        "outputs": lambda: output_cases(root),
    }
    for surface in wanted:
        cases += makers[surface]()
    print(f"{len(cases)} inputs made in {time.monotonic() - start:.0f} s under {root}")
    results = run_all(cases, args.jobs, args.timeout, args.fresh, logs)
    print(f"ran in {time.monotonic() - start:.0f} s ({'fresh' if args.fresh else 'forked'})")
    report(results)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
