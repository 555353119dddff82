"""MTP (NextN): the one target state each engine feeds an MTP head, per engine and release.

An MTP head has no tap list: it reads the state its engine hands the draft worker, together
with the embedding of the next token, each through its own norm (``hnorm`` / ``enorm``,
Qwen3-Next's ``pre_fc_norm_hidden`` / ``pre_fc_norm_embedding``). Which state that is, is read
from the releases (docs/mtp.md):

- SGLang (``mtp_rules.json``, ``scripts/gen_mtp_rules.py``): the ``hidden_states`` the target
  passes to its logits processor, the final norm's output (``final_norm``) on the targets
  whose model file ends on the final norm; targets that pass their own
  ``hidden_states_before_norm`` (preferred by ``layers/logits_processor.py``) are refused
  (not followed), as is every target the generator could not classify.
- vLLM (same table): the ``hidden_states`` the target's ``forward`` returns, ``final_norm`` on
  the same kind of target; a target with its own ``get_mtp_target_hidden_states`` (taken
  instead by the V1 runner from 0.24.0 and the V2 runner from 0.32.0: DeepSeek-V4, V4.1,
  Qwen4-exp) is refused.
- llama.cpp (``llamacpp_rules.json``'s ``archs``, ``scripts/gen_llamacpp_rules.py``): the
  graph's ``t_h_nextn`` (the MTP graph's ``mtp_h_input``), ``final_norm`` or ``residual:L``
  per architecture from llama-cpp-python 0.3.35; graphs that never set it, or set it to the
  unreduced hyper-connection streams, are refused.
- lmdeploy 0.16.0-0.18.0 (same table): ``spec_decode/base.py`` hands the MTP proposer the
  ``hidden_states`` the target returns (no aux layers for MTP), ``final_norm`` on the targets
  whose model file ends on the final norm; a target whose ``get_logits`` applies the norm
  (DeepSeek-V4) is refused.
- mlx-vlm 0.6.15-0.7.10 (same table, keyed by model folder): ``speculative/mtp.py`` hands
  the drafter the target's ``speculative_draft_hidden`` of the verify hidden, else the verify
  hidden: ``final_norm`` (Gemma-4, Qwen3.5, ...), ``residual:L`` (Inkling), hyper-connection
  streams (DeepSeek-V4, Qwen4-exp: refused).
- Trainers (``resolve --trainer``, same table's ``trainers``): speculators 0.9.0 trains on
  vLLM's aux id L, ``residual:L``; SpecForge 0.2.0 has no MTP training.

- tpu-inference (engines/tpu.py, ``tpu_rules.json``'s ``mtp_targets``) and vllm-ascend
  (engines/ascend.py: vLLM 0.23.0's rules through its own proposer), ``resolve`` only.
Every other engine is refused with "not read".
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import Unservable
from ..layers import Layer
from .base import Position, Query, Resolution

ENGINES = ("sglang", "vllm", "llama.cpp", "lmdeploy", "mlx")
PACKAGES = {
    "sglang": "SGLang",
    "vllm": "vLLM",
    "llama.cpp": "llama-cpp-python",
    "lmdeploy": "lmdeploy",
    "mlx": "mlx-vlm",
}
MATRIX = ("sglang", "vllm", "llama.cpp", "lmdeploy", "mlx")  # contract engines
TRAINERS = {"speculators": "speculators", "specforge": "specforge"}  # resolve --trainer
NOT_READ: dict[str, str] = {}
SHIFT = (
    "the head at position t reads the state at t and the embedding of token t+1 (speculators "
    "0.9.0 models/mtp/core.py; vLLM 0.30.0 v1/spec_decode/llm_base_proposer.py shifts the "
    "input ids by one beside unshifted states; SGLang's, llama.cpp's, lmdeploy's and "
    "mlx-vlm's shift not traced)"
)


@functools.cache
def _table() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(__file__).with_name("mtp_rules.json").read_text())
    return data


def _llama() -> dict[str, Any]:
    from .llamacpp import _data

    data: dict[str, Any] = _data()
    return data


def releases(engine: str) -> list[str]:
    """The releases of ``engine`` (or trainer) read for MTP, oldest first."""
    if engine == "llama.cpp":
        return [v for v in _llama()["releases"] if _ver(v) >= _ver("0.3.35")]
    if engine in ENGINES:
        return list(_table()[engine]["releases"])
    if engine in TRAINERS:
        return list(_table()["trainers"][TRAINERS[engine]]["releases"])
    return []


def _ver(text: str) -> Any:
    from packaging.version import Version

    return Version(text)


def _covers(row: Mapping[str, Any], version: str) -> bool:
    v = _ver(version)
    return _ver(row["since"]) <= v and (row["until"] is None or v < _ver(row["until"]))


def _span(row: Mapping[str, Any]) -> str:
    return f"{row['since']}" + (f"-{row['until']} (excl.)" if row["until"] else " on")


def row(engine: str, version: str) -> dict[str, Any]:
    """The facts of ``engine``'s release ``version``: its row's, and the targets and drafts
    whose spans (``[since, until, value]``, gen_mtp_rules.compact) cover it."""
    part = _table()[engine]
    found = dict(next(r for r in part["rows"] if _covers(r, version)))
    for key in ("targets", "drafts", "wrappers", "draft_types"):
        found[key] = {
            name: value
            for name, spans in part.get(key, {}).items()
            for since, until, value in spans
            if _covers({"since": since, "until": until}, version)
        }
    return found


def _draft_types(version: str) -> dict[str, str]:
    """vLLM ``version``'s MTP draft ``model_type`` per target (``draft_types``)."""
    return dict(row("vllm", version)["draft_types"]) if version in releases("vllm") else {}


