"""DFlash2 and DSpark: the draft's taps on canonical layers, per engine and release.

Both are DFlash-family drafts: a tap t is the output of target layer t (``residual:t+1``), as
for DFlash (``engines/dflash.py``). What each engine adds for them is read from its releases
by ``scripts/gen_method_rules.py`` (``method_rules.json``); docs/methods.md states it:

- DFlash2: every engine that serves it runs it on its DFlash path (SGLang's
  ``DFlash2DraftModel`` subclasses ``DFlashDraftModel``; vLLM maps speculators' ``dflash2`` to
  method ``dflash``; llama.cpp's converter registers ``DFlash2DraftModel`` on ``DFlashModel``),
  so the DFlash rules answer, in the releases that have it.
- DSpark: SGLang reads top-level ``dspark_target_layer_ids`` first, then DFlash's keys and
  fallback, refuses a draft without a Markov head, and captures through the DFlash hook unless
  the target has its own ``set_dspark_layers_to_capture`` (not followed here); vLLM's V2 reader
  adds 1 to ``dspark_target_layer_ids`` (as they are for ``model_type`` ``deepseek_v41`` from
  0.30.0) and to a top-level ``target_layer_ids``; llama.cpp's converter writes the ids + 1
  into ``dflash.target_layers``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import EagleContractError, Unservable
from ..layers import Layer
from . import dflash, dflash_draft, method_table
from .base import Position, Query, Resolution
from .method_table import releases, span

METHODS = ("dflash2", "dspark")
ENGINES = {
    "dflash2": ("sglang", "vllm", "llama.cpp", "mlx"),
    "dspark": ("sglang", "vllm", "llama.cpp", "mlx"),
}
PACKAGES = {"sglang": "SGLang", "vllm": "vLLM", "llama.cpp": "llama-cpp-python", "mlx": "mlx-vlm"}
DSPARK_KEY = "dspark_target_layer_ids"


def _version(engine: str, method: str, q: Query, package: str) -> tuple[str, dict[str, Any]]:
    read = method_table.table()[engine]["releases"]
    version = q.assume(read[-1], package)
    row = method_table.row(engine, version)
    if row is None:
        raise Unservable(
            f"{package} {version}: not read for {method} here; read: {', '.join(read)} "
            "(docs/methods.md)"
        )
    if not method_table.serves(row, method):
        first = releases(engine, method)
        raise Unservable(
            f"{package} {version} has no {_TITLE[method]} path"
            + (f" (from {first[0]} on)" if first else "")
        )
    return version, row


_TITLE = {"dflash2": "DFlash2", "dspark": "DSpark"}


def _dflash_draft(data: Mapping[str, Any] | None, path: Path | None) -> dflash_draft.DFlashDraft:
    return dflash.parse_dflash_draft(data or {}, path)


def _again(res: Resolution, source: str, notes: Sequence[str]) -> Resolution:
    return dataclasses.replace(res, source=f"{source}; {res.source}", notes=(*notes, *res.notes))


def resolve_method(
    method: str,
    engine: str,
    num_layers: int,
    data: Mapping[str, Any] | None,
    ids: Sequence[int] | None = None,
    arch: str | None = None,
    version: str | None = None,
    path: Path | None = None,
) -> Resolution:
    """``method``'s draft (its config.json ``data``, or ``ids`` as its tap list) on ``engine``.
    Raises Unservable (the engine would not serve it) or EagleContractError (a bad config)."""
    if method not in METHODS:
        raise EagleContractError(f"{method}: not a DFlash-family method read here")
    if engine not in ENGINES[method]:
        raise Unservable(
            f"{engine}: no {_TITLE[method]} tap rules are read here (read for "
            f"{', '.join(ENGINES[method])}; docs/methods.md)"
        )
    given = ids is not None
    if ids is not None:
        key = DSPARK_KEY if method == "dspark" and engine != "llama.cpp" else None
        data = {key: list(ids)} if key else {"dflash_config": {"target_layer_ids": list(ids)}}
        if method == "dspark":  # --ids: the tap list alone is asked, the rest as served
            data = {**data, "dspark_markov_rank": 1}
            if engine == "mlx":
                data = {"dflash_config": {"target_layer_ids": list(ids), "markov_rank": 1}}
        elif engine == "mlx":
            data = {**data, "architectures": ["DFlash2DraftModel"]}
    q = Query(engine, num_layers, None, arch, version)
    package = PACKAGES[engine]
    ver, row = _version(engine, method, q, package)
    if engine == "mlx":
        if not given and not (data or {}).get("model_type"):
            raise Unservable(dflash_draft.mlx_unrouted(ver))
        return _mlx(method, num_layers, data or {}, q, ver, row, path)
    if method == "dflash2":
        return _dflash2(engine, num_layers, data, q, ver, row, path)
    if engine == "sglang":
        return _dspark_sglang(num_layers, data or {}, q, ver, row, path)
    if engine == "vllm":
        return _dspark_vllm(num_layers, data or {}, q, ver, row)
    return _dspark_llamacpp(num_layers, data or {}, q, ver, row, path, given)


def _dflash2(
    engine: str,
    num_layers: int,
    data: Mapping[str, Any] | None,
    q: Query,
    version: str,
    row: Mapping[str, Any],
    path: Path | None,
) -> Resolution:
    if engine == "sglang":
        why = (
            f"SGLang {span(row)}: {', '.join(row['dflash2'])} subclass DFlashDraftModel "
            "(models/dflash.py): the DFLASH worker's tap rules"
        )
    elif engine == "vllm":
        why = (
            f"vLLM {span(row)}: DFlash2DraftModel is registered and runs on the DFlash "
            "speculator (v1/worker/gpu/spec_decode/dflash2; speculators' dflash2 is method "
            "dflash): the DFlash tap rules"
        )
    else:
        why = (
            f"llama-cpp-python {version}: conversion registers {', '.join(row['dflash2'])} on "
            "DFlashModel: the DFlash tap rules"
        )
    draft = _dflash_draft(data, path)
    res = dflash.resolve_dflash(engine, num_layers, draft, q.arch, version)
    return _again(res, f"DFlash2 ({why})", q.notes)


def _markov_rank(data: Mapping[str, Any]) -> Any:
    """The draft's Markov head rank as SGLang's parse_dspark_draft_config reads it: top-level
    ``dspark_markov_rank``, else ``dspark_config`` / ``dflash_config``'s ``markov_rank``, else
    the text config's, else the top level's, else 0."""
    if data.get("dspark_markov_rank") is not None:
        return data["dspark_markov_rank"]
    merged: dict[str, Any] = {}
    for key in ("dflash_config", "dspark_config"):
        if isinstance(data.get(key), dict):
            merged.update(data[key])
    if "markov_rank" in merged:
        return merged["markov_rank"]
    text = data.get("text_config")
    if isinstance(text, dict) and "markov_rank" in text:
        return text["markov_rank"]
    return data.get("markov_rank", 0)


def _dspark_ids(data: Mapping[str, Any], path: Path | None) -> tuple[int, ...] | None:
    value = data.get(DSPARK_KEY)
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in value)
    ):
        raise EagleContractError(
            f"{path}: {DSPARK_KEY} must be a non-empty list of integers, not {value!r:.80}"
        )
    return tuple(value)


def _dspark_sglang(
    num_layers: int,
    data: Mapping[str, Any],
    q: Query,
    version: str,
    row: Mapping[str, Any],
    path: Path | None,
) -> Resolution:
    facts = row["dspark"]
    rank = _markov_rank(data)
    try:  # SGLang takes int(raw) of whatever the config holds
        whole = int(rank) if rank is not None and not isinstance(rank, bool | list | dict) else 0
    except (TypeError, ValueError, OverflowError):
        whole = 0
    if facts["markov"] and whole <= 0:
        raise Unservable(
            f"SGLang {version}: DSPARK requires markov_rank > 0 in the draft config, got "
            f"markov_rank={rank!r:.20} (model_runner spec_aux_hidden_state: require_markov)"
        )
    arch = q.arch or dflash.SGLANG_DEFAULT_ARCH
    if arch in facts["hooks"]:
        raise Unservable(
            f"SGLang {version}: {arch} has its own set_dspark_layers_to_capture (the runner "
            "calls it instead of the DFlash hook); what it captures is not followed here"
        )
    own = _dspark_ids(data, path)
    notes = list(q.notes)
    if own is not None:
        rest = dflash.parse_dflash_draft({k: v for k, v in data.items() if k != DSPARK_KEY}, path)
        draft = dataclasses.replace(
            rest, found={dflash_draft.TAP_KEYS[0]: own}
        )  # where SGLang puts them
        notes.append(f"SGLang {version} reads {DSPARK_KEY} first ({facts['file']})")
    else:
        draft = _dflash_draft(data, path)
    res = dflash.resolve_dflash("sglang", num_layers, draft, q.arch, version)
    return _again(
        res,
        f"DSpark: SGLang {span(row)} {facts['file']} parse_dspark_draft_config reads "
        f"{', '.join(facts['keys'])} (then the DFlash fallback); capture through "
        "set_dflash_layers_to_capture where the target has no DSpark hook",
        notes,
    )


def _dspark_vllm(
    num_layers: int, data: Mapping[str, Any], q: Query, version: str, row: Mapping[str, Any]
) -> Resolution:
    from . import vllm_rules as rules
    from .vllm import _arch

    facts = row["dspark"]
    rel = rules.release(version)
    q.arch, cap = _arch(q.arch, rel.version, q.notes)
    keys = rel.runners.get("v2")
    if not keys:
        raise Unservable(f"vLLM {rel.span}: no V2 runner reader, DSpark's path (not resolved)")
    model_type = data.get("model_type")
    shifts = facts[DSPARK_KEY]
    dshift = shifts.get(model_type, shifts["qwen3"]) if isinstance(model_type, str) else None
    if dshift is None:
        dshift = shifts["qwen3"]
    q.assumed.append(
        (
            "runner",
            "v2",
            f"vLLM {version}: DSpark is implemented only by the V2 GPU model runner "
            "(config/vllm.py; v1/worker/gpu/spec_decode/dspark)",
        )
    )
    draft = _dflash_draft(data, None)
    picked = None
    for key, shift in keys:
        if key in draft.found:
            if key == DSPARK_KEY:
                shift = dshift
            elif key == "target_layer_ids":
                shift = facts["target_layer_ids"]
            picked = (key, shift, draft.found[key])
            break
    if picked is None:
        raise Unservable(
            f"vLLM {version}: the draft has none of the keys the V2 reader reads "
            f"({', '.join(k for k, _ in keys)}): vLLM would feed its EAGLE-3 default, "
            "not resolved for DSpark"
        )
    key, shift, taps = picked
    q.ids = list(taps)
    q.notes.append(f"vLLM {version} (V2 runner) reads {key}" + (f" (+{shift})" if shift else ""))
    ids = [t + shift for t in taps]
    low = 1 if cap.id0 == "never" else 0
    high = num_layers - 1 + cap.last
    bad = [i for i in ids if not low <= i <= high]
    if bad:
        raise Unservable(
            f"vLLM {version}: ids {bad} lie outside [{low}, {high}] for {q.arch}: fewer states "
            "than the draft takes"
        )
    if 0 in ids and cap.id0 == "crash":
        raise Unservable(f"id 0: vLLM {cap.file} adds hidden_states + residual with residual None")
    reached = sorted(set(ids))
    if len(reached) != len(ids):
        raise Unservable(f"vLLM {version}: duplicate ids {ids} capture each layer once")
    q.note_order(ids, "vLLM concatenates the states in layer order")
    positions = tuple(Position(i - shift, i, Layer(i + cap.plus)) for i in reached)
    return q.answer(
        positions,
        f"DSpark: vLLM {span(row)} {facts['file']} get_eagle3_aux_layers_from_config reads "
        f"{', '.join(k for k, _ in keys)}; {DSPARK_KEY} + {dshift} for model_type "
        f"{model_type!r:.30}; {cap.file} ({cap.span}): id k = residual:k"
        + (f"+{cap.plus}" if cap.plus else ""),
        taps,
    )


def _dspark_llamacpp(
    num_layers: int,
    data: Mapping[str, Any],
    q: Query,
    version: str,
    row: Mapping[str, Any],
    path: Path | None,
    given: bool = False,
) -> Resolution:
    from . import gguf_meta

    if given:  # --ids: the HF tap list; every DSpark converter read writes it + 1
        draft = _dflash_draft(data, path)
        res = dflash.resolve_dflash("llama.cpp", num_layers, draft, q.arch, version)
        return _again(res, "DSpark: llama.cpp conversion (target_layer_ids + 1)", q.notes)

    if path is not None and gguf_meta.is_gguf(path):
        draft = dflash.read_dflash_draft(path)
        res = dflash.resolve_dflash("llama.cpp", num_layers, draft, q.arch, version)
        return _again(res, "DSpark GGUF (the DFlash loader)", q.notes)
    archs = data.get("architectures")
    names = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    rules: dict[str, str] = row["dspark"]
    known = [a for a in names if a in rules]
    if not known:
        raise Unservable(
            f"llama-cpp-python {version}: the draft's architectures {names[:3]} name no DSpark "
            f"converter ({', '.join(sorted(rules))})"
        )
    name = known[0]
    rule = rules[name]
    notes = list(q.notes)
    if rule == "dspark+1":
        taps = _dspark_ids(data, path)
        key = DSPARK_KEY
    elif rule.startswith("dflash+1"):
        dc = data.get("dflash_config")
        aux = data.get("aux_hidden_state_layer_ids")
        if rule.endswith("|aux") and aux is not None and not isinstance(dc, dict):
            ids = dflash._ids(aux, "aux_hidden_state_layer_ids", path)
            taps = None if ids is None else tuple(i - 1 for i in ids)
            key = "aux_hidden_state_layer_ids - 1"
        else:
            d = _dflash_draft(data, path)
            taps, key = d.taps, d.tap_key or "target_layer_ids"
    else:
        raise Unservable(f"llama-cpp-python {version}: {name}'s converter is not read here")
    if taps is None:
        raise Unservable(
            f"llama-cpp-python {version}: {name} has no tap list ({key}): the converter "
            "writes no dflash.target_layers and the loader refuses the GGUF"
        )
    notes.append(f"{name}: the converter writes {key} + 1 into dflash.target_layers")
    draft = dflash_draft.DFlashDraft(path, {dflash_draft.TAP_KEYS[0]: taps})
    res = dflash.resolve_dflash("llama.cpp", num_layers, draft, q.arch, version)
    return _again(res, f"DSpark: llama.cpp conversion {name}", notes)


def _mlx(
    method: str,
    num_layers: int,
    data: Mapping[str, Any],
    q: Query,
    version: str,
    row: Mapping[str, Any],
    path: Path | None,
) -> Resolution:
    """mlx-vlm: the drafter reads ``dflash_config.target_layer_ids`` (else the top-level key);
    the target model folder's loop appends layer i's output for id i."""
    facts = row[method]
    archs = data.get("architectures")
    names = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    others: dict[str, Any] = row.get("dspark_drafters") or {}
    if method == "dspark" and "DFlash2DraftModel" not in names:
        if data.get("model_type") == "deepseek_v4_dspark" or (
            q.arch and q.arch.lower() == "deepseek_v4"
        ):
            return _mlx_dsv4(num_layers, data, q, version, row)
        if "Gemma4DSparkModel" in names and "Gemma4DSparkModel" in row["routes"]:
            facts = others["gemma4"]  # routed by architectures, dflash_config optional
    where = f"mlx-vlm {version} {facts['file']}"
    dc = data.get("dflash_config")
    if facts is others.get("gemma4"):
        dc = dc if isinstance(dc, dict) else {}
    elif not isinstance(dc, dict):
        raise Unservable(f"{where}: {_TITLE[method]} requires a dflash_config object (TypeError)")
    routed = "DFlash2DraftModel" in names  # utils.get_model_type tests it first
    if method == "dflash2" and not routed:
        raise Unservable(
            f"mlx-vlm {version}: utils.get_model_type loads the DFlash2 drafter only for "
            "architectures DFlash2DraftModel"
        )
    if method == "dspark":
        if routed:
            raise Unservable(f"mlx-vlm {version}: a DFlash2DraftModel loads the DFlash2 drafter")
    if method == "dspark" and facts is not others.get("gemma4"):
        rank = data.get("markov_rank") or dc.get("markov_rank") or 0
        if dc.get("projector_type") != "dspark" and not (type(rank) is int and rank > 0):
            raise Unservable(
                f"mlx-vlm {version}: utils.get_model_type routes a dflash_config draft to DSpark "
                "only with projector_type 'dspark' or markov_rank > 0; this one loads as DFlash"
            )
    draft = _dflash_draft(data, path)
    taps = draft.taps
    if not taps:
        raise Unservable(
            f"{where}: target_layer_ids must be unique, increasing indices (ValueError at load); "
            "the draft lists none"
            + (f" ({DSPARK_KEY} is not read there)" if data.get(DSPARK_KEY) else "")
        )
    if facts["increasing"] and list(taps) != sorted(set(taps)):
        raise Unservable(f"{where}: target_layer_ids {list(taps)} are not strictly increasing")
    folder, positions = method_table.mlx_taps(row, q.arch, taps, num_layers, where)
    q.arch = folder
    q.ids = list(taps)
    return q.answer(
        positions,
        f"{_TITLE[method]}: mlx-vlm {span(row)} {facts['file']} reads "
        f"{', '.join(facts['keys'])}; models/{folder}/language.py "
        "appends layer i's output for id i (residual:i+1)",
        taps,
    )


def _mlx_dsv4(
    num_layers: int, data: Mapping[str, Any], q: Query, version: str, row: Mapping[str, Any]
) -> Resolution:
    """mlx-vlm's DeepSeek-V4 DSpark drafter (``deepseek_v4_dspark``, split from a DeepSeek-V4
    checkpoint): its ids are read (``target_layer_ids``, else the target text config's
    ``dspark_target_layer_ids``), but models/deepseek_v4/language.py captures for id i the
    mean over layer i's hyper-connection copies, a state no canonical layer names: refused."""
    facts = (row.get("dspark_drafters") or {}).get("deepseek_v4")
    if facts is None:
        raise Unservable(f"mlx-vlm {version}: no deepseek_v4_dspark drafter in this release")
    rule = row["models"].get("deepseek_v4")
    how = {
        "hc_mean": "the mean over the hyper-connection copies of layer i's output (h.mean(axis=2))",
        None: "no layer states (no capture in its language.py)",
    }.get(rule, "other than a layer's output")
    raise Unservable(
        f"mlx-vlm {version} {facts['file']} reads {', '.join(facts['keys'])}; "
        f"models/deepseek_v4/language.py captures for id i {how}: no canonical layer is that "
        "state (not followed here)"
    )


