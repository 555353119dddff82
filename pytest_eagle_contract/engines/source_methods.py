"""The drafts that read the target's hidden states (DFlash, DFlash2, DSpark, PARD, MTP) on the
engines whose rules are read from source: TensorRT-LLM (PyTorch backend), TRT-LLM AutoDeploy,
sglang-jax, ROCm ATOM, ollama, mistral.rs and OpenVINO GenAI. ``source_method_rules.json`` is
written by ``scripts/gen_source_method_rules.py`` (docs/layers.md, "Methods per engine and
release"):

- sglang-jax (main cddbf6f1 for DFlash; every tag and main for MTP): the target worker reads
  the *draft's* ``dflash_config.target_layer_ids`` (else its top-level ``target_layer_ids``)
  and captures before layer t + 1, tap t = ``residual:t+1``; Qwen3 refuses a draft without
  ids, Llama-family targets fall back to the EAGLE-3 capture ``2, L//2, L-3`` (EC522). NEXTN
  (MTP) drafts get the final norm's output of the MiMo targets.
- ATOM (main ffdf3bb5 for DSpark; every tag from v0.1.3 and main for MTP): DSpark ids from
  ``dspark_target_layer_ids`` (inline) or the top-level ``target_layer_ids`` (a ``*DSparkModel``
  draft), strictly increasing in ``{-1} U [0, L)``; -1 = the embedding, t = ``residual:t+1``.
  MTP drafts get the target model's output: ``final_norm``, except DeepSeek-V4's unreduced
  hyper-connection stack (refused).
- ollama (v0.32.7-v0.32.15 and main, the MLX runner): DFlash ids from
  ``dflash_config.target_layer_ids`` only, ascending, non-negative, below L and matching the
  draft's ``num_target_layers``; tap t = ``residual:t+1``; no fallback. MTP on Qwen3.5 /
  Qwen3-Next: ``final_norm``.
- mistral.rs (tags v0.8.0-v0.9.2 and main 9e922623; PyPI 0.9.3-0.9.5 are later: not read):
  DFlash and DFlash2 (v0.9.2 on) on Qwen3.5 targets: ``dflash_config.target_layer_ids``,
  captured after layer t's residual add in layer order, tap t = ``residual:t+1``; no list:
  ``1 + round(i * (T - 4) / (n - 1))`` over the draft's ``num_target_layers`` (EC522);
  repeated ids leave fewer taps than ids, and no draft is proposed (refused). MTP (Gemma-4
  from v0.8.2, Qwen3.5 from v0.9.2): ``final_norm``. No EAGLE-3 drafter.
- OpenVINO GenAI (main da1db864, no release): DFlash ids from the draft IR's rt_info
  ``dflash.target_layer_ids`` (optimum-intel 2.2.0 copies ``dflash_config.target_layer_ids``),
  no fallback; tap k = ``residual:k+1`` in the list's order, but k = L - 1 is ``final_norm`` on
  a target IR with optimum-intel's ``hidden_states_decoder_layers`` annotation. MTP (Gemma-4
  only) feeds an exporter-named IR output not read: refused.
- TensorRT-LLM (main, read through a code index; no release checked): DFlash and standalone
  DSpark ids from ``speculative_config.target_layer_ids`` (else, as its field says, the
  draft's config), captured at the same call EAGLE-3 captures at: tap t = ``residual:t+1``,
  sorted; an id no layer has leaves its slice uninitialised (refused here). PARD reads no
  hidden state; MTP's fed state was not traced. AutoDeploy serves none of DFlash, DSpark, PARD
  (``supports_backend``) and its MTP feed was not read.

Importing this module reads nothing; the table is read on the first ``resolve``.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from ..errors import EagleContractError, Problem, Unservable
from ..layers import Layer
from .base import Position, Query, Resolution

ENGINES = ("trtllm", "trtllm-autodeploy", "sglang-jax", "atom", "ollama", "mistralrs", "openvino")
TAGGED = ("sglang-jax", "atom", "ollama", "mistralrs", "openvino")
# engines read here for these methods only: every EAGLE-3 command refuses them
SOURCE_ONLY = ("ollama", "mistralrs")
TITLES = {
    "dflash": "DFlash",
    "dflash2": "DFlash2",
    "dspark": "DSpark",
    "pard": "PARD",
    "mtp": "MTP",
    "eagle3.1": "EAGLE-3.1",
}
GUESS: Final = "EC522"
DOC = "docs/layers.md, 'Methods per engine and release'"


@functools.cache
def table() -> dict[str, Any]:
    """source_method_rules.json, read once."""
    data: dict[str, Any] = json.loads(
        Path(__file__).with_name("source_method_rules.json").read_text()
    )
    return data


def _short(ref: str) -> str:
    return ref[:8] if len(ref) == 40 else ref


def releases(engine: str, method: str) -> list[str]:
    """The refs (release tags, then the snapshot commit) of ``engine`` that serve ``method``,
    in the table's order."""
    if engine not in TAGGED:
        return []
    return [r for row in table()[engine]["rows"] if row.get(method) for r in row["refs"]]


