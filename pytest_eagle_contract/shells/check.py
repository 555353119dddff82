"""The gate commands: ``check`` (and ``check --sharpness``) and the built-in ``demo``."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..findings import Finding
from .args import check_names
from .exit_codes import EXIT_FINDINGS, EXIT_OK, EXIT_UNAVAILABLE

if TYPE_CHECKING:
    from ..contract.model import Contract
    from ..plan.planner import Runner
    from ..plan.request import CheckRequest


def run_check(
    contract_path: Path,
    request: CheckRequest,
    *,
    runner: Runner | None = None,
    quiet: bool = False,
    report: Path | None = None,
    html: Path | None = None,
    annotations: str = "auto",
    workers: int = 1,
    json_out: bool = False,
    verbose: int = 0,
    shown: list[Finding] | None = None,
) -> int:
    """Plan ``request`` on the contract, run it (``runner``: one already holding the
    target), print the findings and write the reports asked for (``json_out``: the JSON
    report on stdout instead of the text, the annotations on stderr). The findings print
    short (one entry per rule code, render.format_short), every one in full with
    ``verbose``; ``shown``: the findings an earlier run of this process printed (they are
    named, not printed again), extended with this run's."""
    from ..contract.model import load_contract
    from ..plan.planner import Outcome, Runner, iter_units
    from ..render import summary, to_json
    from .progress import steps

    contract = load_contract(contract_path)
    units = request.plan(contract)
    if not units:
        raise UsageError(
            f"{contract_path}: nothing to check (no training or serving section, "
            "or no check of those asked for applies)"
        )
    if report is not None or html is not None:  # refused now, not after the run
        from .. import outputs
        from ..reports.publish import check_targets

        reads = outputs.inputs(
            contract_path,
            contract.training.shards if contract.training else None,
            contract.target.model,
            request.settings.target_model,
            request.settings.serving_target_model,
            request.settings.tokenizer,
            request.settings.conversations,
            contract.serving.target_model if contract.serving else None,
            *request.shards,
            *(u.shard for u in units),
        )
        check_targets(reads, report, html)
    runner = runner or Runner(request.settings)
    if html is not None:  # the page plots the target's curve: the evidence family measures it
        runner.settings = dataclasses.replace(runner.settings, curve=True)
    per_unit: list[list[Finding]] = [[] for _ in units]
    measured: list[dict[str, Any]] = [{} for _ in units]
    for i, checked in steps(iter_units(units, runner, workers), len(units), "checking"):
        per_unit[i], measured[i] = checked.findings, checked.measured
    outcome = Outcome(units, per_unit, measured)
    findings = outcome.findings
    line = summary(findings, len(outcome.units), outcome.shards)
    if not json_out:  # the verdict first, then what it rests on
        print(line)
        if not quiet and findings:
            print(findings_text(findings, verbose, shown or ()))
    if shown is not None:
        shown.extend(findings)
    from ..reports.publish import publish
    from ..reports.run import CheckRun

    run = CheckRun.of(contract, outcome, line)
    publish(
        [run],
        json_path=report,
        html_path=html,
        annotations=annotations,
        echo=_to_stderr if json_out else print,
    )
    if json_out:
        from ..reports.json_report import check_report

        print(to_json(check_report(run)))
    if outcome.unreachable:
        return EXIT_UNAVAILABLE
    return EXIT_FINDINGS if outcome.failed else EXIT_OK


def findings_text(findings: Sequence[Finding], verbose: int, shown: Sequence[Finding] = ()) -> str:
    """Findings as the terminal shows them: short by default, every one in full under
    ``-v`` (the JSON, HTML and GitHub reports hold them all either way)."""
    from ..render import format_findings, format_short, unique

    if verbose:
        known = set(shown)
        fresh = [f for f in findings if f not in known]
        again = [f for f in findings if f in known]
        parts = [format_findings(fresh)] if fresh else []
        return "\n\n".join(parts + ([format_short(again, known=again)] if again else []))
    text = format_short(findings, terminal_width(), known=shown)
    if not shown and len(unique(findings)) > len({f.code for f in findings}):  # said once
        text += "\n\n(-v prints every finding in full: where, expected, found)"
    return text


