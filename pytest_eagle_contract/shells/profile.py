"""``eagle-contract profile FILE [--compare FILE] [--serving-args COMMAND] [--contract C]
[--json]``: a speculation_profile.json's identities, a training-time profile against a
deploy-time one, the draft length served and the contract's floor (checks/profile.py;
docs/acceptance-profiles.md). Exit 0 when no error, 1 on an error finding, 2 on a usage
error."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .args import add_print_json
from .exit_codes import EXIT_FINDINGS, EXIT_OK


def profile(args: argparse.Namespace) -> int:
    import shlex

    from ..checks.profile import check_profiles
    from ..errors import UsageError
    from ..render import to_json
    from .check import findings_text

    if not 0.0 <= args.max_drop < 1.0:
        raise UsageError(f"--max-drop {args.max_drop}: give a fraction in [0, 1)")
    for option, path in (("FILE", args.file), ("--compare", args.compare)):
        if path is not None and not path.is_file():
            why = "not a regular file (a FIFO or a device)" if path.exists() else "no such file"
            raise UsageError(f"{option} {path}: {why}")
    if args.serving_args is not None:
        try:
            shlex.split(args.serving_args)
        except ValueError as exc:
            raise UsageError(f"--serving-args: {exc}") from None
    contract = None
    if args.contract is not None:
        from ..contract.model import load_contract

        contract = load_contract(args.contract)
    findings, read = check_profiles(
        args.file, args.compare, args.serving_args, args.max_drop, contract
    )
    errors = [f for f in findings if f.severity == "error"]
    if args.json:
        print(
            to_json(
                {
                    "ok": not errors,
                    "profiles": [
                        {
                            "file": p.path,
                            "num_speculative_tokens": p.k,
                            "mean_accept_length": p.mean,
                            "marginal_accept_rates": list(p.marginal),
                            "conditional_accept_rates": list(p.conditional),
                        }
                        for p in read
                    ],
                    "findings": [f.to_dict() for f in findings],
                }
            )
        )
    else:
        codes = sorted({f.code for f in errors})
        warned = len(findings) - len(errors)
        tail = f", {warned} warning(s)" if warned else ""
        print(  # the verdict first, then what it rests on
            f"FAILED: {len(errors)} finding(s) [{', '.join(codes)}]{tail}"
            if errors
            else f"ok: {len(read)} profile(s) consistent{tail}"
        )
        for p in read if not args.quiet else ():  # -q: the verdict alone
            rates = " ".join(f"{c:.3f}" for c in p.conditional)
            print(
                f"{p.path}: {p.method or 'method not given'}, num_speculative_tokens {p.k}, "
                f"mean accept length {p.mean:.3f}, conditional {rates}"
            )
        if findings and not args.quiet:
            print("\n" + findings_text(findings, args.verbose))
    return EXIT_FINDINGS if errors else EXIT_OK


def add_parser(sub: Any) -> None:
    """The ``profile`` subcommand's arguments."""
    pro = sub.add_parser(
        "profile",
        help="check a speculation_profile.json (ModelOpt): its identities, against a "
        "deploy-time one, the draft length served and the contract's floor",
    )
    pro.add_argument(
        "file", type=Path, metavar="FILE", help="the speculation_profile.json (training time)"
    )
    pro.add_argument(
        "--compare",
        type=Path,
        metavar="FILE",
        help="a deploy-time speculation_profile.json (or `measure --json`'s or `probe --json`'s "
        "output): its accept length against FILE's, per position",
    )
    pro.add_argument(
        "--max-drop",
        type=float,
        default=0.05,
        metavar="F",
        help="with --compare: the largest fraction of FILE's accept length the deploy-time "
        "one may lose (0.05)",
    )
    pro.add_argument(
        "--serving-args",
        metavar="COMMAND",
        help="the engine's launch command line: its draft length against the profile's",
    )
    pro.add_argument(
        "--contract",
        type=Path,
        metavar="CONTRACT",
        help="hold each profile's mean accept length to the contract's floor "
        "(serving.min_accept_length, EC727)",
    )
    add_print_json(pro)