def _since(engine: str, name: str, version: str) -> str:
    """The span of releases over which ``engine`` feeds target ``name`` what ``version`` does."""
    for since, until, _ in _table()[engine]["targets"][name]:
        if _covers({"since": since, "until": until}, version):
            return _span({"since": since, "until": until})
    return version  # pragma: no cover - name is a target of version


def refusal(engine: str) -> str | None:
    """Why ``engine``'s MTP path is not answered here, or None where it is read."""
    if engine in ENGINES or engine in TRAINERS or engine in ("vllm-ascend", "tpu-inference"):
        return None
    why = NOT_READ.get(engine, f"no release of {engine} was read for MTP")
    return f"{engine}: MTP not read: {why} (read for {', '.join(ENGINES)}; docs/mtp.md)"


def _names(arch: str | None) -> list[str]:
    if not arch:
        return []
    return [str(arch), *getattr(arch, "also", ())]


def resolve_mtp(
    engine: str, num_layers: int, arch: str | None, version: str | None = None
) -> Resolution:
    """The target state ``engine`` feeds an MTP head on target ``arch`` (``num_layers``
    layers), or the one trainer ``engine`` trains it on. Raises Unservable where it would not
    serve it or it was not read."""
    why = refusal(engine)
    if why is not None:
        raise Unservable(why)
    if engine == "tpu-inference":  # the JAX targets' return (engines/tpu.py)
        from .tpu import resolve_mtp as tpu_mtp

        return tpu_mtp(num_layers, arch, version)
    if engine == "vllm-ascend":  # the paired vLLM release's rule (engines/ascend.py)
        from .ascend import resolve_mtp as ascend_mtp

        return ascend_mtp(num_layers, arch, version, resolve_mtp, _draft_types)
    q = Query(engine, num_layers, None, arch, version)
    package = PACKAGES.get(engine) or TRAINERS[engine]
    read = releases(engine)
    ver = q.assume(read[-1], package)
    if ver not in read:
        raise Unservable(f"{package} {ver}: not read for MTP here; read: {', '.join(read)}")
    if engine in TRAINERS:
        return _trainer(q, ver)
    if not arch:
        raise Unservable("give --arch or --target-config: the state fed depends on the target")
    if engine == "llama.cpp":
        return _llamacpp(q, ver)
    if engine == "mlx":
        return _mlx(q, ver)
    facts = row(engine, ver)
    targets: dict[str, str] = facts["targets"]
    name = next((n for n in _names(arch) if n in targets), None)
    if name is None:
        raise Unservable(
            f"{package} {ver}: what {str(arch)[:60]} hands an MTP head was not read (its model "
            "file does not end on the final norm in a form the generator reads; docs/mtp.md)"
        )
    kind = targets[name]
    if kind == "own":
        hook = {
            "sglang": "passes its own hidden_states_before_norm, which "
            "layers/logits_processor.py prefers",
            "vllm": "defines get_mtp_target_hidden_states, which the runner feeds the head instead",
            "lmdeploy": "applies its final norm in get_logits, after the hidden_states it hands "
            "the proposer",
        }[engine]
        raise Unservable(f"{package} {ver}: {name} {hook}: not followed here")
    q.arch = name
    inner = facts["wrappers"].get(name)
    if inner is not None:  # a multimodal wrapper: its language model's state, unchanged
        q.notes.append(
            f"{name} hands on, unchanged, what its language model returns "
            + (f"({inner})" if engine == "sglang" else f"(built as {inner})")
            + ": that model's final norm (scripts/gen_mtp_rules.py reads the wrapper's forward)"
        )
    _head_notes(q, facts["drafts"])
    q.notes.append(SHIFT)
    span = f"{package} {ver} ({name}: {_since(engine, name, ver)})"
    if engine == "sglang":
        source = (
            f"MTP: {span} {facts['file']}: the state stored for the draft worker is "
            f"the hidden_states {name}'s model returns to the logits processor, after its "
            "final norm (models/*.py: self.norm / residual_batch.final_norm)"
        )
    elif engine == "lmdeploy":
        source = (
            f"MTP: {span} {facts['file']}: update_main_model_outputs hands the "
            f"{'/'.join(facts['proposers'])} proposer the hidden_states {name} returns (no "
            "aux layers for MTP), after its final norm (models/*.py: self.norm(hidden_states, "
            "residual))"
        )
    else:
        source = (
            f"MTP: {span} {facts['file']}: without aux states the drafter gets the "
            f"hidden_states {name}.forward returns, after its final norm"
            + (
                " (no get_mtp_target_hidden_states of its own, which "
                + " and ".join(
                    n for n, k in (("the V1 runner", "hook_v1"), ("V2", "hook_v2")) if facts[k]
                )
                + " would take instead)"
                if facts["hook_v1"] or facts["hook_v2"]
                else ""
            )
        )
    return q.answer((Position(None, 0, Layer.parse("final_norm")),), source)


