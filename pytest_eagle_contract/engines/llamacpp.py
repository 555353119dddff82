"""llama.cpp: its EAGLE-3 rules per llama-cpp-python release (``llamacpp_rules.json``, written
by ``scripts/gen_llamacpp_rules.py`` from the llama.cpp each sdist vendors).

The draft's ids are baked into its GGUF (``eagle3.target_layers``) by the converter, which
reads only a top-level ``eagle_aux_hidden_state_layer_ids`` from the draft's config.json and
bakes ``[2, L//2, L-3]`` without one. The loader requires exactly that many ids; the target
records the input of layer k for id k (``residual:k``, id 0 the embedding); the states are
copied in the draft's list order (no sort, duplicates kept); an id past L aborts. Id L depends
on the release and the target's graph: up to 0.3.34 it aborts at start-up; from 0.3.35 it is
the graph's ``t_h_nextn``, which is ``residual:L`` on some graphs, ``final_norm`` on others,
and on graphs that never set it (llama, qwen3, ...) the engine runs and the draft silently
receives zeros (``SilentlyWrong``), as on DeepSeek-V4, whose rows are its unreduced
hyper-connection streams.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import Problem, SilentlyWrong, Unservable
from ..layers import Layer
from .base import Engine, Position, Query, Resolution, eagle3_default_ids, releases_for
from .gguf_meta import GGUF_PREFIX
from .rule_table import Release, RuleTable, span

if TYPE_CHECKING:
    from .draft_config import DraftConfig


_FINAL = Layer.parse("final_norm")
_TABLE = RuleTable("llamacpp_rules.json", "llama-cpp-python", "0.3.36")
_data, releases, _covers = _TABLE.data, _TABLE.releases, _TABLE.covers


@dataclass(frozen=True)
class Rules(Release):
    gguf_key: str
    count: int
    converter: dict[str, Any]
    last: str  # "nextn": id L is the graph's t_h_nextn; "layer_inp": layer L's input


@functools.cache
def rules(version: str) -> Rules:
    row = _TABLE.row(version, ": its llama.cpp has no EAGLE-3")
    return Rules(
        version,
        span(row),
        row["gguf_key"],
        row["count"],
        row["converter"],
        row["target"]["last"],
    )


def _arch(arch: str | None, version: str, notes: list[str]) -> tuple[str, str]:
    """The GGUF architecture asked for (an HF name mapped through the converter's table), and
    what id L feeds on its graph: ``residual``, ``final_norm``, ``zeros``, ``streams`` or
    ``abort`` (scripts/gen_llamacpp_rules.py)."""
    if not arch:
        notes.append("no --arch: the llama graph's rule")
        arch = "llama"
    hf: dict[str, str] = _data()["hf"]
    lower = {k.lower(): v for k, v in hf.items()}
    gguf = hf.get(arch) or lower.get(arch.lower()) or arch.lower()
    if gguf != arch:
        notes.append(f"{arch} converts to GGUF architecture {gguf}")
    served = [r for r in _data()["archs"] if gguf in r["archs"]]
    for row in served:
        if _covers(row, version):
            return gguf, str(row["last"])
    where = ", ".join(span(r) for r in served)
    raise Unservable(
        f"llama.cpp's {gguf[:60]} graph does not record layer inputs in llama-cpp-python "
        f"{version}: EAGLE-3 aborts at the first target decode (layer input tensor is null)"
        + (f"; served in {where}" if where else "")
    )


class GgufIds(tuple[int, ...]):
    """The ids a GGUF draft carries (``missing``: it carries none: llama.cpp refuses it)."""

    missing: bool

    def __new__(cls, ids: tuple[int, ...], missing: bool) -> GgufIds:
        self = super().__new__(cls, ids)
        self.missing = missing
        return self


class ConfigIds(tuple[int, ...]):
    """The ids the converter bakes from a config.json, with the id keys it ignores."""

    ignored: tuple[str, ...]

    def __new__(cls, ids: tuple[int, ...], ignored: tuple[str, ...]) -> ConfigIds:
        self = super().__new__(cls, ids)
        self.ignored = ignored
        return self


class LlamaCpp(Engine):
    name = "llama.cpp"
    title = "llama.cpp"
    id_keys = ("eagle_aux_hidden_state_layer_ids",)  # what the converter reads

    def versions(self, spec: str | None) -> list[str | None]:
        return [None] if spec is None else list(releases_for(spec, releases(), "llama-cpp-python"))

    def known_archs(self) -> frozenset[str]:
        data = _data()
        return frozenset(data["hf"]) | {a for r in data["archs"] for a in r["archs"]}

    def draft_ids(self, draft: DraftConfig) -> tuple[int, ...] | None:
        gguf = {k: v for k, v in draft.aux_ids.items() if k.startswith(GGUF_PREFIX)}
        if gguf or str(draft.path).endswith(".gguf"):
            key = f"{GGUF_PREFIX}{rules(releases()[-1]).gguf_key}"
            return GgufIds(gguf.get(key, ()), key not in gguf)
        ids = draft.aux_ids.get(self.id_keys[0])
        others = tuple(k for k in draft.aux_ids if k != self.id_keys[0])
        if ids is None:
            return ConfigIds((), others) if others else None
        return ConfigIds(ids, others)

    def n_aux(self, draft: DraftConfig, version: str | None) -> int:
        return rules(version or releases()[-1]).count

    def _resolve(self, q: Query) -> Resolution:
        rel = rules(q.assume(releases()[-1], "llama-cpp-python"))
        q.arch, last = _arch(q.arch, rel.version, q.notes)
        L = q.num_layers
        ids = self._ids(q, rel)
        if len(ids) != rel.count:
            raise Unservable(
                f"llama.cpp (llama-cpp-python {rel.span}) requires exactly {rel.count} ids in "
                f"{rel.gguf_key}, not {len(ids)}: the draft fails to load"
            )
        for i in ids:
            if i < 0 or i > L:
                raise Unservable(
                    f"id {i}: llama.cpp records ids 0..{L} (L = {L}); any other aborts at "
                    + (
                        "start-up (common/speculative.cpp: GGML_ABORT, id exceeds n_layer)"
                        if rel.last == "nextn"
                        else "start-up (llama_set_embeddings_layer_inp: GGML_ASSERT)"
                    )
                )
        if L in ids:
            self._id_l(q, last, rel)
        q.note_order(
            ids,
            "llama.cpp concatenates them in this order (it does not sort, unlike SGLang and vLLM)",
        )
        if len(set(ids)) != len(ids):
            q.notes.append("duplicate ids are kept: the same state fills several fc slots")
        top = {
            "residual": "the graph's t_h_nextn, before the output norm (residual:L)",
            "final_norm": "the graph's t_h_nextn, after the output norm (final_norm)",
        }.get(last, "refused")
        return q.answer(
            tuple(Position(i, i, Layer(i) if i < L or last == "residual" else _FINAL) for i in ids),
            f"built-in rules: llama-cpp-python {rel.span} (its vendored llama.cpp): "
            f"src/models/eagle3.cpp reads GGUF {rel.gguf_key} ({rel.count} ids), "
            f"{rel.converter['file']} bakes it from {rel.converter['key']}; "
            f"common/speculative.cpp: id k < L = input of layer k (residual:k), id L on the "
            f"{q.arch} graph = {top}; list order",
            ids,
        )

    def _id_l(self, q: Query, last: str, rel: Rules) -> None:
        """Refuse id L where the graph aborts or feeds no layer; note a post-norm state."""
        where, arch, L = f"llama-cpp-python {rel.span}", q.arch, q.num_layers
        if last == "final_norm":
            q.notes.append(
                f"id {L} (= L) feeds final_norm on the {arch} graph (its t_h_nextn is taken "
                "after the output norm), not residual:L as on vLLM"
            )
        if last == "abort":
            raise Unservable(
                f"id {L} (= L): llama.cpp ({where}) asks for layer L's input, and "
                "llama_context::set_embeddings_layer_inp asserts lid < n_layer: GGML_ASSERT "
                "aborts at start-up"
            )
        if last == "zeros":
            raise SilentlyWrong(
                f"id {L} (= L): llama.cpp ({where}) asks the {arch} graph for t_h_nextn, which "
                "that graph never sets: nothing is copied into the nextn buffer (cleared to 0 "
                "when allocated) and the null check in common/speculative.cpp passes, so the "
                "engine runs and the draft's fc silently receives zeros in that slot (no abort)",
                "use an id below L (residual:L is not recorded by this graph)",
            )
        if last == "streams":
            raise SilentlyWrong(
                f"id {L} (= L): llama.cpp ({where}) takes the {arch} graph's t_h_nextn, its "
                "hyper-connection streams unreduced (n_embd_out = streams x n_embd), and "
                "common/speculative.cpp copies n_embd floats per token from those wider rows: "
                "the draft's fc silently receives other tokens' streams (no abort)",
                "use an id below L",
            )

    def _ids(self, q: Query, rel: Rules) -> tuple[int, ...]:
        """The ids in the GGUF the target runs with: a GGUF draft's own, a config.json draft's
        as this release's converter bakes them, or ``--ids`` as given (taken as baked)."""
        ids, L = q.ids, q.num_layers
        default = tuple(eagle3_default_ids(L))
        conv = rel.converter
        if isinstance(ids, GgufIds):
            if ids.missing:
                raise Unservable(
                    f"the GGUF draft has no {rel.gguf_key}: llama.cpp refuses to load it "
                    "(EAGLE3 model requires 'extract_layers' in GGUF metadata)"
                )
            q.notes.append(f"ids baked in the GGUF draft's {rel.gguf_key}")
            return tuple(ids)
        if isinstance(ids, ConfigIds):
            found = [*(("eagle_aux_hidden_state_layer_ids",) if ids else ()), *ids.ignored]
            if conv["key"] is None:
                q.problems.append(
                    Problem(
                        "EC508",
                        f"llama.cpp's converter ({conv['file']}, llama-cpp-python "
                        f"{rel.span}) reads no ids from the draft config: it ignores "
                        f"{', '.join(found)} and bakes {list(default)} into {rel.gguf_key}",
                    )
                )
                return default
            if not ids:
                q.problems.append(
                    Problem(
                        "EC508",
                        f"llama.cpp's converter ({conv['file']}) reads only a top-level "
                        f"{conv['key']}: it ignores {', '.join(ids.ignored)} and bakes its "
                        f"default {list(default)} into {rel.gguf_key}",
                    )
                )
                return default
            if ids.ignored:
                q.notes.append(
                    f"the converter reads {conv['key']}; {', '.join(ids.ignored)} ignored"
                )
            return tuple(ids)
        if ids is None:
            q.notes.append(
                f"no ids: the converter bakes {list(default)} ({conv['default']}) into "
                f"{rel.gguf_key}"
            )
            return default
        if conv["key"] is None:
            q.notes.append(
                f"ids taken as baked in the GGUF: this release's converter bakes "
                f"{list(default)} whatever the draft config says"
            )
        return tuple(ids)
