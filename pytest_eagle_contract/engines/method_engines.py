"""The method engines: onnxruntime-genai (DFlash2, DSpark, MTP; no EAGLE-3) and lmdeploy
(DFlash; its EAGLE-3 rules are ``lmdeploy.py``'s), whose rules for those methods are read
here (``methods.METHOD_ENGINES``).

Their rules are ``method_engines_rules.json``, written by ``scripts/read_engine_wheels.py
--rules`` from the wheels (docs/layers.md, "Methods per engine and release"):

- onnxruntime-genai 0.16.0 on (``models/builders/qwen.py``): the builder exports a DFlash2 or
  DSpark drafter for the Qwen3.5 targets only; it reads ``dflash_config.target_layer_ids``
  alone (never ``dspark_target_layer_ids``), adds 1 to each id to pick the residual entering
  that layer (``aux_hidden_state_layers``, which must lie in [1, L)), so tap t =
  ``residual:t+1``; an empty list or a tap on the last layer is refused at export. An MTP head
  on Qwen3.5 reads the hidden_states output, the final norm's (``final_norm``).
- lmdeploy 0.18.0 (``pytorch/spec_decode/dflash_utils.py``): DFlash on the targets whose model
  file captures a layer's output (qwen3, qwen3_5 and its MoE); it reads
  ``dflash_config.target_layer_ids`` alone, refuses ids that are not strictly increasing or
  lie outside [0, L) and a draft whose ``num_target_layers`` is not the target's (with
  ``--ids`` alone there is no config to read it from: the answer notes it as not checked);
  without ids it falls back to SGLang's formula (EC522, as SGLang's guess is reported).

The engines read from source (``methods.SOURCE_READ``: sglang-jax DFlash and MTP, ATOM DSpark
and MTP, ollama DFlash and MTP, TensorRT-LLM DFlash and standalone DSpark, mistral.rs DFlash,
DFlash2 (on its DFlash rows) and MTP, OpenVINO GenAI DFlash) are answered by
``source_methods.py``'s rules through the same functions here (``resolve``, ``versions``,
``rows``, ``taps_for``), so a contract naming them is checked, tabled and doctored as the
wheel-read ones are. Their refs are release tags and a snapshot commit, written in ``matrix``
as ``main@<sha>`` (TensorRT-LLM: ``main``, no release checked), in the table's order.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import EagleContractError, Unservable
from ..layers import Layer
from ..methods import EAGLE3_ENGINES, METHOD_ENGINES, SOURCE_READ
from .base import Engine, Position, Query, Resolution, releases_for

TITLES = {"dflash": "DFlash", "dflash2": "DFlash2", "dspark": "DSpark", "mtp": "MTP"}


@functools.cache
def table() -> dict[str, Any]:
    """method_engines_rules.json, read once."""
    data: dict[str, Any] = json.loads(
        Path(__file__).with_name("method_engines_rules.json").read_text()
    )
    return data


def releases(engine: str, method: str) -> list[str]:
    """The releases of ``engine`` read that serve ``method``, oldest first (an engine read
    from source: its refs in the table's order, the snapshot as ``main@<sha>``)."""
    if engine in SOURCE_READ:
        return _source_refs(engine, method)
    rows: dict[str, Any] = table()[engine]["releases"]
    return [v for v, row in rows.items() if row is not None and method in row["methods"]]


def _source_refs(engine: str, method: str) -> list[str]:
    """The refs of source-read ``engine`` serving ``method``: tags as tagged, the snapshot
    commit as ``main@<sha>``; TensorRT-LLM's one read (main, no release checked) as ``main``."""
    from . import source_methods

    if engine == "trtllm":
        return ["main"] if method in METHOD_ENGINES["trtllm"] else []
    snap = source_methods.table()[engine]["snapshot"]["commit"]
    rows_of = "dflash" if method == "dflash2" else method  # DFlash2 rides DFlash's rows there
    return [f"main@{r[:8]}" if r == snap else r for r in source_methods.releases(engine, rows_of)]


def assumed(engine: str, method: str) -> str | None:
    """The release ``resolve`` assumes without a version: the newest read (an engine read
    from source: its newest tag serving ``method``, else its snapshot)."""
    read = releases(engine, method)
    if engine in SOURCE_READ:
        tags = [r for r in read if not r.startswith("main")]
        return tags[-1] if tags else (read[-1] if read else None)
    return read[-1] if read else None


def named(engine: str, label: str | None, resolved: str | None) -> str:
    """``engine`` and the releases a finding names (``label``: the contract's, else None), as
    findings write them; an engine read from source names the ref resolved without one, and
    a snapshot says so (``main at <sha> (<date>; no release checked)``)."""
    version = label or (resolved if engine in SOURCE_READ else None)
    if engine not in SOURCE_READ or not version:
        return f"{engine} {version}" if version else engine
    from . import source_methods

    data = source_methods.table()[engine]
    if engine == "trtllm":
        return "trtllm main (no release checked: read through a code index)"
    snap = data["snapshot"]
    sha = version.removeprefix("main@")
    if sha in ("main", "snapshot") or (len(sha) >= 7 and snap["commit"].startswith(sha)):
        return f"{engine} main at {sha[:8]} ({snap['date']}; no release checked)"
    return f"{engine} {version}"


def refusal(engine: str, method: str) -> str | None:
    """Why ``method`` on method-only ``engine`` is not answered here, or None."""
    served = METHOD_ENGINES[engine]
    if method in served or (method == "eagle3" and engine in EAGLE3_ENGINES):
        return None
    if engine in SOURCE_READ:
        from . import source_methods

        why = source_methods.refusal(engine, method)
        if why is not None:
            return why
    from ..methods import methods_served

    return (
        f"{engine}: rules are read here only for --method {' / '.join(methods_served(engine))} "
        f"(docs/layers.md); not for {method}"
    )


def _row(engine: str, method: str, q: Query) -> tuple[str, dict[str, Any]]:
    rows: dict[str, Any] = table()[engine]["releases"]
    read = list(rows)
    served = releases(engine, method)
    version = q.assume(served[-1], engine)
    if version not in rows:
        raise Unservable(
            f"{engine} {version}: not read for {TITLES[method]} here; read: {', '.join(read)} "
            "(docs/layers.md)"
        )
    row = rows[version]
    if row is None or method not in row["methods"]:
        raise Unservable(
            f"{engine} {version} has no {TITLES[method]} path"
            + (f" (from {served[0]} on)" if served else "")
        )
    return version, row


def _target(q: Query, row: Mapping[str, Any], engine: str, version: str, what: str) -> str:
    targets: list[str] = row["targets"]
    if not q.arch:
        raise Unservable(
            f"give --arch or --target-config: {engine} {version} serves {what} only for "
            f"{', '.join(targets)}"
        )
    names = [str(q.arch), *getattr(q.arch, "also", ())]
    name: str | None = next((n for n in names if n in targets), None)
    if name is None:
        raise Unservable(
            f"{engine} {version}: {str(q.arch)[:60]} is not a {what} target there (only "
            f"{', '.join(targets)}; {row['file']})"
        )
    return name


def _tap_list(data: Mapping[str, Any] | None, ids: Sequence[int] | None) -> Any:
    """The draft's ``dflash_config.target_layer_ids`` as written (None where absent)."""
    if ids is not None:
        return list(ids)
    dc = (data or {}).get("dflash_config")
    return dc.get("target_layer_ids") if isinstance(dc, dict) else None


def _ints(value: Any, where: str) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in value
    ):
        raise EagleContractError(
            f"{where}: dflash_config.target_layer_ids must be a list of integers, not {value!r:.80}"
        )
    return list(value)