MLX_KINDS = {
    "final_norm": "the final norm's output (its speculative_draft_hidden applies the model's "
    "norm, or its speculative_logits_from_hidden projects the hidden without one)",
    "residual": "the last layer's output before the final norm (its "
    "speculative_logits_from_hidden applies the norm itself; no speculative_draft_hidden does)",
}


def _mlx(q: Query, version: str) -> Resolution:
    from .arch_names import pick

    facts = row("mlx", version)
    targets: dict[str, str] = facts["targets"]
    name, note = pick(q.arch or "", targets)
    where = f"mlx-vlm {version} {facts['file']}"
    if name not in targets:
        raise Unservable(
            f"{where}: what {str(q.arch)[:60]} hands an MTP drafter was not read (its model "
            "folder defines no speculative_draft_hidden / speculative_logits_from_hidden the "
            "generator reads; docs/mtp.md)"
        )
    kind = targets[name]
    if kind == "streams":
        raise Unservable(
            f"{where}: {name} hands the drafter hyper-connection streams: not followed"
        )
    q.arch = name
    if note:
        q.notes.append(note)
    q.notes.append(f"mlx-vlm {version} MTP drafters: {', '.join(facts['drafters'])}")
    q.notes.append(SHIFT)
    layer = Layer.parse("final_norm") if kind == "final_norm" else Layer(q.num_layers)
    return q.answer(
        (Position(None, 0, layer),),
        f"MTP: mlx-vlm {version} ({name}: {_since('mlx', name, version)}) {facts['file']}: "
        f"_mtp_draft_hidden hands the drafter {MLX_KINDS[kind]} (models/{name})",
    )


