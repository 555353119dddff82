"""The other commands: inspect, infer, record, identify, resolve, schema."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EagleContractError, UsageError
from .args import side_keys
from .exit_codes import EXIT_FINDINGS, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE
from .schema_copy import schema_current, write_schema

if TYPE_CHECKING:
    from ..engines.base import Resolution
    from ..layers import Layer


def inspect(args: argparse.Namespace) -> int:
    from ..pool import workers_option
    from ..render import to_json
    from ..shards.inspection import format_report, inspect_jobs, inspect_many

    jobs = inspect_jobs(args.paths, args.format, args.hidden_size)
    workers = workers_option(args.workers)
    one = len(args.paths) == 1 and not args.paths[0].is_dir()  # one object, as ever
    failed, kept, shown = False, [], 0
    for report in inspect_many(jobs, workers):
        error = report.get("error")
        if error is not None:
            failed = True
            print(f"{report['file']}: {error['code']} {error['message']}", file=sys.stderr)
            if error["hint"]:
                print(f"  hint: {error['hint']}", file=sys.stderr)
        if args.json:
            kept.append(report)
        elif error is None:
            print(("\n" if shown else "") + format_report(report))
            shown += 1
    if args.json and not (one and failed):
        print(to_json(kept[0] if one else kept))
    return EXIT_FINDINGS if failed else EXIT_OK


def infer(args: argparse.Namespace) -> int:
    from ..authoring.infer import InferRequest, draft_contract
    from ..pool import workers_option
    from ..shards.discovery import parse_sample

    if args.update is not None:
        from ..authoring.baseline import update_contract

        update = update_contract(
            args.update, args.paths or None, parse_sample(args.sample), args.seed
        )
        changes = update.changes
        moved = sorted({f.slot for f in update.warnings if f.slot is not None})
        verdict = (  # the verdict first, then what it rests on
            f"changed: {len(changes)} bound(s) re-measured and rewritten in {args.update}: "
            "review the diff and commit it"
            if changes
            else "no bound changed: nothing written"
        )
        if update.warnings:
            where = f"slot(s) {', '.join(map(str, moved))}" if moved else "the slots"
            verdict = f"FAILED: check finds the layout of {where} moved; {verdict}"
        print(verdict)
        if update.warnings and not args.quiet:  # what check says of these shards
            from .check import findings_text
            from .probe import wrapped

            print(
                "\n"
                + wrapped(
                    "warning: the layout moved in these shards, not only their norms; the "
                    "update takes it in as the new baseline: fix the pipeline instead, "
                    "unless the layout moved on purpose"
                )
            )
            print("\n" + findings_text(update.warnings, args.verbose))
        if changes and not args.quiet:
            shown = changes if args.verbose or len(changes) <= 10 else changes[:10]
            print()
            for change in shown:
                print(f"{args.update}: {change}")
            if len(shown) < len(changes):
                print(f"... and {len(changes) - len(shown)} more (-v prints each)")
        return EXIT_FINDINGS if changes or update.warnings else EXIT_OK
    if not args.paths:
        raise UsageError("infer needs shard PATHs (or --update CONTRACT)")

    name = args.name or (args.output.stem if args.output else "drafted")
    import os

    from .. import outputs

    rules: outputs.Rules = {
        "reads": outputs.inputs(*args.paths, args.target_model, args.draft, args.tokenizer),
        "replace": args.force,
        "force": "--force",
        "parents": True,
    }
    if args.output is not None:  # refused now, not after the draft
        outputs.checked_output(args.output, "-o", **rules)

    from ..contract.model import SCHEMA_FILE, SCHEMA_MARK

    here = (args.output or Path("drafted.yaml")).resolve().parent

    def ref(path: Path | None) -> str | None:
        return None if path is None else os.path.relpath(path.resolve(), here)

    shards_ref = schema_ref = None
    schema_file: Path | None = None
    if args.output is not None:
        if not args.no_schema_file:  # a copy beside the contract: a link that survives a commit
            schema_file = args.schema_file or args.output.parent / SCHEMA_FILE
            if not schema_current(schema_file):
                outputs.checked_output(
                    schema_file,
                    "--schema-file",
                    reads=rules["reads"],
                    ours=SCHEMA_MARK,
                    kind="a copy of the contract schema",
                    parents=True,
                )
            schema_ref = ref(schema_file)
        if len(args.paths) == 1:
            shards_ref = ref(args.paths[0])
    elif args.schema_file is not None:
        raise UsageError("--schema-file goes with -o (the contract's folder names it)")
    request = InferRequest(
        args.paths,
        name,
        format=args.format,
        layers=args.layers,
        num_layers=args.num_layers,
        hidden_size=args.hidden_size,
        vocab_size=args.vocab_size,
        arch=args.arch,
        sample=parse_sample(args.sample),
        seed=args.seed,
        shards_ref=shards_ref,
        schema_ref=schema_ref,
        target_model=args.target_model,
        draft=args.draft,
        engine=args.engine,
        model_ref=ref(args.target_model) if args.output else None,
        draft_ref=ref(args.draft) if args.output else None,
        where=args.output,
        workers=workers_option(args.workers),
        tokenizer=args.tokenizer,
        tokenizer_ref=ref(args.tokenizer) if args.output else None,
    )
    from .progress import phase

    with phase("drafting the contract"):
        draft = draft_contract(request)
    _validate_drafted(draft.text, args.output)
    if args.output is None:
        sys.stdout.write(draft.text)
    else:
        outputs.write_text(args.output, draft.text, "-o", **rules)
        print(f"wrote {args.output}", file=sys.stderr)
        if schema_file is not None:
            _copy_schema(schema_file, rules["reads"], asked=args.schema_file is not None)
    for note in draft.notes:
        print(f"eagle-contract infer: {note}", file=sys.stderr)
    if not draft.sharp:
        print(
            "eagle-contract infer: the drafted contract is not sharp (it lets a pipeline bug "
            "through): see above",
            file=sys.stderr,
        )
    return EXIT_OK if draft.sharp else EXIT_FINDINGS


def _validate_drafted(text: str, output: Path | None) -> None:
    """A drafted contract must load: never write one that `check` would refuse."""
    from ..contract.model import parse_contract

    try:
        parse_contract(text, output or Path("<stdout>"))
    except EagleContractError as exc:
        raise UsageError(f"the drafted contract would be invalid:\n{exc}") from None


def record(args: argparse.Namespace) -> int:
    from ..capture.record import record
    from ..capture.sglang_client import use_server
    from ..contract.model import load_contract
    from ..errors import CaptureError, ServerUnreachable
    from ..shards.discovery import parse_sample, shard_paths

    if args.out is None:
        raise UsageError("record needs -o/--output DIR: the folder for the capture files")
    if args.sglang_url:
        use_server(args.sglang_url, args.timeout, flush_cache=args.sglang_flush_cache)
    contract = load_contract(args.contract)
    from ..outputs import folder, inputs

    shards = contract.training.shards if contract.training else None
    reads = (*(args.paths or ()), *(args.vllm_files or ()))
    folder(args.out, "-o", reads=inputs(args.contract, shards, *reads))
    if args.vllm_files:
        from .vllm_record import record_files

        return record_files(args, contract)
    paths = [
        p
        for p, _ in shard_paths(contract, args.paths or None, parse_sample(args.sample), args.seed)
    ]
    if args.vllm_url:
        from .vllm_record import record_url

        return record_url(args, contract, paths)
    from .progress import phase

    try:
        with phase(f"asking the server for {len(paths)} shard(s)"):
            written = record(args.sglang_url, paths, contract, args.out, args.timeout)
    except CaptureError as exc:
        text = str(exc) if str(exc).startswith(exc.code) else f"{exc.code} {exc}"
        print(f"eagle-contract record: {text}", file=sys.stderr)
        return EXIT_UNAVAILABLE if isinstance(exc, ServerUnreachable) else EXIT_FINDINGS
    print(f"recorded {len(written)} capture file(s) in {args.out}")
    return EXIT_OK


def identify(args: argparse.Namespace) -> int:
    from ..checks.evidence import identify
    from ..errors import ShardReadError
    from ..models.target import TargetModel
    from ..render import to_json
    from ..shards.reading import read_sample
    from ..tables import table
    from .progress import phase

    target = TargetModel.open(args.target_model)
    try:
        sample = read_sample(args.path, args.format)
    except ShardReadError as exc:
        print(f"{args.path}: {exc.code} {exc.message}", file=sys.stderr)
        return EXIT_FINDINGS
    from ..models.inputs import unfit

    slots, problems = sample.slots(target.hidden_size)
    bad = unfit(sample.ids, target, slots=[s.array for s in slots], mask=sample.mask)
    if problems or bad is not None:
        reasons = [*problems, *([bad.reason] if bad is not None else [])]
        code = bad.code if bad is not None else "EC203"
        print(f"{args.path}: {code} no reference capture: " + "; ".join(reasons), file=sys.stderr)
        return EXIT_FINDINGS
    assert sample.input_ids is not None
    with phase("loading the target"):
        _ = target.module  # loaded here, where it is seen; the capture below reuses it
    start = time.perf_counter()
    with phase("reference capture"):
        found = identify([s.tensor for s in slots], sample.input_ids, target)
    if len(found) != len(slots):
        print(
            f"{args.path}: EC605 only {len(found)} of {len(slots)} slots could be compared "
            "with the target's states (shapes differ)",
            file=sys.stderr,
        )
        return EXIT_FINDINGS
    took = time.perf_counter() - start
    if args.json:
        print(
            to_json(
                {
                    "file": str(args.path),
                    "target_model": str(args.target_model),
                    "arch": target.arch,
                    "seconds": round(took, 3),
                    "slots": [{**i.to_dict(), "source": slots[i.slot].source} for i in found],
                }
            )
        )
        return EXIT_OK
    print(
        f"{args.path}: {len(slots)} slots, target {target.arch} ({target.num_layers} layers); "
        f"reference capture in {took:.2f} s"
    )
    print(
        table(
            ["slot", "layer", "cosine", "rel.err", "runner-up"],
            [
                [
                    i.slot,
                    i.best.layer,
                    f"{i.best.cosine:.4f}",
                    f"{i.best.rel_error:.3g}",
                    f"{i.runner_up.layer} (cosine {i.runner_up.cosine:.4f}, "
                    f"rel.err {i.runner_up.rel_error:.3g})",
                ]
                for i in found
            ],
            right=(2, 3),
        )
    )
    for i in found:
        if i.note:
            print(f"slot {i.slot}: {i.note}")
    return EXIT_OK


def _target_config(args: argparse.Namespace) -> None:
    """``--target-config``: the architecture (``architectures[0]``, with ``model_type`` beside
    it) and ``--num-layers`` where not given, from a target's config.json. Raises
    UsageError for an unreadable file or one without them."""
    path = args.target_config
    if path is None:
        if args.num_layers is None:
            raise UsageError("resolve needs --num-layers (or --target-config)")
        return
    if args.arch is not None:
        raise UsageError("give --arch or --target-config, not both")
    from ..engines.arch_names import Arch
    from ..limits import check_layers, read_json_object

    if path.is_dir():
        path = path / "config.json"
    config = read_json_object(path, f"cannot read target config {path}")
    archs, model_type = config.get("architectures"), config.get("model_type")
    if archs is not None and not (
        isinstance(archs, list) and archs and all(isinstance(a, str) and a for a in archs)
    ):
        raise UsageError(f"{path}: architectures must be a list of names, not {archs!r:.80}")
    if model_type is not None and not (isinstance(model_type, str) and model_type):
        raise UsageError(f"{path}: model_type must be a name, not {model_type!r:.80}")
    if not archs and not model_type:
        raise UsageError(f"{path}: neither architectures nor model_type: not a model config")
    args.arch = (
        Arch(archs[0], (model_type,)) if archs and model_type else archs[0] if archs else model_type
    )
    if args.num_layers is None:
        text = config.get("text_config")
        holder = text if isinstance(text, dict) and "num_hidden_layers" in text else config
        n = holder.get("num_hidden_layers")
        if type(n) is not int:
            raise UsageError(
                f"{path}: no integer num_hidden_layers (nor in text_config): give --num-layers"
            )
        check_layers(f"{path}: num_hidden_layers", n)
        args.num_layers = n


def resolve(args: argparse.Namespace) -> int:
    if args.trainer is not None:  # the engines' table resolves a trainer's reading as well
        args.engine = args.trainer
    _target_config(args)
    from ..limits import check_layers

    check_layers("--num-layers", args.num_layers)  # every path below: EAGLE-3, --method, --want
    method = getattr(args, "method", "eagle3")
    from ..engines.source_methods import ENGINES as SOURCE_ENGINES
    from ..engines.source_methods import SOURCE_ONLY
    from ..methods import METHOD_ENGINES, METHOD_ONLY_ENGINES, SOURCE_READ

    if method == "mtp" and args.engine == "lmdeploy":  # its MTP rules: engines/mtp.py
        return _resolve_mtp(args)
    if args.engine in SOURCE_ENGINES and (
        method not in ("eagle3", "eagle3.1") or args.engine in SOURCE_ONLY
    ):
        return _resolve_source(args, method)
    if args.engine in METHOD_ONLY_ENGINES or (
        args.engine in METHOD_ENGINES and args.engine not in SOURCE_READ and method != "eagle3"
    ):
        return _resolve_method_only(args, method)
    if method == "dflash":
        return _resolve_dflash(args)
    if method in ("dflash2", "dspark"):
        return _resolve_family(args)
    if method == "mtp":
        return _resolve_mtp(args)
    if method not in ("eagle3", "eagle3.1"):
        from ..methods import get_method

        m = get_method(method)
        raise UsageError(f"--method {method}: {m.rules_note} (docs/methods.md)")
    if args.want is not None:
        from .matrix import want

        return want(args)
    from ..engines.resolve import get_engine
    from ..errors import SilentlyWrong, Unservable
    from ..render import to_json

    ids = args.ids
    if args.draft_config is not None:
        if ids is not None:
            raise UsageError("give --ids or --draft-config, not both")
        from ..engines.draft_config import read_draft_config

        ids = get_engine(args.engine).draft_ids(read_draft_config(args.draft_config))
    from .matrix import resolve_engine

    engine = resolve_engine(args)
    try:
        if args.num_layers < 4:
            raise Unservable(
                f"num_layers {args.num_layers}: EAGLE-3 defaults need at least 4 layers"
            )
        res = engine.resolve(
            args.num_layers, ids, args.arch, args.version, use_installed=args.source == "auto"
        )
    except Unservable as exc:
        if args.json:
            refused = {
                "engine": args.engine,
                "version": args.version,
                "arch": args.arch,
                "refused": str(exc),
                "silent": isinstance(exc, SilentlyWrong),
                "layers": None,
            }
            print(to_json(side_keys(args, refused)))
        how = (
            "runs this with a wrong draft input, silently (no abort)"
            if isinstance(exc, SilentlyWrong)
            else "would not serve this"
        )
        print(f"eagle-contract resolve: {args.engine} {how}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return _print_resolution(args, res)


def _print_resolution(args: argparse.Namespace, res: Resolution) -> int:
    """``resolve``'s answer, as JSON (``--json``) or text; exit 1 where it has problems."""
    from ..render import to_json
    from ..tables import table

    if args.json:
        answer = {**res.to_dict(), "method": getattr(args, "method", "eagle3")}
        print(to_json(side_keys(args, answer)))
        return EXIT_FINDINGS if res.problems else EXIT_OK
    head = f"{res.engine} {res.version or ''} {res.arch or ''}".split()
    print(
        " ".join(head) + f", L = {res.num_layers}, ids "
        f"{'(default)' if res.ids is None else list(res.ids)}"
    )
    print(
        table(
            ["pos", "id", "capture", "layer"],
            [
                [i, "-" if p.id is None else p.id, p.capture, p.layer]
                for i, p in enumerate(res.positions)
            ],
        )
    )
    print(f"source: {res.source}")
    for name, value, why in res.assumed:
        print(f"assumed: {name} {value}: {why}")
    for note in res.notes:
        print(f"note: {note}")
    for problem in res.problems:
        print(f"{problem.code}: {problem.message}")
    return EXIT_FINDINGS if res.problems else EXIT_OK


