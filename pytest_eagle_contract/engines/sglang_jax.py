"""sglang-jax (SGLang on TPU, JAX): its EAGLE-3 rules (``sglang_jax_rules.json``, written by
``scripts/gen_sglang_jax_rules.py`` from the sgl-project/sglang-jax repository: its tags and a
snapshot commit; its two releases on the index carry no EAGLE-3 code).

Its target model runner reads ``eagle_config.eagle_aux_hidden_state_layer_ids`` from
``self.model_config.hf_config``, which for the target worker is the *target's* config.json
(SGLang itself loads the draft's config there). A target config has no ``eagle_config``: the
read fails, is logged as a warning, and ``set_eagle3_layers_to_capture(None)`` captures
``(2, L//2, L-3)`` before those layers, whatever the draft's config says (EC508). Ids that are
read (a target config that holds them) are captured before layer id + 1: ``residual:id+1``,
in layer order, each once. Llama-family loops add ``hidden_states + residual`` before layer 0
with residual None (a failure); Qwen3's takes the embedding there.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Problem, Unservable
from ..layers import Layer
from .base import Engine, Position, Query, Resolution, eagle3_default_ids

if TYPE_CHECKING:
    from .draft_config import DraftConfig

NO_EAGLE3 = ("0.0.1", "0.0.1.post1")  # the releases on the index
DRAFT_KEYS = ("eagle_config.eagle_aux_hidden_state_layer_ids", "eagle_aux_hidden_state_layer_ids")


@functools.cache
def _data() -> dict[str, Any]:
    text = (Path(__file__).parent / "sglang_jax_rules.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def _row(version: str | None) -> dict[str, Any]:
    """The rules of a ref (a tag, with or without its ``v``), else the snapshot's."""
    rows: list[dict[str, Any]] = _data()["rows"]
    tag = None if version is None else "v" + version.removeprefix("v")
    return next((r for r in rows if tag in r["refs"]), rows[-1])


def refs() -> list[str]:
    """Every ref the rules were read at: the tags, then the snapshot commit."""
    return [r.removeprefix("v") for row in _data()["rows"] for r in row["refs"]]


def snapshot() -> str:
    """The snapshot's label: ``main@<commit>``."""
    return f"main@{_data()['snapshot']['commit'][:8]}"


class SGLangJax(Engine):
    name = "sglang-jax"
    title = "sglang-jax"
    id_keys = ()  # the target's config is read, never the draft's

    def known_archs(self) -> frozenset[str]:
        return frozenset(
            a for r in _data()["rows"] for m in r.get("models", ()) for a in m["archs"]
        )

    def draft_ids(self, draft: DraftConfig) -> tuple[int, ...] | None:
        """What the draft's config says (SGLang's keys), which sglang-jax does not read."""
        found = [draft.aux_ids.get(key) for key in DRAFT_KEYS]
        return next((ids for ids in found if ids), None)

    def _resolve(self, q: Query) -> Resolution:
        self._version(q)
        data = _row(q.version)
        arch = q.arch or "LlamaForCausalLM"
        if not q.arch:
            q.notes.append(f"no --arch: {arch}")
        q.arch = arch
        model = next((m for m in data["models"] if arch in m["archs"]), None)
        if model is None:
            served = ", ".join(a for m in data["models"] for a in m["archs"])
            raise Unservable(
                f"sglang-jax has no EAGLE-3 capture for {arch[:60]} (its model has no "
                f"set_eagle3_layers_to_capture; served: {served})"
            )
        L = q.num_layers
        default = eagle3_default_ids(L)
        said = None if q.ids is None else list(q.ids)
        where = f"sglang-jax {snapshot()} model_executor/model_runner.py"
        if said is not None and sorted({i + model["plus"] for i in said}) != sorted(set(default)):
            q.problems.append(
                Problem(
                    "EC508",
                    f"{where} reads eagle_config.eagle_aux_hidden_state_layer_ids from the "
                    f"target's config.json, not the draft's: the draft's {said} are not used, "
                    f"it captures its default before layers {default}",
                )
            )
        q.notes.append(
            "the target checkpoint's own config.json would be read: an eagle_config there "
            f"with eagle_aux_hidden_state_layer_ids makes it capture before layer id + "
            f"{model['plus']}"
        )
        captured = sorted({i for i in default if 0 <= i < L})
        return q.answer(
            tuple(Position(None, i, Layer(i)) for i in captured),
            f"built-in rules: {where} (the target's config) and {model['file']} "
            f"set_eagle3_layers_to_capture(None) = ({model['default']}), captured before "
            f"layer i (residual:i), in layer order; read ids would be + {model['plus']}",
            default,
        )

    def _version(self, q: Query) -> None:
        known = refs()
        if q.version is None:
            q.version = snapshot()
            q.notes.append(f"no version: the source snapshot {q.version}")
        elif q.version in NO_EAGLE3:
            raise Unservable(
                f"sglang-jax {q.version} has no EAGLE-3 (its code first has it in the "
                f"repository's tags {known[0]} and later)"
            )
        elif q.version.removeprefix("v") not in known and q.version != snapshot():
            q.notes.append(
                f"sglang-jax {q.version} not read: the rules hold for the tags "
                f"{', '.join(known[:-1])} and {snapshot()}"
            )