def resolve(
    engine: str,
    method: str,
    num_layers: int,
    data: Mapping[str, Any] | None,
    ids: Sequence[int] | None = None,
    arch: Any = None,
    version: str | None = None,
) -> Resolution:
    """``method``'s draft (its config.json ``data``, or ``ids`` as its tap list) on the
    method-only ``engine``. Raises Unservable (not served) or EagleContractError (a bad
    config)."""
    why = refusal(engine, method)
    if why is not None:
        raise Unservable(why)
    if engine in SOURCE_READ:  # source_methods.py's rules; main@<sha>: its snapshot
        from . import source_methods

        asked = None if version is None else version.removeprefix("main@")
        return source_methods.resolve(engine, method, num_layers, data, ids, arch, asked)
    q = Query(engine, num_layers, None, arch, version)
    ver, row = _row(engine, method, q)
    if engine == "onnxruntime-genai":
        return _ortg(method, q, data, ids, ver, row)
    return _lmdeploy(q, data, ids, ver, row)


def _ortg(
    method: str,
    q: Query,
    data: Mapping[str, Any] | None,
    ids: Sequence[int] | None,
    version: str,
    row: Mapping[str, Any],
) -> Resolution:
    where = f"onnxruntime-genai {version} {row['file']}"
    q.arch = _target(q, row, "onnxruntime-genai", version, TITLES[method])
    if method == "mtp":
        if row["mtp"] != "final_norm":
            raise Unservable(f"{where}: which state the MTP head reads was not read")
        return q.answer(
            (Position(None, 0, Layer.parse("final_norm")),),
            f"MTP: {where} exports the Qwen3.5 MTP head on the target's hidden_states output "
            "(the last layer norm's output 0): final_norm",
        )
    value = _tap_list(data, ids)
    if value is None:
        extra = (
            " (dspark_target_layer_ids is not read there)"
            if data and data.get("dspark_target_layer_ids") is not None
            else ""
        )
        raise Unservable(
            f"{where}: the draft has no dflash_config.target_layer_ids{extra}: the exporter "
            "refuses it (no fallback)"
        )
    taps = _ints(value, where)
    if not taps:
        raise Unservable(
            f"{where}: the checkpoint must define at least one target_layer_ids entry "
            "(ValueError at export)"
        )
    plus = int(row["plus"])
    L = q.num_layers
    bad = [t for t in taps if not 1 <= t + plus < L]
    if bad:
        raise Unservable(
            f"{where}: target_layer_ids {bad} lie outside [0, {L - 1}): the exporter cannot "
            "expose the output of the last layer or any outside the target (ValueError at export)"
        )
    q.ids = list(taps)
    positions = tuple(Position(t, t + plus, Layer(t + plus)) for t in taps)
    return q.answer(
        positions,
        f"{TITLES[method]}: {where} reads {row['key']} only, aux_hidden_state_layers = id + "
        f"{plus} (the residual entering that layer): tap t = residual:t+{plus}",
        taps,
    )