def _resolve_dflash(args: argparse.Namespace) -> int:
    """``resolve --method dflash``: the draft's taps (``--ids``: its target_layer_ids, or its
    ``--draft-config``) on the engine (engines/dflash.py)."""
    from ..engines.dflash import ENGINES, read_dflash_draft, resolve_dflash
    from ..engines.dflash_draft import TAP_KEYS, DFlashDraft
    from ..errors import Unservable

    if args.num_layers < 1:
        raise UsageError(f"--num-layers {args.num_layers}: a target has at least one layer")
    if args.engine not in ENGINES:
        raise UsageError(
            f"--method dflash: no DFlash tap rules of {args.engine} are read here; one of "
            f"{', '.join(ENGINES)} (docs/methods.md)"
        )
    if args.want is not None:
        return _want_dflash(args)
    if args.ids is not None and args.draft_config is not None:
        raise UsageError("give --ids or --draft-config, not both")
    if args.draft_config is not None:
        draft = read_dflash_draft(args.draft_config)
    elif args.ids:
        draft = DFlashDraft(None, {TAP_KEYS[0]: tuple(args.ids)})
    else:
        raise UsageError(
            "--method dflash needs --draft-config (its tap list, or its num_hidden_layers for "
            "the engine's fallback) or --ids (its target_layer_ids)"
        )
    runner = getattr(args, "runner", "auto")
    if runner != "auto" and args.engine != "vllm":
        raise UsageError("--runner is for --engine vllm")
    draft_impl = getattr(args, "draft_model_impl", None)
    if draft_impl is not None and args.engine != "tpu-inference":
        raise UsageError("--draft-model-impl is for --engine tpu-inference")
    try:
        res = resolve_dflash(
            args.engine,
            args.num_layers,
            draft,
            args.arch,
            args.version,
            None if runner == "auto" else runner,
            draft_impl,
        )
    except Unservable as exc:
        return _refused(args, exc)
    return _print_resolution(args, res)