def terminal_width() -> int:
    """The short view's width: the terminal's, at most render.WIDTH; render.WIDTH when
    stdout is not a terminal (a pipe, a file, a docs page: the same text everywhere)."""
    import shutil

    from ..render import WIDTH

    if not sys.stdout.isatty():
        return WIDTH
    return max(60, min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns))


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr)


def check(args: argparse.Namespace) -> int:
    from ..plan.request import CheckRequest
    from ..pool import workers_option
    from ..shards.discovery import parse_sample

    if args.sharpness:
        if args.paths or args.checks or args.target_model or args.captures or args.sglang_url:
            raise UsageError(
                "--sharpness tests the contract alone: it takes no shard PATH, "
                "--checks, --target-model or capture options"
            )
        return _sharpness(args.contract, args.quiet, args.json_report, args.json, args.verbose)
    if args.sglang_url is not None:
        from ..capture.sglang_client import use_server

        use_server(args.sglang_url, args.sglang_timeout, flush_cache=args.sglang_flush_cache)
    if args.render_url is not None:
        from ..capture.render_client import render_url

        render_url(args.render_url)  # a malformed address is a usage error now
    request = CheckRequest.of(
        shards=args.paths,
        sample=parse_sample(args.sample),
        seed=args.seed,
        checks=check_names(args.checks),
        no_sharpness=args.no_sharpness,
        target_model=args.target_model,
        serving_target_model=args.serving_target_model,
        tokenizer=args.tokenizer,
        conversations=args.conversations,
        render_url=args.render_url,
        reference=args.reference_capture,
        captures=args.captures or (),
        sglang_url=args.sglang_url,
        timeout=args.sglang_timeout,
        serving_args=args.serving_args,
        serving_env=serving_env(args.serving_env),
        serving_env_label=f"--serving-env {args.serving_env}" if args.serving_env else "",
    )
    return run_check(
        args.contract,
        request,
        quiet=args.quiet,
        report=args.json_report,
        html=args.html_report,
        annotations=args.annotations,
        workers=workers_option(args.workers),
        json_out=args.json,
        verbose=args.verbose,
    )


def serving_env(path: str | None) -> dict[str, str] | None:
    """``--serving-env FILE`` read (``-``: stdin, as ``env | eagle-contract ...``); a bad
    file is a usage error now, before any check runs."""
    if path is None:
        return None
    from ..engines.knobs import read_env_file

    return read_env_file(path, sys.stdin.read() if path == "-" else None)


def _sharpness(
    contract_path: Path,
    quiet: bool,
    report: Path | None,
    json_out: bool = False,
    verbose: int = 0,
) -> int:
    from ..contract.model import load_contract
    from ..outputs import checked_output, write_text
    from ..render import to_json
    from ..reports.json_report import MARK, stamped
    from ..sharpness.selftest import format_sharpness_table, sharpness

    contract = load_contract(contract_path)
    if contract.training is None:
        raise UsageError(f"{contract_path}: no training section: nothing to mutate")
    if report:  # refused now, not after the self-test
        checked_output(report, "--json-report", reads=_contract_inputs(contract), ours=MARK)
    start = time.perf_counter()
    result = sharpness(contract)
    took = time.perf_counter() - start
    applicable = [r for r in result.rows if r.caught is not None]
    caught = sum(bool(r.caught) for r in applicable)
    if not json_out:  # the verdict first
        print(
            f"{'sharp' if result.sharp else 'NOT SHARP'}: {caught} of {len(applicable)} "
            f"mutation classes caught ({took:.2f} s)\n"
        )
        print(format_sharpness_table(result.rows))
        if result.findings and not quiet:
            print("\n" + findings_text(result.findings, verbose))
    text = to_json(
        stamped(
            "sharpness",
            {
                "contract": str(contract.path),
                "sharp": result.sharp,
                "rows": [dataclasses.asdict(r) for r in result.rows],
                "findings": [f.to_dict() for f in result.findings],
            },
        )
    )
    if json_out:
        print(text)
    if report:
        write_text(
            report,
            text + "\n",
            "--json-report",
            reads=_contract_inputs(contract),
            ours=MARK,
        )
    return EXIT_OK if result.sharp else EXIT_FINDINGS