def taps_for(
    method: str,
    engine: str,
    num_layers: int,
    wanted: Sequence[Layer],
    arch: str | None,
    version: str | None,
) -> tuple[int, ...] | None:
    """The tap list that makes ``engine`` feed ``wanted``, or None (as dflash.taps_for)."""
    if not wanted or any(x.is_final_norm for x in wanted):
        return None
    for back in (1, 0):
        taps = tuple(x.index - back for x in wanted)
        if min(taps) < 0:
            continue
        try:
            res = resolve_method(method, engine, num_layers, None, taps, arch, version)
        except (Unservable, EagleContractError):
            continue
        if res.layers == tuple(wanted):
            return taps
    return None


def resolver_for(
    method: str, serving: Any, report: Any
) -> tuple[Callable[..., Resolution], str] | None:
    """A ``resolve_dflash``-shaped resolver of ``method`` for a contract's serving section
    (its ``draft_config`` read whole, else its ``aux_layer_ids`` as the tap list), and the
    method's title; None after an EC510 where neither reads."""
    from .draft_config import read_draft_json
    from .gguf_meta import is_gguf

    data: Mapping[str, Any] | None = None
    path: Path | None = None
    ids = None
    if serving.draft_config is not None:
        path = Path(serving.draft_config)
        path = path / "config.json" if path.is_dir() else path
        try:
            data = None if is_gguf(path) else read_draft_json(path)
        except EagleContractError as exc:
            report.add("EC510", str(exc), "serving.draft_config")
            return None
    elif serving.aux_layer_ids is not None:
        ids = list(serving.aux_layer_ids)
    else:
        report.add(
            "EC510",
            f"a {_TITLE[method]} serving section needs serving.draft_config (the draft's "
            "config.json) or serving.aux_layer_ids (its taps)",
            "serving",
        )
        return None

    def resolve(
        engine: str, num_layers: int, _draft: object, arch: str | None, version: str | None
    ) -> Resolution:
        try:
            return resolve_method(method, engine, num_layers, data, ids, arch, version, path)
        except EagleContractError as exc:  # a malformed key the method reads: not served
            raise Unservable(str(exc)) from None

    return resolve, _TITLE[method]


