"""``eagle-contract matrix CONTRACT`` (every serving engine version against the trainer's fc
input) and ``eagle-contract resolve --want LAYER ...`` (the ids that make one engine feed
given layers, per span of versions).

matrix exits 1 when a row of the contract's own serving engine and version range differs
from the trainer or refuses, 0 otherwise (other engines' rows only inform); resolve --want
exits 0 with one id list that serves every asked version, 1 when that list draws a warning
(EC514), 2 when no one list does.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError
from .args import add_print_json
from .exit_codes import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..engines.base import Engine, Resolution
    from ..engines.fixes import Inverse
    from ..engines.matrix import Row


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mat = sub.add_parser(
        "matrix", help="what every engine version would feed the draft's fc, beside the trainer"
    )
    mat.add_argument(
        "contract", type=Path, metavar="CONTRACT", help="the contract whose draft is looked up"
    )
    add_print_json(mat)


def matrix(args: argparse.Namespace) -> int:
    from ..contract.model import load_contract
    from ..engines import matrix as core
    from ..engines import method_engines
    from ..engines.draft_config import read_draft_config
    from ..engines.fixes import ANY
    from ..engines.resolve import engine_aux_ids, get_engine
    from ..render import to_json

    contract = load_contract(args.contract)
    training, serving = contract.training, contract.serving
    if training is None:
        raise UsageError(f"{args.contract}: no training section, so no fc input to compare")
    trained = [training.slots[i].layer for i in training.fc_input]
    arch = (serving.arch if serving else None) or contract.target.arch
    own = None
    draft = None
    own_rules = serving is not None and method_engines.serves(serving.engine, contract.method)
    if serving is not None:
        versions = (
            method_engines.versions(serving.engine, contract.method, serving.version)
            if own_rules
            else get_engine(serving.engine).versions(serving.version)
        )
        own = (serving.engine, [v or ANY for v in versions])
        if serving.draft_config is not None and not own_rules:
            draft = read_draft_config(serving.draft_config)

    def ids_of(engine: Engine) -> tuple[int, ...] | None:
        return None if serving is None else engine_aux_ids(serving, draft, engine.name)

    num_layers = contract.target.num_hidden_layers
    if contract.method == "dflash":  # the taps by DFlash's rules, on the engines that serve it
        from ..engines.dflash import read_dflash_draft
        from ..engines.dflash_draft import TAP_KEYS, DFlashDraft

        if serving is not None and serving.draft_config is not None:
            taps = read_dflash_draft(serving.draft_config)
        else:
            given = serving.aux_layer_ids if serving is not None else None
            taps = DFlashDraft(None, {TAP_KEYS[0]: given} if given else {})
        rows = core.dflash_matrix(trained, num_layers, arch, taps, own)
    elif contract.method in ("dflash2", "dspark"):  # engines/dflash_family.py
        from ..engines.dflash_family import family_matrix

        rows = family_matrix(contract.method, trained, num_layers, arch, serving, own)
    elif contract.method == "mtp":  # one state, no ids (engines/mtp.py)
        from ..engines.mtp import mtp_matrix

        trained = [training.slots[-1].layer]
        rows = mtp_matrix(trained[0], num_layers, arch, own)
    else:
        rows = core.matrix(trained, num_layers, arch, ids_of, own)
    if contract.method in ("dflash", "dflash2", "dspark", "mtp"):  # the method engines' rows
        data, ids = method_engines.draft_of(serving) if serving is not None else (None, None)
        rows += method_engines.rows(contract.method, trained, num_layers, arch, data, ids, own)
    differs = any(r.own and not r.same for r in rows)
    if args.json:
        print(
            to_json(
                {
                    "contract": contract.name,
                    "method": contract.method,
                    "arch": arch,
                    "num_layers": num_layers,
                    "trained": [str(x) for x in trained],
                    "rows": [r.to_dict() for r in rows],
                    "own_differs": differs,
                }
            )
        )
    else:
        print(_verdict(rows, differs))  # the verdict first: the contract's own engine
        print(f"{contract.name}: {arch or 'no arch'}, L = {num_layers}")
        text = core.render(rows, trained)
        if not args.verbose:  # the refusals' reasons cut to the terminal (whole: -v, --json)
            from ..render import cut
            from .check import terminal_width

            width = terminal_width()
            text = "\n".join(
                cut(line, width) if line.startswith("refused:") else line
                for line in text.splitlines()
            )
        print(text)
    return EXIT_FINDINGS if differs else EXIT_OK


def _verdict(rows: Sequence[Row], differs: bool) -> str:
    """The matrix's first line: what the contract's own engine rows say."""
    own = [r for r in rows if r.own]
    if not own:
        return "no verdict: the contract names no serving engine (every engine's row below)"
    if differs:
        bad = [r for r in own if r.feeds is not None and not r.same] or [
            r for r in own if not r.same
        ]
        spans = ", ".join(f"{r.engine.title} {r.label}" for r in bad)
        return f"FAILED: {spans}: the fc gets another input than the trainer's (rows marked *)"
    spans = ", ".join(f"{r.engine.title} {r.label}" for r in own)
    return f"ok: {spans}: the fc gets what the trainer feeds (rows marked *)"


def resolve_engine(args: argparse.Namespace) -> Engine:
    """The engine ``resolve`` asks: ``--engine``, with vLLM's ``--runner`` or tpu-inference's
    ``--draft-model-impl`` when one is given."""
    from ..engines.resolve import get_engine

    draft_impl = getattr(args, "draft_model_impl", None)
    if draft_impl is not None:
        if args.engine != "tpu-inference":
            raise UsageError("--draft-model-impl is for --engine tpu-inference")
        from ..engines.tpu import TPUInference

        return TPUInference(draft_impl)
    runner = getattr(args, "runner", "auto")
    if runner == "auto":
        return get_engine(args.engine)
    if args.engine != "vllm":
        raise UsageError("--runner is for --engine vllm")
    from ..engines.vllm import VLLM

    return VLLM(runner)


def want(args: argparse.Namespace) -> int:
    """``resolve --want``: the ids, per span of the asked versions."""
    from ..engines.fixes import ANY, chosen, common_ids, config_key, inverse, relabel, runs
    from ..layers import Layer
    from ..render import to_json

    try:
        wanted = [Layer.parse(text) for text in args.want]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.ids is not None or getattr(args, "draft_config", None) is not None:
        raise UsageError("--want asks for the ids: give it without --ids or --draft-config")
    if args.num_layers < 4:
        raise UsageError(f"--num-layers {args.num_layers}: EAGLE-3 needs at least 4 layers")
    engine = resolve_engine(args)
    versions = [v or ANY for v in engine.versions(args.version)]
    table = args.source == "table"
    found = {
        v: inverse(engine, wanted, args.num_layers, args.arch, None if v == ANY else v, not table)
        for v in versions
    }
    ids = common_ids(list(found.values()))
    pick = ids or common_ids([inv for inv in found.values() if inv.exact])
    best = {v: chosen(found[v], pick) for v in versions}

    def key(v: str) -> object:
        res, inv = best[v], found[v]
        said = [None if m is None else relabel(m, v, "\0") for m in (inv.refused, inv.said)]
        codes = () if res is None else tuple(p.code for p in res.problems)
        return None if res is None else (res.ids, res.layers), codes, said

    spans = runs(versions, key)
    refused = None
    if ids is None:
        refused = (
            "; ".join(
                relabel(f"{engine.title} {run[0]}: {found[run[0]].refused}", run[0], _label(run))
                for run in spans
                if found[run[0]].refused
            )
            or f"no one id list serves every {engine.title} version in {args.version}"
        )
    if args.json:
        from .args import side_keys

        print(
            to_json(
                side_keys(
                    args,
                    {
                        "engine": engine.name,
                        "version": args.version,
                        "arch": args.arch,
                        "num_layers": args.num_layers,
                        "want": [str(x) for x in wanted],
                        "ids": None if ids is None else list(ids),
                        "config_key": config_key(engine),
                        "config_line": None if ids is None else engine.config_line(ids),
                        "refused": refused,
                        "spans": [
                            {"versions": run, **found[run[0]].to_dict(best[run[0]])}
                            for run in spans
                        ],
                    },
                )
            )
        )
    else:
        for run in spans:
            print(_span_text(_label(run), found[run[0]], best[run[0]]))
        if ids is not None and len(spans) > 1:
            print(f"the same ids on every {engine.title} version in {args.version}")
    if ids is None:
        return EXIT_USAGE
    return EXIT_FINDINGS if any(r and r.problems for r in best.values()) else EXIT_OK


def _label(run: list[str]) -> str:
    from ..engines.fixes import span_label

    return span_label(run)


def _span_text(label: str, inv: Inverse, res: Resolution | None) -> str:
    from ..engines.fixes import config_key, layer_list, literal, relabel, set_where

    engine, title, version = inv.engine, inv.engine.title, inv.version
    where = title if label == "any" else f"{title} {label}"
    on = f" on {inv.arch}" if inv.arch else ""
    if inv.refused is None and res is not None and res.ids is not None:
        lines = [
            f"set {config_key(engine)} to {list(res.ids)} ({where} serves "
            f"{layer_list(inv.wanted)}{on})",
            f"  paste into {set_where(engine)}: {engine.config_line(res.ids)}",
        ]
        lines += [f"  {p.code}: {relabel(p.message, version, label)}" for p in res.problems]
        if list(res.ids) != sorted(res.ids):
            lines.append(
                f"  note: no ids in layer order reach them on {where}, these do; it concatenates "
                "in layer order, so keep the trainer's slots ascending (EC506)"
            )
        lines += [f"  assumed: {name} {value}: {why}" for name, value, why in res.assumed]
        return "\n".join(lines)
    lines = [f"{where}{on}: {relabel(inv.refused or '', version, label)}"]
    if inv.said and inv.said != inv.refused:
        said = relabel(inv.said, version, label)
        lines.append(f"  {title} refuses ids {list(literal(inv.wanted))}: {said}")
    if res is not None and res.ids is not None:
        lines.append(
            f"  nearest it feeds: {layer_list(res.layers)} with ids {list(res.ids)}; "
            "retrain on those"
        )
    return "\n".join(lines)
