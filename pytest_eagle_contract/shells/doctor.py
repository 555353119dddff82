"""``eagle-contract doctor``: every check that needs no shards, one verdict per seam (the
seams are :mod:`..plan.doctor`'s; docs/doctor.md). Exit 0 when no seam fails, 1 when one
does, 2 on a usage error, as ``check``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .args import add_print_json, add_serving_env, add_serving_target_model, add_target_model
from .exit_codes import EXIT_FINDINGS, EXIT_OK

if TYPE_CHECKING:
    from ..plan.doctor import Diagnosis, Verdict


def render(diagnosis: Diagnosis, verbose: int = 0, quiet: bool = False) -> str:
    """The verdict line first, then the verdict table (most costly first), the failing and
    warning seams' findings (short: one entry per rule code; ``verbose``: each in full)
    and what each skipped seam needs (``verbose``: its reason and fix, else one line)."""
    from ..plan.doctor import STATUSES
    from ..tables import table
    from .check import findings_text

    count = {s: sum(v.status == s for v in diagnosis.verdicts) for s in STATUSES}
    tail = ", ".join(f"{n} {s}" for s, n in count.items() if n)
    skipped = [v for v in diagnosis.verdicts if v.status == "skipped"]
    head = {"fail": "FAILED", "warn": "passed with warnings", "pass": "ok"}[diagnosis.verdict]
    if skipped and not diagnosis.failed:
        head += ", incomplete"
    out = [f"doctor: {head} ({tail} of {len(diagnosis.verdicts)} seams)"]
    if quiet:
        return out[0]
    rows = [[v.name, v.status.upper(), _found(v)] for v in diagnosis.verdicts]
    out.append("\n" + table(["seam", "verdict", "found"], rows))
    for v in diagnosis.verdicts:
        if v.status in ("fail", "warn"):
            found = findings_text(list(v.findings), verbose)
            out.append(f"\n== {v.name}: {v.status} ==\n{found}")
    if skipped and verbose:
        out.append("\n== skipped ==")
        out += [f"  {v.name}: {v.reason}\n    to run it: {v.fix}" for v in skipped]
    elif skipped:
        names = ", ".join(v.name for v in skipped)
        out.append(f"\nskipped: {names} (what each needs: -v)")
    return "\n".join(out)


def _found(v: Verdict) -> str:
    """The verdict row's last cell: the codes found, or why the seam was skipped."""
    if v.status == "skipped":
        return v.reason if len(v.reason) <= 80 else v.reason[:77] + "..."
    return ", ".join(dict.fromkeys(f.code for f in v.findings))


def doctor(args: argparse.Namespace) -> int:
    from ..contract.model import load_contract
    from ..plan.doctor import Inputs, diagnose
    from ..render import to_json
    from .check import serving_env

    contract = load_contract(args.contract) if args.contract is not None else None
    diagnosis = diagnose(
        Inputs(
            draft=args.draft,
            target_model=args.target_model,
            serving_target_model=args.serving_target_model,
            engine=args.engine,
            version=args.version,
            serving_args=args.serving_args,
            contract=contract,
            serving_env=serving_env(args.serving_env),
            serving_env_label=f"--serving-env {args.serving_env}" if args.serving_env else "",
        )
    )
    print(
        to_json(diagnosis.to_dict()) if args.json else render(diagnosis, args.verbose, args.quiet)
    )
    return EXIT_FINDINGS if diagnosis.failed else EXIT_OK


def add_parser(sub: Any) -> None:
    """The ``doctor`` subcommand's arguments."""
    from ..engines.names import SERVING_ENGINE_NAMES

    doc = sub.add_parser(
        "doctor",
        help="before deploy: every check that needs no shards, one verdict per seam",
    )
    doc.add_argument("--draft", type=Path, required=True, metavar="DIR", help="the draft's folder")
    add_target_model(
        doc,
        "HF model directory of the training target: its layers and width, and the "
        "target-identity and embedding checks",
    )
    add_serving_target_model(doc)
    doc.add_argument(
        "--engine",
        choices=SERVING_ENGINE_NAMES,
        metavar="ENGINE",
        help="the serving engine, as resolve --engine names it (overrides serving.engine)",
    )
    doc.add_argument(
        "--version", help="the engine's version or range (default: every covered release)"
    )
    doc.add_argument(
        "--serving-args",
        metavar="COMMAND",
        help="the engine's launch command line (overrides serving.launch)",
    )
    add_serving_env(doc)
    doc.add_argument(
        "--contract",
        type=Path,
        metavar="C",
        help="the pipeline's contract: the trained layers, the tokenizer, the serving side",
    )
    add_print_json(doc)