def _read_refs(engine: str) -> str:
    data = table()[engine]
    refs = data["read"]
    snap = data["snapshot"]
    tags = [r for r in refs if r != snap["commit"]]
    span = f"tags {tags[0]}-{tags[-1]} and " if tags else ""
    return f"{span}main at {_short(snap['commit'])} ({snap['date']})"


def _row(engine: str, method: str, q: Query) -> tuple[str, dict[str, Any]]:
    """The ref asked (``--version``: a tag, with or without its ``v``, ``main`` or a commit
    prefix) and its row; without one, the newest release tag serving ``method``, else the
    snapshot commit (noted)."""
    data = table()[engine]
    snap = data["snapshot"]["commit"]
    served = releases(engine, method)
    title = TITLES[method]
    if not served:
        raise Unservable(
            f"{engine}: no {title} path in {_read_refs(engine)} ({data['snapshot']['repo']}; {DOC})"
        )
    if q.version is None:
        tags = [r for r in served if r != snap]
        ref = tags[-1] if tags else snap
        q.version = _short(ref)
        q.notes.append(
            f"no version given: {engine} {ref} assumed"
            if tags
            else f"no version given: no release has {title}; snapshot at {_short(snap)} "
            f"({data['snapshot']['date']}) assumed"
        )
    else:
        asked = q.version
        names = {asked, "v" + asked, asked.removeprefix("v")}
        if asked in ("main", "snapshot") or (len(asked) >= 7 and snap.startswith(asked)):
            names.add(snap)
        ref = next((r for r in data["read"] if r in names), "")
        if not ref:
            raise Unservable(f"{engine} {asked}: not read here; read: {_read_refs(engine)} ({DOC})")
    row: dict[str, Any] = next((r for r in data["rows"] if ref in r["refs"]), {})
    if not row.get(method):
        first = served[0]
        raise Unservable(f"{engine} {ref} has no {title} path (from {_short(first)} on)")
    if ref == snap:
        q.notes.append(
            f"no release checked for this: {data['snapshot']['repo']} snapshot at {snap[:8]} "
            f"({data['snapshot']['date']})"
        )
    return _short(ref), dict(row[method])


def _arch_names(arch: Any) -> list[str]:
    return [str(arch), *getattr(arch, "also", ())] if arch else []


def _target(q: Query, targets: Sequence[Mapping[str, Any]], engine: str, what: str) -> Any:
    """The target entry of ``targets`` whose ``archs`` name ``q.arch``; refuses without one."""
    known = sorted({a for t in targets for a in t["archs"]})
    if not q.arch:
        raise Unservable(
            f"give --arch or --target-config: {engine} {q.version} serves {what} only for "
            f"{', '.join(known)}"
        )
    for name in _arch_names(q.arch):
        for entry in targets:
            if name in entry["archs"]:
                q.arch = name
                return entry
    raise Unservable(
        f"{engine} {q.version}: {str(q.arch)[:60]} is not read there as a {what} target (only "
        f"{', '.join(known)})"
    )


def _ints(value: Any, key: str) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in value
    ):
        raise EagleContractError(f"{key} must be a list of integers, not {value!r:.80}")
    return list(value)