def _lmdeploy(
    q: Query,
    data: Mapping[str, Any] | None,
    ids: Sequence[int] | None,
    version: str,
    row: Mapping[str, Any],
) -> Resolution:
    from ..errors import Problem
    from ..limits import check_layers
    from .dflash import zlab_formula

    where = f"lmdeploy {version} {row['file']}"
    q.arch = _target(q, row, "lmdeploy", version, "DFlash")
    L = q.num_layers
    data = data or {}
    depth = data.get("num_target_layers")
    if row["depth_check"] and ids is None and depth != L:
        raise Unservable(
            f"{where}: the draft declares num_target_layers={depth!r:.20}, the target has {L} "
            "(DFlash draft/target depth mismatch, ValueError at start-up)"
        )
    if row["depth_check"] and ids is not None:
        q.notes.append(
            f"num_target_layers not checked: --ids give no draft config; lmdeploy {version} "
            f"refuses a draft whose num_target_layers is not the target's {L} (ValueError at "
            "start-up): give --draft-config to check it"
        )
    value = _tap_list(data, ids)
    guessed = value is None
    if guessed:
        n = data.get("num_hidden_layers")
        if type(n) is not int or n < 1:
            raise Unservable(
                f"{where}: no dflash_config.target_layer_ids and no positive num_hidden_layers "
                "(ValueError at start-up)"
            )
        # the formula builds one tap per draft layer: above the bound, this tool's usage error
        check_layers("the draft's num_hidden_layers", n)
        try:
            taps = zlab_formula(L, n)
        except Unservable as exc:
            raise Unservable(f"{where}: {exc}") from None
        how = f"{version} falls back to build_target_layer_ids(L={L}, n={n})"
    else:
        taps = _ints(value, where)
        if not taps and row["nonempty"]:
            raise Unservable(f"{where}: dflash_config.target_layer_ids must not be empty")
    if row["increasing"] and any(b <= a for a, b in itertools.pairwise(taps)):
        raise Unservable(
            f"{where}: target_layer_ids {taps} must be strictly increasing and duplicate-free "
            "(ValueError at start-up)"
        )
    bad = [t for t in taps if t < 0 or t >= L]
    if bad and row["range_check"]:
        raise Unservable(f"{where}: target_layer_ids {bad} lie outside [0, {L}) (ValueError)")
    plus = int(row["plus"])
    q.ids = list(taps)
    positions = tuple(Position(t, t, Layer(t + plus)) for t in taps)
    if guessed:
        q.problems.append(
            Problem(
                "EC522",
                f"the draft config has no dflash_config.target_layer_ids: lmdeploy {how} = "
                f"{list(taps)}, feeding {', '.join(str(p.layer) for p in positions)}; the draft "
                "may have been trained on other layers",
            )
        )
    return q.answer(
        positions,
        f"DFlash: {where} reads {', '.join(row['keys'])} only, else build_target_layer_ids(L, "
        f"draft num_hidden_layers) (SGLang's formula); {q.arch}'s model appends layer t's "
        f"output for id t: tap t = residual:t+{plus}",
        taps,
    )


