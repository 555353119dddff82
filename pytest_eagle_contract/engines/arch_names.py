"""A target's architecture as its config.json spells it, mapped onto the names an engine's
rules use: ``architectures[0]`` (``Qwen3_5ForConditionalGeneration``) or ``model_type``
(``qwen3_5``). vLLM, SGLang and most engines key their rules by the first, mlx-vlm by the
second (its model folders), llama.cpp by the GGUF architecture its converter writes; every
engine takes either (``Engine.resolve``). The table is ``arch_names.json``, written by
``scripts/gen_arch_names.py`` from transformers' own auto mappings.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection
from pathlib import Path


@functools.cache
def _model_types() -> dict[str, tuple[str, ...]]:
    data = json.loads((Path(__file__).parent / "arch_names.json").read_text("utf-8"))
    found = {k: list(v) for k, v in data["model_types"].items()}
    for model_type, archs in data["remote_code"].items():  # a checkpoint's own spelling first
        found[model_type] = [*archs, *found.get(model_type, ())]
    return {k.lower(): tuple(v) for k, v in found.items()}


@functools.cache
def _by_arch() -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for model_type, archs in _model_types().items():
        for arch in archs:
            out.setdefault(arch.lower(), []).append(model_type)
    return {k: tuple(v) for k, v in out.items()}


def model_types(arch: str) -> tuple[str, ...]:
    """The model_types a config.json with ``architectures[0] == arch`` may hold (lower case;
    empty where transformers' mappings do not name it)."""
    return _by_arch().get(arch.lower(), ())


def architectures(model_type: str) -> tuple[str, ...]:
    """The architectures a config.json with ``model_type`` may name (empty where transformers'
    mappings and the remote-code table do not name it)."""
    return _model_types().get(model_type.lower(), ())


def spellings(name: str) -> tuple[str, ...]:
    """``name`` and what a config.json holding it holds beside it: a model_type's
    architectures (the multimodal class first), an architecture's model_types and their
    other architectures (``Qwen3_5ForConditionalGeneration``: ``qwen3_5``,
    ``Qwen3_5ForCausalLM``, the text model an engine keyed by it serves)."""
    key = name.lower()
    types = _by_arch().get(key, ())
    archs = _model_types().get(key, ()) + tuple(a for m in types for a in _model_types()[m])
    return tuple(dict.fromkeys((name, *types, *archs)))


class Arch(str):
    """An architecture asked for, with the other spellings its config.json gave
    (``--target-config``: ``model_type`` beside ``architectures[0]``)."""

    also: tuple[str, ...]

    def __new__(cls, name: str, also: tuple[str, ...] = ()) -> Arch:
        self = super().__new__(cls, name)
        self.also = also
        return self


def pick(name: str, known: Collection[str]) -> tuple[str, str | None]:
    """The name of ``known`` (an engine's own spellings) that ``name`` stands for (``name``
    itself where nothing matches, for the engine to refuse in its own words), and a note
    where it stands for several (the first is taken)."""
    if name in known:  # as spelled: vLLM knows both LlamaForCausalLM and LLaMAForCausalLM
        return name, None
    lower = {k.lower(): k for k in sorted(known, reverse=True)}  # the same name each run
    if name.lower() in lower:
        return lower[name.lower()], None
    given = (name, *getattr(name, "also", ()))
    candidates = [s for g in given for s in spellings(g)]
    matched = list(
        dict.fromkeys(
            c if c in known else lower[c.lower()] for c in candidates if c.lower() in lower
        )
    )
    if len(matched) < 2:
        return (matched[0] if matched else name), None
    return matched[0], (
        f"--arch {name} taken as {matched[0]} (config.json's architectures[0] / model_type); "
        f"also {', '.join(matched[1:])}: give that name for it"
    )