def _contract_inputs(contract: Contract) -> tuple[Path, ...]:
    from ..outputs import inputs

    training = contract.training
    return inputs(contract.path, training.shards if training else None, contract.target.model)


def demo(args: argparse.Namespace) -> int:
    from ..outputs import folder
    from . import demo

    names = (demo.CONTRACT_NAME, demo.SCHEMA_NAME)
    folder(args.out, "--out", within=("good", "embed-in-front", "target", "probe", *names))
    start = time.perf_counter()
    spec = demo.SPEC
    print(
        f"demo: a tiny {spec.arch} target ({spec.num_layers} layers, H={spec.hidden_size}, "
        "random weights, no download); shards captured the way SGLang feeds the draft"
    )
    from safetensors import SafetensorError

    from .progress import phase

    try:
        with phase("writing the shards"):
            good, buggy = demo.write_demo_shards(args.out, save_target=True)
    except (OSError, RuntimeError, SafetensorError) as exc:  # a full disk, no permission
        raise UsageError(f"--out {args.out}: cannot write: {str(exc)[:200]}") from None
    from ..plan.request import CheckRequest

    contract = _write_demo_contract(args.out)
    target = args.out / "target"
    print(f"  {good}: fc input cat({', '.join(map(str, demo.GOOD[:-1]))}), target final_norm")
    print(f"  {buggy}: the real bug, fc input cat({', '.join(map(str, demo.BUGGY[:-1]))})")
    print(f"  {target}: the target's weights, for the evidence checks")
    print(f"  {contract}: the contract the checks below run (its shards: {good})")
    results = {}
    shown: list[Finding] = []  # the second look at the buggy set names these, once
    runs = (
        ("good", good, None),
        ("embed-in-front", buggy, None),
        ("embed-in-front + weights", buggy, target),
    )
    for label, shards, model in runs:
        extra = f" --target-model {model} --reference-capture" if model else ""
        print("\n" + _heading(f"eagle-contract check {contract} {shards}{extra}"))
        request = CheckRequest.of(
            shards=[shards], sample=None, target_model=model, reference=bool(model)
        )
        results[label] = run_check(
            contract, request, quiet=args.quiet, verbose=args.verbose, shown=shown
        )
    with phase("probing what the bug costs (a tiny target and draft are trained)"):
        print(demo.probe_text(args.out / "probe"))
    took = time.perf_counter() - start
    ok = set(results.values()) == {EXIT_OK, EXIT_FINDINGS} and results["good"] == EXIT_OK
    verdict = (
        "the good set passed and the bug was caught, by its norms and, with the "
        "target's weights, by name"
        if ok
        else f"UNEXPECTED: exit codes {results}"
    )
    print(f"\ndemo: {verdict} ({took:.1f} s)")
    print("next: your own contract, drafted from the good set (docs/first-contract.md):")
    print(f"  {demo.next_command(args.out)}")
    return EXIT_OK if ok else EXIT_FINDINGS


def _heading(command: str) -> str:
    """``== COMMAND ==``, continued with `` \\`` where it is wider than render.WIDTH."""
    from ..render import WIDTH

    lines, line = [], "=="
    for word in command.split(" "):
        if len(line) + len(word) + 5 > WIDTH:
            lines.append(line + " \\")
            line = "    "
        line += " " + word
    return "\n".join([*lines, line + " =="])


def _write_demo_contract(out: Path) -> Path:
    """The demo's contract beside its shards, and the schema its first line names."""
    from .. import outputs
    from . import demo
    from .schema_copy import write_schema

    contract = outputs.write_text(
        out / demo.CONTRACT_NAME,
        demo.contract_text(),
        "-o",
        ours=b"contract: demo-tiny-llama-eagle3\n",
        kind="the demo's contract",
    )
    write_schema(out / demo.SCHEMA_NAME, "-o")
    return out / contract.name