# -- a contract's serving.engine (the layout check, ``matrix``, ``doctor``) -----------------


class _NoEagle3(Engine):
    """A method engine that serves no EAGLE-3 (onnxruntime-genai), as an :class:`Engine` for
    ``matrix`` rows and version ranges; it is not in ``resolve.ENGINES``: no EAGLE-3 command
    takes it."""

    def versions(self, spec: str | None) -> list[str | None]:
        if spec is None:
            return [None]
        if self.name in SOURCE_READ:
            return _source_versions(self.name, None, spec)
        return list(releases_for(spec, list(table()[self.name]["releases"]), self.name))

    def _resolve(self, q: Query) -> Resolution:
        raise Unservable(refusal(self.name, "eagle3") or f"{self.name}: no EAGLE-3")


@functools.cache
def engine(name: str) -> Engine:
    """The :class:`Engine` a method engine's ``matrix`` rows name (lmdeploy's EAGLE-3 one)."""
    from .resolve import ENGINES

    if name in ENGINES:
        return ENGINES[name]
    made: type[Engine] = type(name, (_NoEagle3,), {"name": name, "title": name})
    return made()


def tap_key(engine_name: str, method: str, data: Mapping[str, Any] | None = None) -> str:
    """The draft config key ``engine_name`` reads ``method``'s taps from (``data``: the
    draft's config, which picks ATOM's inline or standalone DSpark key)."""
    if engine_name in SOURCE_READ and method == "dspark":
        from . import source_methods

        if engine_name == "trtllm":
            return str(source_methods.table()["trtllm"]["trtllm"]["dspark"]["draft_key"])
        facts = next(
            row["dspark"]
            for row in reversed(source_methods.table()["atom"]["rows"])
            if row.get("dspark")
        )
        archs = (data or {}).get("architectures")
        first = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
        standalone = first.endswith(facts["standalone_archs_end"])
        return str(facts["keys"]["standalone" if standalone else "inline"])
    return "dflash_config.target_layer_ids"


