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


def render(diagnosis: Diagnosis) -> str:
    """The verdict table (most costly first), each failing or warning seam's findings, what
    each skipped seam needs, and one line."""
    from ..plan.doctor import STATUSES
    from ..render import format_findings
    from ..tables import table

    rows = [[v.name, v.status.upper(), _found(v)] for v in diagnosis.verdicts]
    out = [table(["seam", "verdict", "found"], rows)]
    for v in diagnosis.verdicts:
        if v.status in ("fail", "warn"):
            out.append(f"\n== {v.name}: {v.status} ==\n{format_findings(list(v.findings))}")
    skipped = [v for v in diagnosis.verdicts if v.status == "skipped"]
    if skipped:
        out.append("\n== skipped ==")
        out += [f"  {v.name}: {v.reason}\n    to run it: {v.fix}" for v in skipped]
    count = {s: sum(v.status == s for v in diagnosis.verdicts) for s in STATUSES}
    tail = ", ".join(f"{n} {s}" for s, n in count.items() if n)
    head = {"fail": "FAILED", "warn": "passed with warnings", "pass": "ok"}[diagnosis.verdict]
    if skipped and not diagnosis.failed:
        head += ", incomplete"
    return "\n".join(out) + f"\n\ndoctor: {head} ({tail} of {len(diagnosis.verdicts)} seams)"


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
    print(to_json(diagnosis.to_dict()) if args.json else render(diagnosis))
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