def _method_refusal(args: argparse.Namespace) -> None:
    """tpu-inference / vllm-ascend for DFlash2, DSpark and MTP: what their releases show,
    read by gen_tpu_rules.py / gen_ascend_rules.py (usage error, exit 2)."""
    if args.engine not in ("tpu-inference", "vllm-ascend"):
        return
    from ..errors import Unservable

    why: str | None
    try:
        if args.engine == "tpu-inference":
            from ..engines.tpu import method_refusal

            why = method_refusal(args.method, args.version)
        else:
            from ..engines import ascend, mtp

            why = ascend.method_refusal(args.method, args.version, mtp.releases("vllm"))
    except Unservable as exc:
        why = str(exc)
    if why is None:  # read: answered by the method's resolver
        return
    raise UsageError(f"--method {args.method}: {why} (docs/layers.md)")


def _resolve_family(args: argparse.Namespace) -> int:
    """``resolve --method dflash2|dspark`` (engines/dflash_family.py): the draft's taps
    (``--ids``, or its ``--draft-config``) on the engine, by the rules read for the method."""
    from ..engines.dflash_family import ENGINES, resolve_method
    from ..errors import Unservable

    method = args.method
    if args.num_layers < 1:
        raise UsageError(f"--num-layers {args.num_layers}: a target has at least one layer")
    _method_refusal(args)
    if args.engine not in ENGINES[method]:
        raise UsageError(
            f"--method {method}: no {method} tap rules of {args.engine} are read here; one "
            f"of {', '.join(ENGINES[method])} (docs/methods.md)"
        )
    if getattr(args, "runner", "auto") != "auto":
        raise UsageError(f"--runner is not read for --method {method}")
    if args.want is not None:
        return _want_family(args)
    if args.ids is not None and args.draft_config is not None:
        raise UsageError("give --ids or --draft-config, not both")
    data = None
    path = None
    if args.draft_config is not None:
        from ..engines import gguf_meta
        from ..engines.draft_config import read_draft_json

        path = Path(args.draft_config)
        if path.is_dir():
            path = path / "config.json"
        data = None if gguf_meta.is_gguf(path) else read_draft_json(path)
    elif not args.ids:
        raise UsageError(
            f"--method {method} needs --draft-config (its tap list) or --ids (its taps)"
        )
    try:
        res = resolve_method(
            method, args.engine, args.num_layers, data, args.ids, args.arch, args.version, path
        )
    except Unservable as exc:
        return _refused(args, exc)
    return _print_resolution(args, res)