def serves(engine_name: str, method: str) -> bool:
    """Whether ``engine_name``'s rules for ``method`` are this module's."""
    return method in METHOD_ENGINES.get(engine_name, ())


def versions(engine_name: str, method: str, spec: str | None) -> list[str | None]:
    """The releases read that a contract's ``serving.version`` names for ``method`` (None:
    the newest that serves it, as ``resolve`` assumes)."""
    if spec is None:
        return [None]
    if engine_name in SOURCE_READ:
        return _source_versions(engine_name, method, spec)
    return list(releases_for(spec, list(table()[engine_name]["releases"]), engine_name))


def _source_versions(engine: str, method: str | None, spec: str) -> list[str | None]:
    """The refs of source-read ``engine`` that ``spec`` names: one ref (a tag with or without
    its ``v``, ``main`` or a commit prefix, as ``resolve --version`` takes it), else a
    specifier over its release tags (``>=0.32.8``); TensorRT-LLM's is taken as given."""
    from . import source_methods

    if engine == "trtllm":  # main read, no release checked: resolve notes the version given
        return [spec]
    data = source_methods.table()[engine]
    snap = data["snapshot"]["commit"]
    text = spec.strip()
    names = {text, "v" + text, text.removeprefix("v")}
    if text in ("main", "snapshot") or (len(text) >= 7 and snap.startswith(text)):
        return [f"main@{snap[:8]}"]
    ref = next((r for r in data["read"] if r in names), None)
    if ref is not None:
        return [ref]
    tags = [r for r in data["read"] if r != snap]
    if method is not None:
        served = set(releases(engine, method))
        tags = [r for r in tags if r in served] or tags
    return list(releases_for(text, tags, engine))


def taps_for(
    engine_name: str,
    method: str,
    num_layers: int,
    wanted: Sequence[Layer],
    data: Mapping[str, Any] | None,
    arch: Any,
    version: str | None,
) -> tuple[int, ...] | None:
    """The tap list that makes ``engine_name`` feed ``wanted`` (the rest of the draft's config
    ``data`` as it is), or None where none does."""
    if method == "mtp" or not wanted or any(x.is_final_norm for x in wanted):
        return None
    for back in (1, 0):
        taps = tuple(x.index - back for x in wanted)
        if min(taps) < -1:  # -1: the embedding where the engine says so (ATOM's DSpark)
            continue
        try:
            res = resolve(engine_name, method, num_layers, data, taps, arch, version)
        except (Unservable, EagleContractError):
            continue
        if res.layers == tuple(wanted):
            return taps
    return None