def _get(data: Mapping[str, Any] | None, dotted: str) -> Any:
    node: Any = data or {}
    for part in dotted.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def refusal(engine: str, method: str) -> str | None:
    """Why ``method`` on ``engine`` is refused before any draft is read, or None."""
    if engine not in ENGINES:
        return None
    title = TITLES.get(method, method)
    if engine == "ollama" and method in ("eagle3", "eagle3.1"):
        return (
            "ollama: no EAGLE-3 rules are read here; ollama is read for --method dflash and "
            f"mtp only ({DOC})"
        )
    if engine == "mistralrs":
        if method in ("eagle3", "eagle3.1"):
            return (
                f"mistralrs: no EAGLE-3 drafter in {_read_refs('mistralrs')} (its drafters: "
                f"DFlash, DFlash2 and the MTP heads); read for --method dflash, dflash2 and mtp "
                f"only ({DOC})"
            )
        if method in ("dspark", "pard"):
            return f"mistralrs: no {title} code in {_read_refs('mistralrs')} ({DOC})"
        return None
    if engine == "openvino":
        if method in ("dflash2", "dspark", "pard"):
            return f"openvino: no {title} code in openvino.genai {_read_refs('openvino')} ({DOC})"
        if method == "mtp":
            return _openvino_mtp_refusal()
        return None
    trt = table()["trtllm"]
    if engine == "trtllm-autodeploy":
        if method in ("dflash", "dspark", "pard"):
            return f"trtllm-autodeploy: no {title}: {trt['trtllm-autodeploy']['backend']}"
        if method == "mtp":
            return f"trtllm-autodeploy: MTP not read: {trt['trtllm-autodeploy']['mtp']}"
        return f"trtllm-autodeploy: no {title} decoding config in {trt['files']['llm_args']}"
    if engine == "trtllm":
        if method == "pard":
            return (
                f"trtllm: nothing to resolve: {trt['trtllm']['pard']} ({trt['files']['llm_args']})"
            )
        if method == "mtp":
            return f"trtllm: MTP not read: {trt['trtllm']['mtp']} ({trt['files']['llm_args']})"
        if method == "dflash2":
            return f"trtllm: {trt['trtllm']['dflash2']} ({trt['files']['llm_args']})"
        return None
    if method in ("dflash2", "pard") or (method == "dspark" and engine != "atom"):
        return f"{engine}: no {title} code in {_read_refs(engine)} ({DOC})"
    if method == "dflash" and engine == "atom":
        return (
            "atom: ATOM's own engine has no DFlash path in "
            f"{_read_refs('atom')}; its SGLang plugin (atom/plugin/sglang) runs under SGLang's "
            "DFlash worker with ATOM's models choosing the capture points, not read here "
            f"({DOC})"
        )
    return None


def resolve(
    engine: str,
    method: str,
    num_layers: int,
    data: Mapping[str, Any] | None,
    ids: Sequence[int] | None = None,
    arch: Any = None,
    version: str | None = None,
) -> Resolution:
    """``method``'s draft (its config.json ``data``, or ``ids`` as its tap list) on ``engine``.
    Raises Unservable (not served, or refused by the engine) or EagleContractError (a bad
    config)."""
    why = refusal(engine, method)
    if why is not None:
        raise Unservable(why)
    q = Query(engine, num_layers, None, arch, version)
    if engine == "trtllm":
        return _trtllm(q, method, data, ids)
    _ref, facts = _row(engine, "dflash" if method == "dflash2" else method, q)
    if engine == "mistralrs":
        q.notes.append(_mistralrs_pypi_note())
    if method == "mtp":
        return _mtp(q, engine, facts)
    if engine == "sglang-jax":
        return _sglang_jax(q, facts, data, ids)
    if engine == "ollama":
        return _ollama(q, facts, data, ids)
    if engine == "mistralrs":
        return _mistralrs(q, method, facts, data, ids)
    if engine == "openvino":
        return _openvino(q, facts, data, ids)
    return _atom(q, facts, data, ids)


def _mtp(q: Query, engine: str, facts: Mapping[str, Any]) -> Resolution:
    entry = _target(q, facts["targets"], engine, "MTP")
    state = entry.get("state", facts.get("state"))
    where = f"{engine} {q.version} {entry['file']}"
    if state == "hc-stack":
        raise Unservable(
            f"{where}: the target model returns its unreduced hyper-connection stack (before "
            "hc_head), which the MTP drafter reads: no one canonical layer"
        )
    how = {
        "sglang-jax": "NEXTN: the target model's hidden_states (its final norm's output) reach "
        "the logits processor with no aux states and are what the draft worker gets",
        "atom": "the model runner hands the target model's output (its final norm's) to "
        "drafter.propose as target_hidden_states",
        "ollama": "the MLX runner hands the MTP drafter the target's auxHidden output, which "
        "this target's Forward sets to its final norm's output",
        "mistralrs": f"the target stores the final norm's output of its last forward (before "
        f"lm_head) as the speculative hidden state, which the MTP head ({entry.get('head')}) "
        "reads as target_hidden",
    }[engine]
    return q.answer((Position(None, 0, Layer.parse("final_norm")),), f"MTP: {where}: {how}")


