"""``eagle-contract``: the command-line shell over the same core the pytest plugin uses.

Exit codes: 0 everything holds, 1 findings, 2 invalid contract or arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EagleContractError, UsageError

if TYPE_CHECKING:
    from ..planner import Runner

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    from ..engines.resolve import ENGINES
    from ..shards.formats import FORMAT_NAMES

    p = argparse.ArgumentParser(prog="eagle-contract", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ins = sub.add_parser("inspect", help="keys, shapes, dtypes and per-slot norms of one shard")
    ins.add_argument("path", type=Path)
    ins.add_argument("--format", choices=FORMAT_NAMES, default="auto")
    ins.add_argument("--hidden-size", type=int, help="split concatenated states by this width")
    ins.add_argument("--json", action="store_true", help="print one JSON object")

    inf = sub.add_parser("infer", help="draft a contract from shards you trust")
    inf.add_argument("paths", type=Path, nargs="*", metavar="PATH",
                     help="shard files or directories (with --update: default training.shards)")
    inf.add_argument("--update", type=Path, metavar="CONTRACT",
                     help="re-measure CONTRACT's norm bounds and rewrite them in place, keeping "
                          "comments and key order; exits 1 when anything changed")
    inf.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    inf.add_argument("--name", help="contract name (default: the output file's stem)")
    inf.add_argument("--format", choices=FORMAT_NAMES, default="auto")
    inf.add_argument("--layers", nargs="+", metavar="LAYER",
                     help="canonical layer of each slot in stored order (embed, residual:K, "
                          "final_norm)")
    inf.add_argument("--num-layers", type=int, help="target num_hidden_layers")
    inf.add_argument("--hidden-size", type=int)
    inf.add_argument("--vocab-size", type=int)
    inf.add_argument("--arch", help="target architecture, e.g. LlamaForCausalLM")
    inf.add_argument("--sample", default="all", help="N shards or 'all' (default: all)")
    inf.add_argument("--seed", type=int, default=0)

    chk = sub.add_parser("check", help="check shards against a contract")
    chk.add_argument("contract", type=Path)
    chk.add_argument("paths", type=Path, nargs="*", metavar="PATH",
                     help="shard files or directories (default: training.shards)")
    chk.add_argument("--sample", default=None, help="N shards or 'all' (default: 10)")
    chk.add_argument("--seed", type=int, default=0)
    chk.add_argument("--json", type=Path, metavar="REPORT", help="also write a JSON report here")
    chk.add_argument("-q", "--quiet", action="store_true", help="print only the summary")
    chk.add_argument("--checks", default=None, metavar="LIST",
                     help="comma-separated check families (default: layout,structure,values,"
                          "norms)")
    chk.add_argument("--serving-args", metavar="COMMAND",
                     help="the engine's launch command line (overrides serving.launch)")
    chk.add_argument("--target-model", type=Path, metavar="DIR",
                     help="HF model directory of the target (overrides target.model): adds the "
                          "weight-based evidence checks")
    chk.add_argument("--reference-capture", action=argparse.BooleanOptionalAction, default=None,
                     help="run the target on each shard's tokens and identify every slot "
                          "(default: target.reference_capture)")

    chk.add_argument("--sharpness", action="store_true",
                     help="run the sharpness self-test: every class of real pipeline bug, "
                          "mutated into a shard the contract accepts, must be caught")
    chk.add_argument("--captures", type=Path, action="append", metavar="DIR",
                     help="verify shards against these capture files (eagle-contract record)")
    chk.add_argument("--sglang-url", metavar="URL",
                     help="verify shards against a live SGLang server")
    chk.add_argument("--sglang-timeout", type=float, default=60.0, metavar="S")

    rec = sub.add_parser("record", help="capture what SGLang feeds the draft, for shards' ids")
    rec.add_argument("contract", type=Path)
    rec.add_argument("paths", type=Path, nargs="*", metavar="PATH",
                     help="shard files or directories (default: training.shards)")
    rec.add_argument("--sglang-url", required=True, metavar="URL")
    rec.add_argument("-o", "--out", type=Path, required=True, metavar="DIR")
    rec.add_argument("--sample", default="all", help="N shards or 'all' (default: all)")
    rec.add_argument("--seed", type=int, default=0)
    rec.add_argument("--timeout", type=float, default=60.0, metavar="S")

    idf = sub.add_parser("identify", help="name each slot's layer by running the target model")
    idf.add_argument("path", type=Path)
    idf.add_argument("--target-model", type=Path, required=True, metavar="DIR")
    idf.add_argument("--format", choices=FORMAT_NAMES, default="auto")
    idf.add_argument("--json", action="store_true", help="print one JSON object")

    res = sub.add_parser("resolve", help="map an engine's aux layer ids to canonical layers")
    res.add_argument("--engine", required=True, choices=ENGINES)
    res.add_argument("--version", help="engine version (sglang: default the installed one, "
                                       "else the newest in the table)")
    res.add_argument("--arch", help="target architecture: HF class (DeepseekV3ForCausalLM) or "
                                    "model_type (deepseek_v3)")
    res.add_argument("--num-layers", type=int, required=True, help="target num_hidden_layers")
    res.add_argument("--ids", type=int, nargs="*", default=None,
                     help="the draft's aux layer ids (omit for the engine default)")
    res.add_argument("--json", action="store_true", help="print one JSON object")
    res.add_argument("--source", choices=("auto", "table"), default="auto",
                     help="auto: the installed sglang's own methods when its version is asked "
                          "for, else the built-in table; table: always the table")

    dem = sub.add_parser("demo", help="the built-in demo: a tiny transformer, a good shard set "
                                      "and one with a real bug, gated by a contract")
    dem.add_argument("--out", type=Path, default=Path("eagle-demo"),
                     help="where to write the shards (default: ./eagle-demo)")

    sch = sub.add_parser("schema", help="print the contract JSON Schema (for editors)")
    sch.add_argument("--path", action="store_true", help="print the schema file's path instead")
    return p


def _inspect(args: argparse.Namespace) -> int:
    from ..errors import ShardReadError
    from ..render import to_json
    from ..shards.inspection import format_report, inspect_shard

    try:
        report = inspect_shard(args.path, args.format, args.hidden_size)
    except ShardReadError as exc:
        print(f"{args.path}: {exc.code} {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  hint: {exc.hint}", file=sys.stderr)
        return EXIT_FINDINGS
    print(to_json(report) if args.json else format_report(report))
    return EXIT_OK


def _infer(args: argparse.Namespace) -> int:
    from ..contract.infer import infer_contract
    from ..shards.discovery import parse_sample

    if args.update is not None:
        from ..contract.baseline import update_contract

        changes = update_contract(args.update, args.paths or None, parse_sample(args.sample),
                                  args.seed)
        for change in changes:
            print(f"{args.update}: {change}")
        print(f"{len(changes)} bound(s) changed" if changes else "no bound changed: nothing "
              "written")
        return EXIT_FINDINGS if changes else EXIT_OK
    if not args.paths:
        raise UsageError("infer needs shard PATHs (or --update CONTRACT)")

    name = args.name or (args.output.stem if args.output else "drafted")
    import os

    from ..contract.model import schema_path

    shards_ref = schema_ref = None
    if args.output is not None:
        here = args.output.resolve().parent
        schema_ref = os.path.relpath(schema_path(), here)
        if len(args.paths) == 1:
            shards_ref = os.path.relpath(args.paths[0].resolve(), here)
    text = infer_contract(
        args.paths, name=name, format=args.format, layers=args.layers,
        num_layers=args.num_layers, hidden_size=args.hidden_size, vocab_size=args.vocab_size,
        arch=args.arch, sample=parse_sample(args.sample), seed=args.seed, shards_ref=shards_ref,
        schema_ref=schema_ref)
    _validate_drafted(text, args.output)
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, "utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    return EXIT_OK


def _validate_drafted(text: str, output: Path | None) -> None:
    """A drafted contract must load: never write one that `check` would refuse."""
    from ..contract.model import parse_contract

    try:
        parse_contract(text, output or Path("<stdout>"))
    except EagleContractError as exc:
        raise UsageError(f"the drafted contract would be invalid:\n{exc}") from None


def _gate(contract_path: Path, paths: list[Path] | None, sample: str | None, seed: int,
          quiet: bool = False, report: Path | None = None, checks: str | None = None,
          target_model: Path | None = None, runner: Runner | None = None) -> int:
    from ..contract.model import load_contract
    from ..planner import plan, run_units
    from ..render import format_findings, summary, to_json
    from ..shards.discovery import parse_sample

    if report is not None and not report.parent.is_dir():
        raise UsageError(f"--json: folder {report.parent} does not exist")
    contract = load_contract(contract_path)
    named = [c.strip() for c in checks.split(",") if c.strip()] if checks is not None else None
    units = plan(contract, paths or None, parse_sample(sample), seed, named, target_model,
                 capture=runner is not None and runner.captures_enabled,
                 reference=runner is not None and runner.wants_reference)
    if not units:
        raise UsageError(f"{contract_path}: nothing to check (no training or serving section, "
                         "or no check of those asked for applies)")
    outcome = run_units(units, runner)
    findings = outcome.findings
    if not quiet and findings:
        print(format_findings(findings) + "\n")
    line = summary(findings, len(outcome.units), outcome.shards)
    print(line)
    if report:
        report.write_text(to_json({
            "contract": str(contract.path), "name": contract.name, "ok": not outcome.failed,
            "summary": line,
            "units": [{"check": u.check, "shard": u.label, "findings": [f.to_dict() for f in fs]}
                      for u, fs in zip(outcome.units, outcome.per_unit)],
            "findings": [f.to_dict() for f in findings],
        }) + "\n", "utf-8")
    return EXIT_FINDINGS if outcome.failed else EXIT_OK


def _check(args: argparse.Namespace) -> int:
    from ..planner import Runner

    if args.sharpness:
        if args.paths or args.checks or args.target_model or args.captures or args.sglang_url:
            raise UsageError("--sharpness tests the contract alone: it takes no shard PATH, "
                             "--checks, --target-model or capture options")
        return _sharpness(args.contract, args.quiet, args.json)
    runner = Runner(serving_args=args.serving_args, target_model=args.target_model,
                    reference=args.reference_capture, captures=args.captures or (),
                    sglang_url=args.sglang_url, timeout=args.sglang_timeout)
    return _gate(args.contract, args.paths, args.sample, args.seed, args.quiet, args.json,
                 args.checks, args.target_model, runner)


def _sharpness(contract_path: Path, quiet: bool, report: Path | None) -> int:
    from ..contract.model import load_contract
    from ..render import format_findings, to_json
    from ..sharpness.selftest import format_sharpness_table, sharpness

    contract = load_contract(contract_path)
    if contract.training is None:
        raise UsageError(f"{contract_path}: no training section: nothing to mutate")
    start = time.perf_counter()
    result = sharpness(contract)
    took = time.perf_counter() - start
    print(format_sharpness_table(result.rows))
    if result.findings and not quiet:
        print("\n" + format_findings(result.findings))
    applicable = [r for r in result.rows if r.caught is not None]
    caught = sum(bool(r.caught) for r in applicable)
    print(f"\n{'sharp' if result.sharp else 'NOT SHARP'}: {caught} of {len(applicable)} "
          f"mutation classes caught ({took:.2f} s)")
    if report:
        report.write_text(to_json({
            "contract": str(contract.path), "sharp": result.sharp,
            "rows": [dataclasses.asdict(r) for r in result.rows],
            "findings": [f.to_dict() for f in result.findings]}) + "\n", "utf-8")
    return EXIT_OK if result.sharp else EXIT_FINDINGS


def _record(args: argparse.Namespace) -> int:
    from ..capture.record import record
    from ..contract.model import load_contract
    from ..errors import CaptureError
    from ..shards.discovery import parse_sample, shard_paths

    contract = load_contract(args.contract)
    paths = [p for p, _ in shard_paths(contract, args.paths or None, parse_sample(args.sample),
                                       args.seed)]
    try:
        written = record(args.sglang_url, paths, contract, args.out, args.timeout)
    except CaptureError as exc:
        text = str(exc) if str(exc).startswith(exc.code) else f"{exc.code} {exc}"
        print(f"eagle-contract record: {text}", file=sys.stderr)
        return EXIT_FINDINGS
    print(f"recorded {len(written)} capture file(s) in {args.out}")
    return EXIT_OK


def _identify(args: argparse.Namespace) -> int:
    from ..checks.evidence import identify
    from ..errors import ShardReadError
    from ..models.target import TargetModel
    from ..render import to_json
    from ..shards.reading import read_sample

    target = TargetModel.open(args.target_model)
    try:
        sample = read_sample(args.path, args.format)
    except ShardReadError as exc:
        print(f"{args.path}: {exc.code} {exc.message}", file=sys.stderr)
        return EXIT_FINDINGS
    from ..checks.evidence import vocabulary_problem, width_problem

    slots, problems = sample.slots(target.hidden_size)
    if sample.input_ids is None:
        problems.append("no input ids")
    else:
        problems += [p for p in (vocabulary_problem(sample.input_ids, target),
                                 width_problem(slots, target)) if p]
    if problems:
        print(f"{args.path}: EC605 " + "; ".join(problems), file=sys.stderr)
        return EXIT_FINDINGS
    assert sample.input_ids is not None
    start = time.perf_counter()
    found = identify([s.tensor for s in slots], sample.input_ids, target)
    took = time.perf_counter() - start
    if args.json:
        print(to_json({"file": str(args.path), "target_model": str(args.target_model),
                       "arch": target.arch, "seconds": round(took, 3),
                       "slots": [{**i.to_dict(), "source": slots[i.slot].source}
                                 for i in found]}))
        return EXIT_OK
    print(f"{args.path}: {len(slots)} slots, target {target.arch} ({target.num_layers} layers); "
          f"reference capture in {took:.2f} s")
    print(f"  {'slot':<6}{'layer':<14}{'cosine':>8}{'rel.err':>10}   runner-up")
    for i in found:
        r = i.runner_up
        print(f"  {i.slot:<6}{i.best.layer!s:<14}{i.best.cosine:>8.4f}{i.best.rel_error:>10.3g}"
              f"   {r.layer} (cosine {r.cosine:.4f}, rel.err {r.rel_error:.3g})")
    return EXIT_OK


def _resolve(args: argparse.Namespace) -> int:
    from ..engines.resolve import resolve
    from ..errors import Unservable
    from ..render import to_json

    try:
        res = resolve(args.engine, args.num_layers, args.ids, args.arch, args.version,
                      use_installed=args.source == "auto")
    except Unservable as exc:
        if args.json:
            print(to_json({"engine": args.engine, "version": args.version, "arch": args.arch,
                           "refused": str(exc), "layers": None}))
        print(f"eagle-contract resolve: {args.engine} would not serve this: {exc}",
              file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(to_json(res.to_dict()))
        return EXIT_OK
    head = f"{res.engine} {res.version or ''} {res.arch or ''}".split()
    print(" ".join(head) + f", L = {res.num_layers}, ids "
          f"{'(default)' if res.ids is None else list(res.ids)}")
    print(f"  {'pos':<5}{'id':<10}{'capture':<10}layer")
    for i, p in enumerate(res.positions):
        print(f"  {i:<5}{'-' if p.id is None else p.id!s:<10}{p.capture:<10}{p.layer}")
    print(f"source: {res.source}")
    for note in res.notes:
        print(f"note: {note}")
    for problem in res.problems:
        print(f"{problem.code}: {problem.message}")
    return EXIT_OK


def _demo(args: argparse.Namespace) -> int:
    from . import demo

    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out} is a file, not a folder")
    start = time.perf_counter()
    spec = demo.SPEC
    print(f"demo: a tiny {spec.arch} target ({spec.num_layers} layers, H={spec.hidden_size}, "
          "random weights, no download); shards captured the way SGLang feeds the draft")
    good, buggy = demo.write_demo_shards(args.out, save_target=True)
    from ..planner import Runner
    from ..render import display_path

    contract = Path(display_path(str(demo.shipped_contract())))
    target = args.out / "target"
    print(f"  {good}: fc input cat({', '.join(map(str, demo.GOOD[:-1]))}), target final_norm")
    print(f"  {buggy}: the real bug, fc input cat({', '.join(map(str, demo.BUGGY[:-1]))})")
    print(f"  {target}: the target's weights, for the evidence checks")
    results = {}
    runs = (("good", good, None), ("embed-in-front", buggy, None),
            ("embed-in-front + weights", buggy, target))
    for label, shards, model in runs:
        extra = f" --target-model {model} --reference-capture" if model else ""
        print(f"\n== eagle-contract check {contract} {shards}{extra} ==")
        runner = Runner(target_model=model, reference=True) if model else None
        results[label] = _gate(contract, [shards], "all", 0, target_model=model, runner=runner)
    took = time.perf_counter() - start
    ok = set(results.values()) == {EXIT_OK, EXIT_FINDINGS} and results["good"] == EXIT_OK
    verdict = ("the good set passed and the bug was caught, by its norms and, with the "
               "target's weights, by name" if ok else f"UNEXPECTED: exit codes {results}")
    print(f"\ndemo: {verdict} ({took:.1f} s). The same gate in pytest:\n"
          f"  pytest --eagle-contract {contract} --eagle-shards {buggy}")
    return EXIT_OK if ok else EXIT_FINDINGS


def _schema(args: argparse.Namespace) -> int:
    from ..contract.model import schema_path

    print(schema_path() if args.path else schema_path().read_text("utf-8"), end="\n")
    return EXIT_OK


_COMMANDS = {"inspect": _inspect, "infer": _infer, "check": _check, "resolve": _resolve,
             "identify": _identify, "record": _record, "demo": _demo, "schema": _schema}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except EagleContractError as exc:
        print(f"eagle-contract: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