def rows(
    method: str,
    trained: Sequence[Layer],
    num_layers: int,
    arch: Any,
    data: Mapping[str, Any] | None,
    ids: Sequence[int] | None,
    own: tuple[str, Sequence[str]] | None,
) -> list[Any]:
    """``matrix`` rows of every method engine that serves ``method``: each release read,
    what it feeds (the draft's config ``data``, else ``ids`` as its taps), and the taps that
    would make it feed ``trained``."""
    from .base import version_order
    from .fixes import ANY, relabel, runs
    from .matrix import Row

    want = tuple(trained)
    stated = stated_taps(method, data, ids)
    out: list[Any] = []
    for name, served in METHOD_ENGINES.items():
        if method not in served:
            continue
        mine = list(own[1]) if own is not None and own[0] == name else []
        real = [v for v in mine if v and v != ANY]  # ANY: no version, the newest assumed
        read = releases(name, method)
        vs = (
            read + [v for v in real if v not in read]  # refs: the table's order
            if name in SOURCE_READ
            else sorted(set(read) | set(real), key=version_order)
        )
        newest = assumed(name, method)
        cells: dict[str, tuple[Any, ...]] = {}
        said: dict[str, tuple[int, ...] | None] = {}
        for v in vs:
            asked = v in real or (len(real) < len(mine) and v == newest)
            try:
                res = resolve(name, method, num_layers, data, ids, arch, v)
            except (Unservable, EagleContractError) as exc:
                fix = taps_for(name, method, num_layers, want, data, arch, v)
                why = relabel(str(exc), v.removeprefix("main@"), "\x00")  # the sha it names
                cells[v] = (None, why, (), False, fix, asked)
                said[v] = stated  # refused: the ids the draft states, as EAGLE-3 rows show
                continue
            said[v] = res.ids
            same = res.layers == want
            fix = None if same else taps_for(name, method, num_layers, want, data, arch, v)
            codes = tuple(sorted({p.code for p in res.problems}))
            cells[v] = (res.layers, None, codes, same, fix, asked)
        keyed = {v: (said.get(v), cell) for v, cell in cells.items()}
        for run in runs(list(cells), keyed.__getitem__):
            row = Row(engine(name), tuple(run), said.get(run[0]), *cells[run[0]])
            # refused with no ids stated: "-", not the engine's "default"
            stated_any = row.ids is not None or row.feeds is not None
            out.append(dataclasses.replace(row, stated=stated_any))
    return out


def stated_taps(
    method: str, data: Mapping[str, Any] | None, ids: Sequence[int] | None
) -> tuple[int, ...] | None:
    """The taps a method's draft states: ``ids`` (the contract's ``aux_layer_ids``), else its
    config's ``dspark_target_layer_ids`` (DSpark), ``dflash_config.target_layer_ids`` or
    top-level ``target_layer_ids``, the first that is a list of integers; None where none."""
    if ids is not None:
        return tuple(ids)
    data = data or {}
    dc = data.get("dflash_config")
    found = [data.get("dspark_target_layer_ids")] if method == "dspark" else []
    found += [dc.get("target_layer_ids") if isinstance(dc, dict) else None]
    found += [data.get("target_layer_ids")]
    for value in found:
        if isinstance(value, list) and all(type(i) is int for i in value):
            return tuple(value)
    return None


def draft_of(serving: Any) -> tuple[Mapping[str, Any] | None, list[int] | None]:
    """What a contract's serving section gives the method engine: its draft's config.json
    (``draft_config``, read whole) and its ``aux_layer_ids`` as the tap list. Raises
    EagleContractError where the config cannot be read."""
    from .draft_config import read_draft_json

    ids = None if serving.aux_layer_ids is None else list(serving.aux_layer_ids)
    if serving.draft_config is None:
        return None, ids
    path = Path(serving.draft_config)
    return read_draft_json(path / "config.json" if path.is_dir() else path), ids


def resolver_for(method: str, serving: Any, report: Any) -> Any:
    """A ``resolve_dflash``-shaped resolver of ``method`` on the contract's method engine
    (``layout_dflash.check_dflash`` calls it per release), None after an EC510 where the
    serving section gives no draft."""
    try:
        data, ids = draft_of(serving)
    except EagleContractError as exc:
        report.add("EC510", str(exc), "serving.draft_config")
        return None
    if data is None and ids is None:
        report.add(
            "EC510",
            f"a {TITLES[method]} serving section on {serving.engine} needs serving.draft_config "
            "(the draft's config.json) or serving.aux_layer_ids (its taps)",
            "serving",
        )
        return None

    def resolve_one(
        engine_name: str, num_layers: int, _draft: object, arch: Any, version: str | None
    ) -> Resolution:
        try:
            return resolve(engine_name, method, num_layers, data, ids, arch, version)
        except EagleContractError as exc:  # a malformed key it reads: not served
            raise Unservable(str(exc)) from None

    return resolve_one