def _trainer(q: Query, version: str) -> Resolution:
    package = TRAINERS[q.engine]
    part = _table()["trainers"][package]
    facts = next(r for r in part["rows"] if _covers(r, version))
    where = f"{package} {version} {facts['file']}"
    if facts["state"] is None:
        code = facts.get("mtp_code")
        raise Unservable(
            f"{where}: which state its MTP training uses was not read ({', '.join(code)[:200]})"
            if code
            else f"{where}: no MTP training (no MTP or NextN code in the release)"
        )
    q.notes.append(SHIFT)
    layer = Layer.parse("final_norm") if facts["state"] == "final_norm" else Layer(q.num_layers)
    return q.answer(
        (Position(None, 0, layer),),
        f"MTP: {where}: trains the head on {facts['via']} ({layer}): the contract's last "
        "training slot",
    )


def _head_notes(q: Query, drafts: Mapping[str, Sequence[str]]) -> None:
    norms = sorted({", ".join(n) for n in drafts.values() if n})
    bare = sorted(a for a, n in drafts.items() if not n)
    if norms:
        q.notes.append(
            "the MTP heads apply their own norms to the state and the embedding ("
            + "; ".join(norms)
            + ")"
        )
    if bare:
        q.notes.append(f"heads with no such norm read here: {', '.join(bare[:6])}")


def _llamacpp(q: Query, version: str) -> Resolution:
    data = _llama()
    hf: dict[str, str] = data["hf"]
    lower = {k.lower(): v for k, v in hf.items()}
    gguf = None
    for n in _names(q.arch):
        gguf = hf.get(n) or lower.get(n.lower())
        if gguf:
            break
    gguf = gguf or str(q.arch).lower()
    rows = [r for r in data["archs"] if gguf in r["archs"] and _covers(r, version)]
    last = rows[0]["last"] if rows else None
    where = f"llama-cpp-python {version} src/models/{gguf[:40]}.cpp"
    if last == "zeros":
        raise Unservable(f"{where} never sets t_h_nextn: no state for an MTP head")
    if last == "streams":
        raise Unservable(f"{where}: t_h_nextn is the unreduced hyper-connection streams")
    if last not in ("final_norm", "residual"):
        raise Unservable(f"{where}: what the graph hands an MTP head was not read")
    q.arch = gguf
    q.notes.append("the MTP graph applies nextn.hnorm and nextn.enorm (src/models/qwen35.cpp)")
    q.notes.append(SHIFT)
    layer = Layer.parse("final_norm") if last == "final_norm" else Layer(q.num_layers)
    return q.answer(
        (Position(None, 0, layer),),
        f"MTP: {where} sets t_h_nextn "
        + ("after build_norm(output_norm)" if last == "final_norm" else "from the layer loop")
        + " (gen_llamacpp_rules.py archs); the MTP graph reads it as mtp_h_input",
    )


def mtp_matrix(
    trained: Layer, num_layers: int, arch: str | None, own: tuple[str, Sequence[str]] | None
) -> list[Any]:
    """``matrix`` rows of an MTP contract: every engine and release read, the state each
    feeds the head, and whether it is the ``trained`` one (no ids to fix: an MTP head has no
    tap list)."""
    from .base import version_order
    from .fixes import ANY, relabel, runs
    from .matrix import Row
    from .resolve import get_engine

    rows: list[Any] = []
    for name in MATRIX:
        mine = list(own[1]) if own is not None and own[0] == name else []
        read = releases(name)
        versions = sorted(set(read) | {v for v in mine if v in read}, key=version_order)
        if ANY in mine and versions:  # an unversioned engine (mlx, lmdeploy): the newest read
            mine.append(versions[-1])
        cells: dict[str, tuple[Any, ...]] = {}
        for v in versions:
            try:
                res = resolve_mtp(name, num_layers, arch, v)
            except Unservable as exc:
                cells[v] = (None, relabel(str(exc), v, "\x00"), (), False, None, v in mine)
                continue
            same = res.layers == (trained,)
            cells[v] = (res.layers, None, (), same, None, v in mine)
        rows += [
            Row(get_engine(name), tuple(run), None, *cells[run[0]])
            for run in runs(list(cells), cells.__getitem__)
        ]
    return rows
