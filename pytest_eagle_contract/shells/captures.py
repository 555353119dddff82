"""``eagle-contract compare-captures REF PROD``: topology parity of two capture sets.

REF: the captures of a prompt set on a single-GPU reference; PROD: the same prompts on the
production layout (tensor, pipeline or context parallel). Each production capture is
compared row by row with the reference capture of the same ids (``capture/topology.py``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .args import add_print_json
from .exit_codes import EXIT_FINDINGS, EXIT_OK


def add_parser(sub: Any) -> None:
    cmp = sub.add_parser(
        "compare-captures",
        help="compare a production layout's captures with a single-GPU reference's, row by row",
    )
    cmp.add_argument(
        "reference", type=Path, metavar="REF", help="reference capture files (a folder or file)"
    )
    cmp.add_argument("production", type=Path, metavar="PROD", help="production capture files")
    cmp.add_argument(
        "--rtol",
        type=float,
        default=None,
        help="per-token relative L2 error a row may have (default: EC701's, 0.03)",
    )
    cmp.add_argument(
        "--num-layers", type=int, metavar="L", help="the target's num_hidden_layers (for the hints)"
    )
    cmp.add_argument(
        "--pp-size",
        type=int,
        default=1,
        metavar="P",
        help="the production layout's pipeline-parallel size: hints name the stage of a "
        "diverging layer, split as vLLM splits layers",
    )
    cmp.add_argument(
        "--pp-partition",
        metavar="N,N,...",
        help="the layers per stage, when set (vLLM's VLLM_PP_LAYER_PARTITION)",
    )
    add_print_json(cmp)


def _partition(text: str | None, num_layers: int | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        sizes = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"--pp-partition {text!r}: comma-separated layer counts") from None
    if any(n < 0 for n in sizes) or (num_layers is not None and sum(sizes) != num_layers):
        raise UsageError(f"--pp-partition {text}: counts >= 0 adding up to --num-layers")
    return sizes


def compare_captures(args: argparse.Namespace) -> int:
    from ..capture.compare import RTOL
    from ..capture.files import load_captures
    from ..capture.topology import Topology, compare_sets
    from ..render import to_json
    from .check import findings_text

    rtol = RTOL if args.rtol is None else args.rtol
    if not 0 < rtol < 10:
        raise UsageError(f"--rtol {args.rtol}: a relative error in (0, 10)")
    if args.pp_size < 1 or args.pp_size > 1024:
        raise UsageError(f"--pp-size {args.pp_size}: 1 to 1024")
    if args.num_layers is not None and not 1 <= args.num_layers <= 100_000:
        raise UsageError(f"--num-layers {args.num_layers}: 1 to 100000")
    if args.num_layers is not None and args.pp_size > args.num_layers:
        raise UsageError(f"--pp-size {args.pp_size} above --num-layers {args.num_layers}")
    topo = Topology(args.num_layers, args.pp_size, _partition(args.pp_partition, args.num_layers))
    ref, prod = load_captures(args.reference), load_captures(args.production)
    if not len(ref) and not len(prod) and not (ref.problems or prod.problems):
        raise UsageError(f"no capture files in {args.reference} or {args.production}")
    parity = compare_sets(ref, prod, topo, rtol)
    errors = [f for f in parity.findings if f.severity == "error"]
    if args.json:
        print(
            to_json(
                {
                    "pairs": parity.pairs,
                    "unpaired": parity.unpaired,
                    "rtol": rtol,
                    "findings": [f.to_dict() for f in parity.findings],
                }
            )
        )
    else:  # the verdict first, then the findings (short; -v: each in full)
        verdict = "FAILED" if errors or not parity.pairs else "ok"
        print(
            f"{verdict}: {parity.pairs} prompt(s) compared row by row (rtol {rtol:g}), "
            f"{parity.unpaired} captured on one side only, {len(errors)} finding(s)"
        )
        if parity.findings and not args.quiet:
            print("\n" + findings_text(parity.findings, args.verbose))
    return EXIT_FINDINGS if errors or not parity.pairs else EXIT_OK
