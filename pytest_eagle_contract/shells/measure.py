"""``eagle-contract measure``: the acceptance a running engine measures with the draft loaded,
on the shards' own prompts, against the contract's floor and the probe's estimate.

The measurement and its findings live in :mod:`..checks.measured` (the gate's
``measured-acceptance`` family runs them too); this is the command. See
docs/measure-acceptance.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..findings import UNREACHABLE
from .args import add_measure, add_print_json, add_sampling, add_target_model, measure_settings
from .exit_codes import EXIT_FINDINGS, EXIT_OK, EXIT_UNAVAILABLE

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..findings import Finding
    from ..models.acceptance import Estimate

EPILOG = """\
The prompt of a shard is its input_ids before the first token its loss mask trains on
(where the reply begins); shards without a mask give none and are named.

Examples:
  eagle-contract measure contracts/draft.yaml --llama-server-url http://127.0.0.1:8080
  eagle-contract measure contracts/draft.yaml data/ --vllm-url http://gpu:8000 --sample 50
  eagle-contract measure c.yaml --sglang-url http://gpu:30000 --draft D --target-model T

In exit-code terms: 0 measured at or above the floor (or no floor), 1 a finding (below the
floor, no counters, answers that contradict each other), 69 nothing answered at the URL.
"""


def add_parser(sub: Any) -> None:
    """The ``measure`` subcommand's arguments."""
    p = sub.add_parser(
        "measure",
        help="measure the draft's acceptance on a running engine, against the contract's floor",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "contract", type=Path, metavar="CONTRACT", help="the contract whose draft is measured"
    )
    p.add_argument(
        "paths",
        type=Path,
        nargs="*",
        metavar="PATH",
        help="shard files or directories whose prompts are sent (default: training.shards)",
    )
    engines = p.add_mutually_exclusive_group(required=True)
    add_measure(p.add_argument, url_add=engines.add_argument)
    add_sampling(p)
    p.add_argument(
        "--draft",
        type=Path,
        metavar="DIR",
        help="the EAGLE-3 draft's HF folder (default: serving.draft_config): with a target, "
        "the probe's estimate on the same prompts beside the measurement",
    )
    add_target_model(
        p, "the target's HF model directory (default: target.model): the probe's estimate"
    )
    p.add_argument(
        "--no-probe",
        action="store_true",
        help="leave the probe's estimate out even where the contract names draft and target",
    )
    add_print_json(p)


def measure(args: argparse.Namespace) -> int:
    from ..checks.measured import (
        findings_of,
        measure_contract,
        probe_estimates,
        render,
        shard_prompts,
        steps_of,
    )
    from ..checks.unit import MeasureSettings
    from ..contract.model import load_contract
    from ..render import to_json
    from ..shards.discovery import parse_sample

    chosen = measure_settings(vars(args))
    if chosen is None:  # argparse requires one; a Namespace built elsewhere may not
        raise UsageError("give --llama-server-url, --sglang-url or --vllm-url")
    engine, url, timeout, new_tokens = chosen
    contract = load_contract(args.contract)
    ms = MeasureSettings(
        engine,
        url,
        timeout,
        new_tokens,
        tuple(args.paths),
        parse_sample(args.sample),
        args.seed,
    )
    serving = contract.serving
    draft = args.draft or (serving.draft_config if serving is not None else None)
    target = args.target_model or contract.target.model
    prompts = shard_prompts(contract, ms)
    measured, findings = measure_contract(contract, ms, prompts)
    estimates: list[Estimate] = []
    if measured is not None and draft is not None and target is not None and not args.no_probe:
        estimates = probe_estimates(
            contract, prompts.ids, new_tokens, steps_of(measured) or 4, target, draft
        )
        findings = findings_of(contract, measured, estimates)
    if args.json:
        out: dict[str, Any] = {
            "contract": str(args.contract),
            "floor": serving.min_accept_length if serving is not None else None,
            "measured": None if measured is None else measured.to_dict(),
            "probe": [e.to_dict() for e in estimates],
            "findings": [f.to_dict() for f in findings],
        }
        print(to_json(out))
    else:  # the verdict first, then the measurement and the findings as check prints them
        from .check import findings_text

        floor = serving.min_accept_length if serving is not None else None
        print(verdict(findings, len(prompts.ids), floor))
        if not args.quiet:
            shown = "" if measured is None else render(measured, estimates)
            if shown:
                print(shown)
            if findings:  # the measurement above is EC712's details: not printed twice
                import dataclasses

                brief = [
                    dataclasses.replace(f, details="") if f.details == shown else f
                    for f in findings
                ]
                print("\n" + findings_text(brief, args.verbose))
        sys.stdout.flush()  # the notes (stderr) after the result where both share a pipe
        for skipped in prompts.skipped:
            print(f"note: no prompt from {skipped}", file=sys.stderr)
    errors = [f for f in findings if f.severity == "error"]
    if measured is None and errors and all(f.extra.get(UNREACHABLE) for f in errors):
        return EXIT_UNAVAILABLE  # nothing answered: the run says nothing about the draft
    return EXIT_FINDINGS if errors else EXIT_OK


def verdict(findings: Sequence[Finding], prompts: int, floor: float | None) -> str:
    """measure's first line, in the form of every findings command's (render.summary):
    ``ok: ...`` where no finding is an error, else ``FAILED: N finding(s) [CODES] ...``."""
    errors = [f for f in findings if f.severity == "error"]
    against = f"against the floor {floor}" if floor else "(no floor set)"
    if errors:
        codes = ", ".join(sorted({f.code for f in errors}))
        return f"FAILED: {len(errors)} finding(s) [{codes}] measuring {prompts} prompt(s) {against}"
    warnings = len(findings)
    tail = f", {warnings} warning(s)" if warnings else ""
    return f"ok: {prompts} prompt(s) measured {against}: passed{tail}"