def family_matrix(
    method: str,
    trained: Sequence[Layer],
    num_layers: int,
    arch: str | None,
    serving: Any,
    own: tuple[str, Sequence[str]] | None,
) -> list[Any]:
    """``matrix`` rows of a DFlash2 / DSpark contract: every engine and release read for the
    method, what it feeds, and the taps that would make it feed the trained layers."""
    from .base import version_order
    from .fixes import relabel, runs
    from .matrix import Row, newest_for_any
    from .resolve import get_engine

    data: Mapping[str, Any] | None = None
    path: Path | None = None
    ids = None
    if serving is not None and serving.draft_config is not None:
        from .draft_config import read_draft_json

        path = Path(serving.draft_config)
        path = path / "config.json" if path.is_dir() else path
        data = read_draft_json(path)
    elif serving is not None and serving.aux_layer_ids is not None:
        ids = list(serving.aux_layer_ids)
    want = tuple(trained)
    rows: list[Any] = []
    for name in ENGINES[method]:
        mine = newest_for_any(own, name, releases(name, method))
        versions = sorted(set(releases(name, method)) | set(mine), key=version_order)
        cells: dict[str, tuple[Any, ...]] = {}
        read: dict[str, tuple[int, ...] | None] = {}
        for v in versions:
            try:
                res = resolve_method(method, name, num_layers, data, ids, arch, v, path)
            except (Unservable, EagleContractError) as exc:
                fix = taps_for(method, name, num_layers, want, arch, v)
                cells[v] = (None, relabel(str(exc), v, "\x00"), (), False, fix, v in mine)
                continue
            codes = tuple(sorted({p.code for p in res.problems}))
            read[v] = res.ids
            same = res.layers == want
            fix = None if same else taps_for(method, name, num_layers, want, arch, v)
            cells[v] = (res.layers, None, codes, same, fix, v in mine)
        keyed = {v: (read.get(v), cell) for v, cell in cells.items()}
        rows += [
            Row(get_engine(name), tuple(run), read.get(run[0]), *cells[run[0]])
            for run in runs(list(cells), keyed.__getitem__)
        ]
    return rows
