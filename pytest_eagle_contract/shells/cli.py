"""``eagle-contract``: the command-line shell over the same core the pytest plugin uses.

Exit codes: shells/exit_codes.py (every ``--help`` ends with them).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ..contract.model import SCHEMA_FILE
from ..errors import EagleContractError
from . import (
    audit,
    captures,
    check,
    commands,
    doctor,
    explain,
    matrix,
    measure,
    probe,
    profile,
    progress,
    vllm_record,
)
from .args import (
    add_annotations,
    add_checks,
    add_flush_cache,
    add_format,
    add_print_json,
    add_report_json,
    add_sampling,
    add_serving_env,
    add_serving_target_model,
    add_sglang,
    add_shards,
    add_target_model,
    add_token_parity,
    add_tokenizer,
    add_verbosity,
    add_workers,
)
from .deprecated import Renamed, rewrite
from .exit_codes import EXIT_INTERRUPTED, EXIT_USAGE, epilog
from .terminal import Erasing, QuietPipe


def _parser() -> argparse.ArgumentParser:
    from ..engines.names import METHOD_ONLY_ENGINE_NAMES, SERVING_ENGINE_NAMES, TRAINER_NAMES
    from ..methods import METHODS
    from ..version import __version__

    METHOD_NAMES = list(METHODS)

    p = argparse.ArgumentParser(
        prog="eagle-contract",
        description=__doc__.splitlines()[0],
        epilog="eagle-contract COMMAND --help says more of each; eagle-contract explain CODE "
        "explains a rule code.\n\n" + epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"eagle-contract {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ins = sub.add_parser("inspect", help="keys, shapes, dtypes and per-slot norms of shards")
    add_shards(ins, help="shard files or directories (every shard under each)")
    add_format(ins, "inspect")
    ins.add_argument("--hidden-size", type=int, help="split concatenated states by this width")
    add_print_json(ins)
    add_workers(ins)

    inf = sub.add_parser("infer", help="draft a contract from shards you trust")
    add_shards(inf, help="shard files or directories (with --update: default training.shards)")
    inf.add_argument(
        "--update",
        type=Path,
        metavar="CONTRACT",
        help="re-measure CONTRACT's norm bounds and rewrite them in place, keeping "
        "comments and key order; exits 1 when anything changed",
    )
    inf.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    inf.add_argument(
        "--force", action="store_true", help="let -o replace an existing file (never an input)"
    )
    inf.add_argument(
        "--schema-file",
        type=Path,
        metavar="PATH",
        help="with -o: the copy of the JSON Schema the contract's first line names, written "
        f"or refreshed there (default {SCHEMA_FILE} beside the contract; commit it)",
    )
    inf.add_argument(
        "--no-schema-file",
        action="store_true",
        help="write no schema copy; the first line names the schema's $id instead",
    )
    inf.add_argument("--name", help="contract name (default: the output file's stem)")
    add_format(inf, "infer")
    inf.add_argument(
        "--layers",
        nargs="+",
        metavar="LAYER",
        help="canonical layer of each slot in stored order (embed, residual:K, final_norm)",
    )
    inf.add_argument(
        "--num-layers", type=int, help="target num_hidden_layers (overrides --target-model's)"
    )
    inf.add_argument(
        "--hidden-size",
        type=int,
        metavar="H",
        help="target hidden_size (overrides --target-model's)",
    )
    inf.add_argument(
        "--vocab-size", type=int, metavar="V", help="target vocab_size (overrides --target-model's)"
    )
    inf.add_argument("--arch", help="target architecture, e.g. LlamaForCausalLM")
    add_target_model(
        inf,
        "HF model directory of the target: L, H, vocab and arch from its "
        "config.json, each slot named by a reference capture, and the "
        "evidence the contract needs when norms cannot tell slots apart",
    )
    inf.add_argument(
        "--draft",
        type=Path,
        metavar="DIR",
        help="the draft model's directory (or config.json): serving's aux ids",
    )
    inf.add_argument(
        "--engine",
        choices=SERVING_ENGINE_NAMES,
        metavar="ENGINE",
        help="the serving engine the serving section is drafted for (default: the one the "
        "shards' pipeline pairs with: vllm for speculators' files, trtllm for TensorRT-LLM's, "
        "else sglang)",
    )
    add_tokenizer(
        inf,
        "the tokenizer folder the data was made with: drafts the tokenizer section "
        "(default: --target-model's folder, when it holds tokenizer.json)",
    )
    add_sampling(
        inf,
        note="; the norm bounds and their false-alarm estimate come from the shards read: "
        "all drafts them from every one",
    )
    add_workers(inf, "measuring shards")

    chk = sub.add_parser("check", help="check shards against a contract")
    add_contract(chk)
    add_shards(chk)
    add_sampling(chk)
    add_report_json(chk)
    chk.add_argument(
        "--html-report",
        type=Path,
        metavar="HTML",
        help="also write one self-contained HTML report to HTML (plots with the report extra)",
    )
    chk.add_argument(
        "--report",
        dest="html_report",
        type=Path,
        action=Renamed,
        new="--html-report",
        command="check",
    )
    add_annotations(chk.add_argument)
    add_workers(chk)
    add_checks(chk.add_argument)
    chk.add_argument(
        "--serving-args",
        metavar="COMMAND",
        help="the engine's launch command line (overrides serving.launch)",
    )
    add_serving_env(chk)
    add_target_model(
        chk,
        "HF model directory of the target (overrides target.model): adds the "
        "weight-based evidence checks",
    )
    add_serving_target_model(chk)
    add_tokenizer(
        chk,
        "the serving tokenizer folder (overrides tokenizer.path): its fingerprint, ids and "
        "template against the contract's, and the shards' ids it must know",
    )
    add_token_parity(chk)
    chk.add_argument(
        "--reference-capture",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the target on each shard's tokens and identify every slot "
        "(default: target.reference_capture)",
    )

    chk.add_argument(
        "--no-sharpness",
        action="store_true",
        help="leave out the sharpness self-test that runs with the other checks "
        "(as pytest --eagle-no-sharpness)",
    )
    chk.add_argument(
        "--sharpness",
        action="store_true",
        help="run the sharpness self-test: every class of real pipeline bug, "
        "mutated into a shard the contract accepts, must be caught",
    )
    chk.add_argument(
        "--captures",
        type=Path,
        action="append",
        metavar="DIR",
        help="verify shards against these capture files (eagle-contract record)",
    )
    add_sglang(chk.add_argument)

    rec = sub.add_parser(
        "record", help="capture what SGLang or vLLM feeds the draft, for shards' ids"
    )
    add_contract(rec, "the contract whose training shards' ids are sent")
    add_shards(rec)
    server = rec.add_mutually_exclusive_group(required=True)
    server.add_argument("--sglang-url", metavar="URL", help="ask this SGLang for each shard")
    server.add_argument(
        "--vllm-files",
        type=Path,
        action="append",
        metavar="DIR",
        help="convert vLLM's extract_hidden_states files (ExampleHiddenStatesConnector's, "
        "speculators' hs_*.safetensors) found here",
    )
    server.add_argument(
        "--vllm-url",
        metavar="URL",
        help="ask this vLLM (extract_hidden_states with ExampleHiddenStatesConnector) for each "
        "shard and read the file it writes (run where its storage folder is mounted)",
    )
    rec.add_argument(
        "-o",
        "--output",
        dest="out",
        type=Path,
        metavar="DIR",
        help="the folder the capture files are written to (required)",
    )
    rec.add_argument(
        "--out", dest="out", type=Path, action=Renamed, new="-o/--output", command="record"
    )
    add_sampling(
        rec,
        note="; check --captures with the same --sample and --seed checks the same shards, "
        "all records every one",
    )
    rec.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds to wait for each answer of the server (default: 60)",
    )
    add_flush_cache(rec.add_argument)
    vllm_record.add_arguments(rec)

    idf = sub.add_parser("identify", help="name each slot's layer by running the target model")
    idf.add_argument("path", type=Path, metavar="PATH", help="the shard file to identify")
    add_target_model(
        idf, "HF model directory of the target, run on the shard's own tokens", required=True
    )
    add_format(idf, "identify")
    add_print_json(idf)

    res = sub.add_parser("resolve", help="map an engine's aux layer ids to canonical layers")
    side = res.add_mutually_exclusive_group(required=True)
    side.add_argument(
        "--engine",
        choices=(*SERVING_ENGINE_NAMES, *METHOD_ONLY_ENGINE_NAMES),
        metavar="ENGINE",
        help="the serving engine whose reading of the ids is resolved (one of: "
        + ", ".join(SERVING_ENGINE_NAMES)
        + "; for --method dflash, mtp: lmdeploy; for --method dflash, mtp: ollama; for --method "
        "dflash, dflash2, mtp: mistralrs; for --method dflash2, dspark, mtp: "
        "onnxruntime-genai)",
    )
    side.add_argument(
        "--trainer",
        choices=TRAINER_NAMES,
        metavar="TRAINER",
        help="instead of --engine: the trainer whose reading of the ids is resolved, the "
        "layers it trains the draft on (one of: " + ", ".join(TRAINER_NAMES) + "; hf: plain "
        "hidden_states indices); --engine TRAINER is its old spelling, until 0.3.0",
    )
    res.add_argument(
        "--version",
        help="engine version (sglang: default the installed one, else the newest in the table)",
    )
    res.add_argument(
        "--arch",
        help="target architecture as its config.json says it, for every engine: "
        "architectures[0] (Qwen3_5ForConditionalGeneration) or model_type (qwen3_5)",
    )
    res.add_argument(
        "--target-config",
        type=Path,
        metavar="FILE",
        help="the target's config.json (or its folder): its architectures[0] and model_type "
        "as --arch, its num_hidden_layers (text_config's where it has one) as --num-layers",
    )
    res.add_argument(
        "--num-layers",
        type=int,
        help="target num_hidden_layers (required without --target-config)",
    )
    res.add_argument(
        "--ids",
        type=int,
        nargs="*",
        default=None,
        help="the draft's aux layer ids (omit for the engine default)",
    )
    res.add_argument(
        "--draft-config",
        type=Path,
        metavar="FILE",
        help="the draft's config.json (or its folder): the ids under the keys the engine "
        "(that release and runner) reads",
    )
    res.add_argument(
        "--runner",
        choices=("auto", "v1", "v2"),
        default="auto",
        help="vLLM model runner; auto (default): the one that release starts for an EAGLE-3 "
        "launch of --arch (VLLM_USE_V2_MODEL_RUNNER unset, CUDA), said in the output",
    )
    res.add_argument(
        "--draft-model-impl",
        choices=("auto", "flax_nnx", "vllm"),
        default=None,
        help="tpu-inference's DRAFT_MODEL_IMPL_TYPE (default: unset, auto): vllm runs the "
        "draft through vLLM's code, which a target tpu-inference prefers vLLM's code for needs",
    )
    res.add_argument(
        "--want",
        nargs="+",
        metavar="LAYER",
        help="print the ids that make the engine feed these layers (embed, residual:K, "
        "final_norm), per span of --version, or why none exist",
    )
    res.add_argument(
        "--method",
        choices=METHOD_NAMES,
        default="eagle3",
        metavar="METHOD",
        help="the drafting method whose tap rules resolve the ids (default eagle3; dflash, "
        "dflash2, dspark: --ids are the draft's target_layer_ids, --draft-config its "
        "config.json; mtp: no ids, the one state fed to an MTP head on --arch; one of: "
        + ", ".join(METHOD_NAMES)
        + ")",
    )
    add_print_json(res)
    res.add_argument(
        "--source",
        choices=("auto", "table"),
        default="auto",
        help="auto: the installed sglang's own methods when its version is asked "
        "for, else the built-in table; table: always the table",
    )

    dem = sub.add_parser(
        "demo",
        help="the built-in demo: a tiny transformer, a good shard set "
        "and one with a real bug, gated by a contract",
    )
    dem.add_argument(
        "-o",
        "--output",
        dest="out",
        type=Path,
        default=Path("eagle-demo"),
        metavar="DIR",
        help="where to write the shards (default: ./eagle-demo)",
    )
    dem.add_argument(
        "--out", dest="out", type=Path, action=Renamed, new="-o/--output", command="demo"
    )
    exp = sub.add_parser(
        "explain", help="print a rule code's section of the rules (docs/rules.md), as ruff rule"
    )
    exp.add_argument(
        "code", nargs="?", metavar="CODE", help="a rule code (EC401) or name (norm-out-of-bounds)"
    )
    exp.add_argument(
        "--list", action="store_true", help="list every rule code with its name and summary"
    )

    probe.add_parser(sub)
    measure.add_parser(sub)
    audit.add_parser(sub)
    matrix.add_parser(sub)
    captures.add_parser(sub)
    doctor.add_parser(sub)
    profile.add_parser(sub)

    sch = sub.add_parser("schema", help="print the contract JSON Schema (for editors)")
    sch.add_argument("--path", action="store_true", help="print the schema file's path instead")
    sch.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="PATH",
        help=f"write it to PATH (e.g. contracts/{SCHEMA_FILE}, committed beside the "
        "contracts), replacing only an earlier copy of it",
    )

    val = sub.add_parser(
        "validate", help="validate contracts against the schema and their own rules (no torch)"
    )
    val.add_argument(
        "contracts", nargs="+", type=Path, metavar="CONTRACT", help="contract YAML files"
    )
    val.add_argument(
        "--check",
        action="store_true",
        help="then check each valid contract's own training.shards (as `check --sample N`)",
    )
    add_sampling(val, "with --check: ")
    for command in sub.choices.values():
        add_verbosity(command)
    for name, parser in sub.choices.items():  # last: after every option
        text = (parser.epilog or "").rstrip()
        if "Examples:" not in text:  # measure writes its own, among its prose
            lines = "\n".join(f"  eagle-contract {name} {e}".rstrip() for e in EXAMPLES[name])
            text = (text + "\n\n" if text else "") + "Examples:\n" + lines
        parser.epilog = text + "\n\n" + epilog()
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return p


EXAMPLES: dict[str, tuple[str, ...]] = {
    # Each command's "Examples:", after its command name (tests/cli/test_cli_grammar.py
    # parses every one); the paths are the ones docs/first-contract.md uses.
    "inspect": ("data/rows_0-2000/data_0.ckpt", "data/ --json --workers 4"),
    "infer": (
        "data/ --target-model models/target -o contracts/mine.yaml",
        "data/ --num-layers 61 --sample all -o contracts/mine.yaml",
        "--update contracts/mine.yaml",
    ),
    "check": (
        "contracts/mine.yaml",
        "contracts/mine.yaml data/ --sample all --json-report r.json --html-report r.html",
        "contracts/mine.yaml --target-model models/target --reference-capture",
    ),
    "record": (
        "contracts/mine.yaml --sglang-url http://127.0.0.1:30000 -o captures/",
        "contracts/mine.yaml --vllm-files hs/ -o captures/ --layer-ids 2 30 58 61",
    ),
    "identify": ("data/rows_0-2000/data_0.ckpt --target-model models/target",),
    "resolve": (
        "--engine sglang --version 0.5.14 --arch deepseek_v3 --num-layers 61 --ids 2 30 58",
        "--engine vllm --target-config models/target --draft-config draft/ --json",
        "--trainer specforge --arch deepseek_v3 --num-layers 61",
    ),
    "demo": ("", "-o /tmp/eagle-demo"),
    "explain": ("EC401", "--list"),
    "probe": (
        "contracts/mine.yaml data/ --draft draft/ --target-model models/target",
        "--draft draft/ --target-model models/target --engine vllm --json",
    ),
    "audit": (
        "contracts/mine.yaml data/ --json-report audit.json",
        "contracts/mine.yaml --against audit.json --workers 8",
    ),
    "matrix": ("contracts/mine.yaml", "contracts/mine.yaml --json"),
    "compare-captures": (
        "captures/tp1 captures/tp8",
        "captures/tp1 captures/pp2 --num-layers 61 --pp-size 2",
    ),
    "doctor": (
        "--draft draft/ --target-model models/target --engine sglang --version 0.5.23",
        "--draft draft/ --contract contracts/mine.yaml --json",
    ),
    "profile": (
        "speculation_profile.json",
        "speculation_profile.json --compare deployed.json --max-drop 0.1",
    ),
    "schema": ("-o contracts/contract-v1.schema.json", "--path"),
    "validate": ("contracts/*.yaml", "contracts/mine.yaml --check --sample 5"),
}


def add_contract(parser: argparse.ArgumentParser, help: str = "the contract YAML file") -> None:
    parser.add_argument("contract", type=Path, metavar="CONTRACT", help=help)


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "inspect": commands.inspect,
    "infer": commands.infer,
    "check": check.check,
    "resolve": commands.resolve,
    "identify": commands.identify,
    "record": commands.record,
    "demo": check.demo,
    "schema": commands.schema,
    "validate": commands.validate,
    "probe": probe.probe,
    "measure": measure.measure,
    "audit": audit.audit,
    "matrix": matrix.matrix,
    "compare-captures": captures.compare_captures,
    "doctor": doctor.doctor,
    "profile": profile.profile,
    "explain": explain.explain,
}


def _late_paths(
    parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]
) -> None:
    """Shard paths written after options (``check C --sample 5 DIR``) join the command's
    paths: argparse gives a positional list only the first run of bare words. Anything
    else left over is an error, as argparse words it (exit 2)."""
    if not isinstance(getattr(args, "paths", None), list) or any(e.startswith("-") for e in extra):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.paths.extend(Path(e) for e in extra)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(rewrite(sys.argv[1:] if argv is None else argv))
    if extra:
        _late_paths(parser, args, extra)
    from ..version import set_verbosity

    set_verbosity(args.verbose)
    progress.set_quiet(args.quiet)
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = QuietPipe(stdout), Erasing(stderr)
    try:
        with progress.phase(args.command):  # on a terminal, after a second: the command runs
            return _COMMANDS[args.command](args)
    except EagleContractError as exc:
        print(f"eagle-contract: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C outside a loop that handles it: every write is atomic
        print("eagle-contract: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        sys.stdout.flush()
        sys.stdout, sys.stderr = stdout, stderr


if __name__ == "__main__":
    sys.exit(main())