def _positions(taps: Sequence[int], plus: int) -> tuple[Position, ...]:
    return tuple(Position(t, t + plus, Layer(t + plus)) for t in taps)


def _sglang_jax(
    q: Query, facts: Mapping[str, Any], data: Mapping[str, Any] | None, ids: Sequence[int] | None
) -> Resolution:
    entry = _target(q, facts["models"], "sglang-jax", "DFlash")
    where = f"sglang-jax {q.version} {entry['file']}"
    L = q.num_layers
    plus = int(entry["plus"])
    if ids is not None:
        taps: list[int] | None = list(ids)
        key = "the tap list given"
    else:
        key = next((k for k in facts["keys"] if _get(data, k) is not None), "")
        taps = _ints(_get(data, key), key) if key else None
        if taps is not None and not taps:
            raise Unservable(
                f"sglang-jax {q.version}: {key} is empty (ValueError: 'DFLASH "
                "target_layer_ids must be non-empty when set')"
            )
        top, nested = _get(data, "target_layer_ids"), _get(data, "dflash_config.target_layer_ids")
        if top is not None and nested is not None and top != nested:
            q.notes.append(
                "the draft has both dflash_config.target_layer_ids (read by the target's "
                "capture) and a different top-level target_layer_ids (read first by the "
                "drafter, models/dflash.py, to size its fc)"
            )
    if taps is None:
        if entry["missing"] == "refused":
            raise Unservable(
                f"{where}: the draft has no dflash_config.target_layer_ids nor target_layer_ids:"
                f" {entry['setter']} raises ValueError('DFLASH requires explicit target layer "
                "ids.')"
            )
        captures = sorted({2, L // 2, L - 3})
        positions = tuple(Position(None, c, Layer(c)) for c in captures)
        q.problems.append(
            Problem(
                GUESS,
                "the draft config has no dflash_config.target_layer_ids / target_layer_ids: "
                f"sglang-jax {q.version} falls back to set_eagle3_layers_to_capture(None), the "
                f"EAGLE-3 default capture [2, L//2, L-3] = {captures}, feeding "
                f"{', '.join(str(p.layer) for p in positions)}; the draft may have been "
                "trained on other layers (and its fc must read exactly 3 states)",
            )
        )
        return q.answer(
            positions,
            f"DFlash: {where}: no ids -> the EAGLE-3 default capture before layers (2, L//2, L-3)",
        )
    q.ids = list(taps)
    captures = [t + plus for t in taps]
    minus = [t for t, c in zip(taps, captures) if c <= 0]
    if any(c < 0 for c in captures):
        raise Unservable(
            f"{where}: ids {minus} give capture index {min(captures)}, which no layer matches: "
            "fewer states than the draft's fc reads (a shape failure at the first forward)"
        )
    if 0 in captures and entry["index0"] == "crash":
        raise Unservable(
            f"{where}: id -1 captures before layer 0, where residual is None: "
            "'hidden_states + residual' fails at the first forward"
        )
    over = [t for t, c in zip(taps, captures) if c >= L]
    if over:
        raise Unservable(
            f"{where}: ids {over} + {plus} >= L = {L}: captured before no layer, so fewer "
            "states than the draft's fc reads (a shape failure at the first forward)"
        )
    if len(set(captures)) != len(captures):
        raise Unservable(
            f"{where}: repeated ids {taps}: the layer loop captures each layer once, fewer "
            "states than the draft's fc reads"
        )
    q.note_order(taps, "the layer loop captures in layer order")
    ordered = sorted(taps)
    return q.answer(
        _positions(ordered, plus),
        f"DFlash: {where} {entry['setter']}: layers_to_capture = [id + {plus}], captured "
        f"before layer id + {plus} (hidden_states + residual): tap t = residual:t+{plus}; "
        f"ids read from {' / '.join(facts['keys'])} of the draft's config "
        f"({facts['file']})",
        ordered,
    )


def _ollama(
    q: Query, facts: Mapping[str, Any], data: Mapping[str, Any] | None, ids: Sequence[int] | None
) -> Resolution:
    entry = _target(q, facts["targets"], "ollama", "DFlash")
    where = f"ollama {q.version} {facts['file']}"
    L = q.num_layers
    plus = int(facts["plus"])
    if ids is None:
        value = _get(data, "dflash_config.target_layer_ids")
        if value is None:
            top = (
                " (a top-level target_layer_ids is not read)"
                if _get(data, "target_layer_ids") is not None
                else ""
            )
            raise Unservable(f"{where}: 'dflash config missing target_layer_ids'{top}: no fallback")
        taps = _ints(value, "dflash_config.target_layer_ids")
    else:
        taps = list(ids)
    if not taps:
        raise Unservable(f"{where}: 'dflash config missing target_layer_ids' (empty list)")
    if any(t < 0 for t in taps) or any(b <= a for a, b in itertools.pairwise(taps)):
        raise Unservable(
            f"{where}: target_layer_ids {taps}: 'dflash target_layer_ids must be ascending and "
            "non-negative'"
        )
    depth = [
        n
        for n in (_get(data, "num_target_layers"), _get(data, "dflash_config.num_target_layers"))
        if isinstance(n, int) and not isinstance(n, bool)
    ]
    trained = max(depth) if depth else 0
    if trained > 0 and trained != L:
        raise Unservable(
            f"{where}: 'dflash draft trained for {trained} target layers, target has {L}'"
        )
    if taps[-1] >= L:
        raise Unservable(
            f"{where}: 'dflash target layer {taps[-1]} out of range for {L} target layers'"
        )
    q.ids = list(taps)
    return q.answer(
        _positions(taps, plus),
        f"DFlash: {where} reads dflash_config.target_layer_ids only; {entry['file']} "
        f"SetAuxHiddenLayers appends layer i's output for id i: tap t = residual:t+{plus}",
        taps,
    )


def _atom(
    q: Query, facts: Mapping[str, Any], data: Mapping[str, Any] | None, ids: Sequence[int] | None
) -> Resolution:
    where = f"atom {q.version} {facts['file']}"
    L = q.num_layers
    plus = int(facts["plus"])
    keys = facts["keys"]
    if ids is not None:
        taps = list(ids)
    else:
        archs = _get(data, "architectures")
        first = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
        if first.endswith(facts["standalone_archs_end"]):
            key = keys["standalone"]
        elif _get(data, "dspark_block_size"):
            key = keys["inline"]
        else:
            raise Unservable(
                f"atom {q.version} atom/config.py: this draft is not routed to DSpark (neither "
                f"architectures *{facts['standalone_archs_end']} nor dspark_block_size)"
            )
        value = _get(data, key)
        if not value:
            raise Unservable(
                f"atom {q.version}: the draft has no {key}: ValueError at start-up (no fallback)"
            )
        taps = _ints(value, key)
        if key != keys["inline"]:
            q.notes.append(f"atom/config.py maps the standalone draft's {key} to {keys['inline']}")
    if not taps:
        raise Unservable(f"{where}: 'DSpark requires dspark_target_layer_ids' (empty list)")
    bad = [t for t in taps if not (t == -1 or 0 <= t < L)]
    if bad:
        raise Unservable(f"{where}: aux capture layer ids {bad} out of range {{-1}} U [0,{L})")
    if any(b <= a for a, b in itertools.pairwise(taps)):
        raise Unservable(f"{where}: aux capture layer ids must be strictly increasing, got {taps}")
    q.ids = list(taps)
    if q.arch and any(facts["hc_mean"] in n for n in _arch_names(q.arch)):
        q.notes.append(
            "DeepSeek-V4 target: each tap is the mean over its hyper-connection streams after "
            "hc_post (dspark_proposer.py _extract_layer_hidden), ATOM's reading of the "
            "reference hidden_states[t + 1]"
        )
    positions = tuple(
        Position(t, 0, Layer(0)) if t == -1 else Position(t, t + plus, Layer(t + plus))
        for t in taps
    )
    return q.answer(
        positions,
        f"DSpark: {where} hooks layer t's forward output (-1: the embedding): tap t = "
        f"residual:t+{plus}, -1 = embed; ids from {keys['inline']} (inline) or the top-level "
        f"{keys['standalone']} (a *{facts['standalone_archs_end']} draft)",
        taps,
    )


def _trtllm(
    q: Query, method: str, data: Mapping[str, Any] | None, ids: Sequence[int] | None
) -> Resolution:
    trt = table()["trtllm"]
    facts = trt["trtllm"][method]
    files = trt["files"]
    title = TITLES[method]
    asked = q.version
    q.version = "main"
    q.notes.append(
        f"no release checked: {trt['read']} ({files['llm_args']}, {files['dflash']})"
        + (f"; --version {asked} taken as given" if asked else "")
    )
    if method == "dspark" and (
        _get(data, "model_type") == "deepseek_v4" or _get(data, "dspark_block_size") is not None
    ):
        raise Unservable(f"trtllm: not read: {facts['embedded']}")
    if ids is not None:
        taps = list(ids)
        how = f"{facts['key']} (the list given)"
    else:
        value = _get(data, facts["draft_key"])
        if value is None:
            raise Unservable(
                f"trtllm: no {facts['key']} and the draft has no {facts['draft_key']}: what "
                f"{facts['config']} does then was not read ({files['llm_args']})"
            )
        taps = _ints(value, facts["draft_key"])
        how = (
            f"the draft's {facts['draft_key']} ({facts['config']}: read when {facts['key']} "
            "is unset)"
        )
    L = q.num_layers
    bad = [t for t in taps if not 0 <= t < L]
    if bad:
        raise Unservable(
            f"trtllm {files['dflash']}: ids {bad} match no decoder layer's capture call: "
            "their slice of captured_hidden_states (torch.empty) is left uninitialised for the "
            "fc (whether anything writes -1, as EAGLE-3's final-state id, was not traced)"
        )
    if len(set(taps)) != len(taps):
        raise Unservable(
            f"trtllm {files['dflash']}: repeated ids {taps}: one layer is written to one slot, "
            "the other slot stays uninitialised"
        )
    q.ids = list(taps)
    q.note_order(taps, "DFlashSpecMetadata sorts them: the fc reads them in layer order")
    ordered = sorted(taps)
    plus = int(facts["plus"])
    return q.answer(
        _positions(ordered, plus),
        f"{title}: TensorRT-LLM PyTorch backend ({files['dflash']}) reads {how}; "
        f"{facts['capture']}: tap t = residual:t+{plus}, sorted",
        ordered,
    )


# --- mistral.rs ---------------------------------------------------------------------------
def _mistralrs_pypi_note() -> str:
    return (
        f"PyPI mistralrs 0.9.3-0.9.5 are later than the source read ({_read_refs('mistralrs')}):"
        " their wheels hold a compiled extension only and their tags are not in the snapshot "
        "read, so their rules are not read"
    )


def _mistralrs(
    q: Query,
    method: str,
    facts: Mapping[str, Any],
    data: Mapping[str, Any] | None,
    ids: Sequence[int] | None,
) -> Resolution:
    entry = _target(q, facts["targets"], "mistralrs", "DFlash")
    where = f"mistralrs {q.version} {facts['file']}"
    L = q.num_layers
    plus = int(facts["plus"])
    title = TITLES[method]
    v2 = facts.get("v2")
    archs = _get(data, "architectures")
    names = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    if method == "dflash2" and not v2:
        raise Unservable(f"{where}: no DFlash2 (selector / dynamic-conv) drafter at this ref")
    if data is not None and names and not any("DFlash" in a or "Dflash" in a for a in names):
        raise Unservable(
            f"{where}: architectures {names} name no DFlash: '--mtp-model for this target must be "
            "a DFlash draft model'"
        )
    if v2 and names:
        is_v2 = any(v2["arch_contains"] in a for a in names)
        if method == "dflash2" and not is_v2:
            raise Unservable(
                f"{where}: architectures {names} lack {v2['arch_contains']}: loaded as a DFlash "
                "(v1) drafter, not DFlash2"
            )
        if is_v2:
            missing = [k for k in v2["needs"] if _get(data, f"dflash_config.{k}") is None]
            if missing:
                raise Unservable(
                    f"{where}: a DFlash2 draft without dflash_config.{missing[0]}: 'DFlash2 "
                    f"config has no {missing[0]}'"
                )
            if method == "dflash":
                q.notes.append(f"architectures {names} name DFlash2: served as DFlash2")
    if ids is not None:
        taps = list(ids)
        how = "the tap list given"
    else:
        value = _get(data, "dflash_config.target_layer_ids")
        if value is None:
            return _mistralrs_fallback(q, facts, entry, data, where, title)
        taps = _ints(value, "dflash_config.target_layer_ids")
        how = "dflash_config.target_layer_ids"
        if _get(data, "target_layer_ids") is not None:
            q.notes.append("a top-level target_layer_ids is not read (dflash_config's only)")
    if any(t < 0 for t in taps):
        raise Unservable(
            f"{where}: negative ids {[t for t in taps if t < 0]}: target_layer_ids is a list of "
            "usize, so the draft's config does not load"
        )
    if not taps:
        raise Unservable(
            f"{where}: an empty target_layer_ids: no layer is captured (the target captures "
            "only with a non-empty list); not served here"
        )
    if max(taps) >= L:
        raise Unservable(
            f"{where}: 'DFlash taps target layer {max(taps)} but the target has {L} layers'"
        )
    if len(set(taps)) != len(taps):
        raise Unservable(
            f"{where} / {entry['file']}: repeated ids {taps}: the layer loop captures each "
            "layer once, fewer states than ids, and the proposer then returns no draft at every "
            "step (speculation silently off)"
        )
    q.ids = list(taps)
    q.note_order(taps, "the layer loop captures in layer order")
    ordered = sorted(taps)
    return q.answer(
        _positions(ordered, plus),
        f"{title}: {where} reads {how}; {entry['file']} captures xs after layer i's residual "
        f"add (the output of layer i) for each id i in layer order: tap t = residual:t+{plus}",
        ordered,
    )


def _mistralrs_fallback(
    q: Query,
    facts: Mapping[str, Any],
    entry: Mapping[str, Any],
    data: Mapping[str, Any] | None,
    where: str,
    title: str,
) -> Resolution:
    """No dflash_config.target_layer_ids: DFlashConfig::target_layer_ids's formula over the
    draft's own num_target_layers T and num_hidden_layers n (EC522)."""
    T, n = _get(data, "num_target_layers"), _get(data, "num_hidden_layers")
    if not (isinstance(T, int) and not isinstance(T, bool) and T >= 0):
        raise Unservable(
            f"{where}: 'DFlash config has neither target_layer_ids nor num_target_layers'"
        )
    if not (isinstance(n, int) and not isinstance(n, bool) and n >= 1):
        raise EagleContractError("the draft config has no positive integer num_hidden_layers")
    if n == 1:
        taps = [T // 2]
        formula = "[T // 2] (one draft layer)"
    elif T < 4:
        raise Unservable(
            f"{where}: num_target_layers {T} < 4: the fallback's usize T - 3 - 1 underflows"
        )
    else:
        taps = [1 + (i * (T - 4) + (n - 1) // 2) // (n - 1) for i in range(n)]
        formula = "1 + round(i * (T - 4) / (n - 1)) for i < n"
    L = q.num_layers
    if max(taps) >= L:
        raise Unservable(
            f"{where}: the fallback ids {taps} (num_target_layers {T}): 'DFlash taps target "
            f"layer {max(taps)} but the target has {L} layers'"
        )
    plus = int(facts["plus"])
    q.ids = list(taps)
    positions = _positions(sorted(set(taps)), plus)
    other = f"; the draft's num_target_layers {T} is not the target's {L}" if T != L else ""
    q.problems.append(
        Problem(
            GUESS,
            "the draft config has no dflash_config.target_layer_ids: mistralrs "
            f"{q.version} falls back to {formula} over the draft's num_target_layers T = {T} "
            f"and num_hidden_layers n = {n}: ids {taps}, feeding "
            f"{', '.join(str(p.layer) for p in positions)}; the draft may have been trained on "
            f"other layers{other}",
        )
    )
    return q.answer(
        positions,
        f"{title}: {where} DFlashConfig::target_layer_ids: no ids -> {formula} "
        f"(its comment: mirrors the reference build_target_layer_ids); {entry['file']}: "
        f"tap t = residual:t+{plus}",
        taps,
    )


# --- OpenVINO GenAI -----------------------------------------------------------------------
def _openvino_mtp_refusal() -> str:
    served = releases("openvino", "mtp")
    oi = table()["optimum-intel"]
    if not served:
        return f"openvino: no MTP path in openvino.genai {_read_refs('openvino')} ({DOC})"
    row = next(r for r in table()["openvino"]["rows"] if r.get("mtp"))
    t = row["mtp"]["targets"][0]
    return (
        f"openvino: MTP not read: openvino.genai {_short(served[0])} on ({t['file']}) serves "
        f"{t['model']} MTP only, feeding the head the target IR's {t['output']!r} output, which "
        f"the exporter names; optimum-intel {oi['version']} (the exporter read) writes no such "
        "output, so which state it is is not read; the Qwen3.5 MTP head optimum-intel "
        f"{oi['version']} exports has no openvino.genai runtime path in {_read_refs('openvino')}"
        f" ({DOC})"
    )


def _openvino(
    q: Query, facts: Mapping[str, Any], data: Mapping[str, Any] | None, ids: Sequence[int] | None
) -> Resolution:
    oi = table()["optimum-intel"]
    where = f"openvino.genai {q.version} {facts['file']}"
    L = q.num_layers
    plus = int(facts["plus"])
    if ids is not None:
        taps = list(ids)
        how = f"the draft IR's rt_info {facts['key']} (the list given)"
    else:
        value = _get(data, oi["draft_key"])
        if value is None or value == []:
            raise Unservable(
                f"optimum-intel {oi['version']} ({oi['files']['configs']}): 'DFlash export "
                f"requires non-empty dflash_config['target_layer_ids']' (and openvino.genai: "
                "'DFlash draft model is missing dflash_target_layer_ids RT info'): no fallback"
            )
        taps = _ints(value, oi["draft_key"])
        how = (
            f"the draft's {oi['draft_key']}, copied unchanged by optimum-intel {oi['version']} "
            f"into the draft IR's rt_info {facts['key']}"
        )
        if _get(data, "target_layer_ids") is not None:
            q.notes.append("a top-level target_layer_ids is not exported (dflash_config's only)")
    if not taps:
        raise Unservable(f"{where}: 'DFlash target_layer_ids cannot be empty.'")
    names = _arch_names(q.arch)
    types = [str(t) for t in getattr(q.arch, "also", ())]  # --target-config's model_type
    annotated: bool | None = None
    if any(n in oi["annotated_model_types"] for n in names):
        annotated = True
    elif types:
        annotated = False
    bad = sorted({t for t in taps if not 0 <= t < L})
    if bad:
        raise Unservable(
            f"{where}: ids {bad} name no layer (L = {L}): with the target IR's "
            f"{facts['annotation']} rt_info its lookup fails ('Malformed hidden-state annotation "
            "metadata'); without it the EAGLE-3 finder returns fewer states than ids (its count "
            "assertion)"
        )
    if len(set(taps)) != len(taps):
        raise Unservable(
            f"{where}: repeated ids {taps}: 'Duplicate producer/output locator for requested "
            "decoder layers' (annotated target) or fewer states than ids (the EAGLE-3 finder)"
        )
    last = L - 1 in taps
    if last and annotated is None:
        raise Unservable(
            f"{where}: id {L - 1} (the last layer) is final_norm when the target IR carries "
            f"optimum-intel's {facts['annotation']} rt_info and residual:{L} when it does not; "
            f"optimum-intel {oi['version']} writes it for model types "
            f"{', '.join(oi['annotated_model_types'])}: give --target-config (its model_type)"
        )
    q.ids = list(taps)
    if annotated:
        q.notes.append(
            f"model type in optimum-intel {oi['version']}'s annotated set: the target IR's "
            f"{facts['annotation']} rt_info is assumed; its export logs 'Skipping hidden-state "
            "RT-info annotation' where discovery fails, and then the EAGLE-3 finder is used "
            f"(the same layers, except id {L - 1}: residual:{L})"
        )
    elif annotated is False:
        q.notes.append(
            f"model type {types[0]} not in optimum-intel {oi['version']}'s annotated set "
            f"({', '.join(oi['annotated_model_types'])}): the EAGLE-3 finder (layer k's residual "
            "add after its MLP) is assumed"
        )
    final = Layer.parse("final_norm")
    positions = tuple(
        Position(t, L, final)
        if t == L - 1 and annotated
        else Position(t, t + plus, Layer(t + plus))
        for t in taps
    )
    return q.answer(
        positions,
        f"DFlash: {where} reads {how}; the target's states come from its IR's "
        f"{facts['annotation']} rt_info (optimum-intel {oi['version']} "
        f"{oi['files']['annotations']}: "
        f"{oi['layer']}), else the EAGLE-3 finder (layer k's residual add: residual:k+1); "
        "concatenated in the list's order",
        taps,
    )