def _resolve_mtp(args: argparse.Namespace) -> int:
    """``resolve --method mtp`` (engines/mtp.py): the one target state the engine feeds an
    MTP head on the target (``--arch`` or ``--target-config``); no tap list to give."""
    from ..engines.mtp import refusal, resolve_mtp
    from ..errors import Unservable
    from ..render import to_json

    if args.num_layers < 1:
        raise UsageError(f"--num-layers {args.num_layers}: a target has at least one layer")
    if args.ids is not None or args.draft_config is not None or args.want is not None:
        raise UsageError(
            "--method mtp has no tap list: give --arch or --target-config, not --ids, "
            "--draft-config or --want"
        )
    if getattr(args, "runner", "auto") != "auto":
        raise UsageError("--runner is not read for --method mtp")
    _method_refusal(args)
    why = refusal(args.engine)
    if why is not None:
        raise UsageError(f"--method mtp: {why}")
    try:
        res = resolve_mtp(args.engine, args.num_layers, args.arch, args.version)
    except Unservable as exc:
        if args.json:
            print(to_json({**_dflash_asked(args), "refused": str(exc), "layers": None}))
        print(f"eagle-contract resolve: {args.engine} would not serve this: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return _print_resolution(args, res)


def _resolve_method_only(args: argparse.Namespace, method: str) -> int:
    """``resolve --engine onnxruntime-genai|lmdeploy --method M`` (engines/method_engines.py):
    an engine read for some methods only (lmdeploy: and EAGLE-3, engines/lmdeploy.py); every
    other method is a usage error."""
    from ..engines.method_engines import refusal, resolve

    why = refusal(args.engine, method)
    if why is not None:
        raise UsageError(why)
    return _resolve_by_rules(args, method, resolve, needs_taps=True)


def _resolve_source(args: argparse.Namespace, method: str) -> int:
    """``resolve --engine trtllm|trtllm-autodeploy|sglang-jax|atom|ollama|mistralrs|openvino
    --method M``
    (engines/source_methods.py): the rules read from those engines' source for the drafts
    that read the target's hidden states; a method not served or not read is refused with the
    reason (exit 2, ``refused`` in the ``--json`` answer)."""
    from ..engines.source_methods import refusal, resolve

    if args.engine in ("ollama", "mistralrs") and method in ("eagle3", "eagle3.1"):
        raise UsageError(refusal(args.engine, method) or f"{args.engine}: EAGLE-3 is not read here")
    why = refusal(args.engine, method)
    return _resolve_by_rules(args, method, resolve, needs_taps=why is None and method != "pard")


def _resolve_by_rules(
    args: argparse.Namespace,
    method: str,
    resolve: Callable[..., Resolution],
    needs_taps: bool,
) -> int:
    """``resolve --method M`` on an engine whose rules are a table read from its code
    (engines/method_engines.py, engines/source_methods.py): the options checked, the draft's
    config read, the answer printed; ``needs_taps``: the method has a tap list to resolve."""
    from ..errors import Unservable

    if args.num_layers < 1:
        raise UsageError(f"--num-layers {args.num_layers}: a target has at least one layer")
    if getattr(args, "runner", "auto") != "auto":
        raise UsageError(f"--runner is not read for --engine {args.engine} --method {method}")
    if args.want is not None:
        return _want_method(args, method)
    if method == "mtp":
        if args.ids is not None or args.draft_config is not None:
            raise UsageError(
                "--method mtp has no tap list: give --arch or --target-config, not --ids or "
                "--draft-config"
            )
    elif args.ids is not None and args.draft_config is not None:
        raise UsageError("give --ids or --draft-config, not both")
    elif needs_taps and args.ids is None and args.draft_config is None:
        raise UsageError(
            f"--method {method} needs --draft-config (its config.json) or --ids (its taps)"
        )
    data = None
    if args.draft_config is not None:
        from ..engines.draft_config import read_draft_json

        path = Path(args.draft_config)
        data = read_draft_json(path / "config.json" if path.is_dir() else path)
    try:
        res = resolve(args.engine, method, args.num_layers, data, args.ids, args.arch, args.version)
    except (Unservable, EagleContractError) as exc:
        return _refused(args, exc)
    return _print_resolution(args, res)


def _want_method(args: argparse.Namespace, method: str) -> int:
    """``resolve --engine E --method M --want LAYER ...`` on an engine whose rules for ``M``
    are engines/method_engines.py's (read from wheels or from source): the one tap list that
    makes every asked release feed those layers, or why none does."""
    from ..engines import method_engines
    from ..errors import EagleContractError

    why = method_engines.refusal(args.engine, method) if method != "eagle3.1" else None
    if why is not None:
        raise UsageError(why)
    if method == "mtp":
        raise UsageError("--method mtp has no tap list: --want does not apply")
    wanted = _wanted(args)
    try:
        versions = method_engines.versions(args.engine, method, args.version)
    except EagleContractError as exc:
        raise UsageError(str(exc)) from None
    found = {
        v: method_engines.taps_for(args.engine, method, args.num_layers, wanted, None, args.arch, v)
        for v in versions
    }
    key = method_engines.tap_key(args.engine, method)
    asked = args.version or method_engines.assumed(args.engine, method)
    label = method_engines.named(args.engine, asked, asked)  # a source snapshot says so
    return _print_want(
        args,
        wanted,
        found,
        key,
        {"read": label},
        label,
        lambda taps: [f"{label} feeds {', '.join(map(str, wanted))} with {key} = {list(taps)}"],
        per_version=versions != [None],
        why=lambda: _want_why(args, method, wanted, versions[0]),
    )


def _wanted(args: argparse.Namespace) -> list[Layer]:
    """``--want``'s layers, parsed; --ids and --draft-config do not go with it (exit 2)."""
    from ..layers import Layer

    if args.ids is not None or args.draft_config is not None:
        raise UsageError("--want asks for the taps: give it without --ids or --draft-config")
    try:
        return [Layer.parse(text) for text in args.want]
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _want_why(
    args: argparse.Namespace, method: str, wanted: Sequence[Layer], version: str | None
) -> str:
    """Why the engine refuses the taps of layer t's output for ``wanted`` (tap t =
    ``residual:t+1``), where it does: a target it does not serve, ids out of range, ..."""
    from ..engines import method_engines
    from ..errors import EagleContractError, Unservable

    taps = [x.index - 1 for x in wanted]
    try:
        method_engines.resolve(args.engine, method, args.num_layers, None, taps, args.arch, version)
    except (Unservable, EagleContractError) as exc:
        return f" (taps {taps}: {exc})"
    return ""


def _want_family(args: argparse.Namespace) -> int:
    """``resolve --method dflash2|dspark --want LAYER ...``: the one tap list that makes every
    asked release feed those layers, or why none does."""
    from ..engines.base import releases_for
    from ..engines.dflash_family import taps_for
    from ..engines.method_table import releases

    wanted = _wanted(args)
    versions: list[str | None] = (
        [None]
        if args.version is None
        else list(releases_for(args.version, releases(args.engine, args.method), args.engine))
    )
    found = {
        v: taps_for(args.method, args.engine, args.num_layers, wanted, args.arch, v)
        for v in versions
    }
    key = (
        "dspark_target_layer_ids"
        if args.method == "dspark" and args.engine in ("sglang", "vllm")
        else "dflash_config.target_layer_ids"
    )
    return _print_want(
        args,
        wanted,
        found,
        key,
        {},
        f"{args.engine} {args.version or '(newest read)'}",
        lambda taps: [
            f"{args.engine} feeds {', '.join(map(str, wanted))} with {key} = {list(taps)}"
        ],
    )


def _refused(args: argparse.Namespace, exc: Exception) -> int:
    """A DFlash-family ``resolve`` the engine would not serve: the reason on stderr (and the
    ``--json`` answer with ``refused``), exit 2. A UsageError (this tool's own limit, not the
    engine's) is raised on, as every usage error is."""
    from ..render import to_json

    if isinstance(exc, UsageError):
        raise exc
    if args.json:
        answer = {**_dflash_asked(args), "refused": str(exc), "silent": False, "layers": None}
        print(to_json(answer))
    print(f"eagle-contract resolve: {args.engine} would not serve this: {exc}", file=sys.stderr)
    return EXIT_USAGE


def _dflash_asked(args: argparse.Namespace) -> dict[str, object]:
    """What ``resolve --method dflash --json`` was asked, at the head of each of its answers."""
    asked: dict[str, object] = {
        "engine": args.engine,
        "method": getattr(args, "method", "dflash"),
        "version": args.version,
        "arch": args.arch,
    }
    return side_keys(args, asked)


def _want_dflash(args: argparse.Namespace) -> int:
    """``resolve --method dflash --want LAYER ...``: the one tap list that makes every asked
    release of the engine feed those layers, or why none does."""
    import json

    from ..engines.dflash import releases, taps_for
    from ..engines.dflash_draft import TAP_KEYS
    from ..engines.resolve import get_engine

    wanted = _wanted(args)
    if args.version is None:
        versions: list[str | None] = [None]
    elif args.engine == "sglang":
        from ..engines.base import releases_for

        versions = list(releases_for(args.version, releases("sglang"), "SGLang"))
    else:
        versions = list(get_engine(args.engine).versions(args.version))
    found = {v: taps_for(args.engine, args.num_layers, wanted, args.arch, v) for v in versions}
    label = f"{args.engine} {args.version or '(newest read)'}"

    def line(taps: Sequence[int] | None) -> str | None:
        if taps is None:
            return None
        return f'"dflash_config": {{"target_layer_ids": {json.dumps(list(taps))}}}'

    common = set(found.values())
    return _print_want(
        args,
        wanted,
        found,
        TAP_KEYS[0],
        {"config_line": line(next(iter(common)) if len(common) == 1 else None)},
        label,
        lambda taps: [
            f"{label} feeds {', '.join(map(str, wanted))} with the taps",
            f"  {line(taps)}",
        ],
    )


def _print_want(
    args: argparse.Namespace,
    wanted: Sequence[Layer],
    found: Mapping[str | None, tuple[int, ...] | None],
    key: str,
    extra: Mapping[str, object],
    label: str,
    ok: Callable[[tuple[int, ...]], list[str]],
    per_version: bool = True,
    why: Callable[[], str] | None = None,
) -> int:
    """``resolve --want``'s answer: the one tap list under ``key`` that makes every release
    asked (``found``: release -> its taps, None where none) feed ``wanted``, or, on stderr, why
    none does (each release's taps where ``per_version``, then ``why``); ``--json``: one object
    (``extra`` beside the common keys). Exit 1 where no one list does."""
    from ..render import to_json

    taps = next(iter(found.values())) if len(set(found.values())) == 1 else None
    if args.json:
        print(
            to_json(
                {
                    **_dflash_asked(args),
                    "num_layers": args.num_layers,
                    "want": [str(x) for x in wanted],
                    "taps": None if taps is None else list(taps),
                    "config_key": key,
                    **extra,
                    "per_version": {
                        str(v): None if t is None else list(t) for v, t in found.items()
                    },
                }
            )
        )
    elif taps is None:
        print(
            f"no one tap list makes {label} feed {', '.join(map(str, wanted))}"
            + (
                ": "
                + ", ".join(f"{v}: {'none' if t is None else list(t)}" for v, t in found.items())
                if per_version
                else ""
            )
            + (why() if why is not None else ""),
            file=sys.stderr,
        )
    else:
        for text in ok(taps):
            print(text)
    return EXIT_OK if taps is not None else EXIT_FINDINGS


def schema(args: argparse.Namespace) -> int:
    from ..contract.model import schema_path

    if args.output is not None:
        written = write_schema(args.output, "-o")
        print(f"wrote the contract schema to {written}", file=sys.stderr)
        return EXIT_OK
    print(schema_path() if args.path else schema_path().read_text("utf-8"), end="\n")
    return EXIT_OK


def _copy_schema(path: Path, reads: Sequence[Path], *, asked: bool) -> None:
    """infer -o's copy of the schema beside the contract, once the contract is written. The
    default copy is best-effort: where it cannot be written, a note says so (the contract
    is written and valid; only an editor's link to the schema is missing); a copy asked for
    with ``--schema-file`` that cannot be written is a usage error."""
    try:
        write_schema(path, "--schema-file", reads=reads)
    except UsageError as exc:
        if asked:
            raise
        print(
            f"eagle-contract infer: note: no schema copy: {exc}; `eagle-contract schema -o "
            f"{path}` writes the one the contract's first line names",
            file=sys.stderr,
        )
        return
    print(f"wrote {path} (the schema its first line names: commit it)", file=sys.stderr)


def validate(args: argparse.Namespace) -> int:
    """Each contract loaded as ``check`` loads it (YAML, the schema, its own rules): exit 2
    when any is invalid, naming file:line:column; with ``--check``, each valid one is then
    checked on its own shards."""
    from ..contract.model import load_contract
    from ..errors import ContractError

    loaded, valid, problems = [], [], []
    for path in args.contracts:
        try:
            loaded.append(load_contract(path))
        except (ContractError, UsageError) as exc:
            problems.append(f"{path}: invalid contract:\n{exc}")
            continue
        valid.append(f"{path}: valid")
    total = len(args.contracts)
    if problems:  # the verdict first, as every findings command prints it (render.summary)
        more = "; the valid one(s) checked below" if args.check and loaded else ""
        print(
            f"FAILED: {len(problems)} of {total} contract(s) invalid (the problems on stderr){more}"
        )
    elif args.check:  # each check below prints its own verdict
        print(f"valid: {total} contract(s), each checked below on its own shards")
    else:
        print(f"ok: {total} contract(s) valid")
    for line in [] if args.quiet else valid:
        print(line)
    sys.stdout.flush()  # the verdict before the problems where both streams share a pipe
    for problem in problems:
        print(problem, file=sys.stderr)
    code: int = EXIT_USAGE if problems else EXIT_OK
    if not args.check:
        return code
    from ..plan.request import CheckRequest
    from ..shards.discovery import parse_sample
    from .check import run_check

    request = CheckRequest.of(sample=parse_sample(args.sample), seed=args.seed)
    for contract in loaded:
        try:
            checked = run_check(contract.path, request, quiet=args.quiet, verbose=args.verbose)
            code = max(code, checked)
        except EagleContractError as exc:  # this contract's shards or target: the next goes on
            print(f"{contract.path}: error: {exc}", file=sys.stderr)
            code = EXIT_USAGE
    return code
