"""The engine registry, and the lookups over it: ``resolve`` and ``engine_aux_ids``.

Engines: ``sglang`` (built-in table in ``sglang_table``, or the installed sglang's own
methods), ``vllm``, ``trtllm`` (TensorRT-LLM), ``llama.cpp``, ``mlx``, ``tpu-inference``,
``vllm-ascend``, ``trtllm-autodeploy``, ``sglang-jax``, ``atom``, ``openvino``, ``lmdeploy``;
trainers' captures:
``specforge`` (SGLang at the version SpecForge pinned), ``speculators-v1``, ``speculators``,
``eagle`` (SafeAILab EAGLE-3) and ``hf`` (``output_hidden_states`` indices). See
docs/layers.md for every rule and its source.
A new engine is one module with an :class:`~.base.Engine` subclass and one line here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import EagleContractError, Unservable
from ..named import by_name, lookup
from .ascend import VLLMAscend
from .atom import ATOM
from .autodeploy import AutoDeploy
from .base import Engine, Position, Resolution
from .draft_config import read_draft_config
from .llamacpp import LlamaCpp
from .lmdeploy import LMDeploy
from .mlx import MLX
from .openvino import OpenVINO
from .sglang import SGLang, installed_sglang, sglang_versions
from .sglang_jax import SGLangJax
from .tpu import TPUInference
from .trainers import HF, SafeAILab, SpecForge, Speculators, SpeculatorsV1
from .trtllm import TensorRTLLM
from .vllm import VLLM

if TYPE_CHECKING:
    from .draft_config import DraftConfig

__all__ = [
    "ENGINES",
    "Position",
    "Resolution",
    "engine_aux_ids",
    "get_engine",
    "installed_sglang",
    "resolve",
    "sglang_versions",
]

ENGINES: dict[str, Engine] = by_name(
    [
        SGLang(),
        VLLM(),
        TensorRTLLM(),
        LlamaCpp(),
        MLX(),
        TPUInference(),
        VLLMAscend(),
        AutoDeploy(),
        SGLangJax(),
        ATOM(),
        OpenVINO(),
        LMDeploy(),
        SpecForge(),
        SpeculatorsV1(),
        Speculators(),
        SafeAILab(),
        HF(),
    ]
)


def get_engine(name: str) -> Engine:
    return lookup(ENGINES, name, "engine")


def resolve(
    engine: str,
    num_layers: int,
    ids: Sequence[int] | None = None,
    arch: str | None = None,
    version: str | None = None,
    use_installed: bool = True,
) -> Resolution:
    """One side's layers in its concatenation order. Raises :class:`Unservable`.

    For sglang, the installed sglang's own method answers when its version is the one
    asked for (``use_installed``); otherwise the built-in table. ``source`` says which.
    """
    if num_layers < 4:
        raise Unservable(f"num_layers {num_layers}: EAGLE-3 defaults need at least 4 layers")
    return get_engine(engine).resolve(num_layers, ids, arch, version, use_installed)


class ServingSide(Protocol):
    """What :func:`engine_aux_ids` reads of a contract's serving section
    (``contract.model.ServingSpec``; engines know nothing else of contracts)."""

    @property
    def engine(self) -> str: ...

    @property
    def draft_config(self) -> Path | None: ...

    @property
    def aux_layer_ids(self) -> tuple[int, ...] | None: ...


def engine_aux_ids(
    serving: ServingSide, draft: DraftConfig | None = None, engine: str | None = None
) -> tuple[int, ...] | None:
    """The aux ids the engine (default: ``serving.engine``) reads: the draft config's
    (``draft``, else ``serving.draft_config``) under that engine's keys, else the contract's
    ``aux_layer_ids``. None: the engine's default. Raises EagleContractError when the draft
    config cannot be read."""
    if draft is None and serving.draft_config is not None:
        draft = read_draft_config(serving.draft_config)
    side = get_engine(engine or serving.engine)
    if draft is None or not side.id_keys:  # no draft, or an engine that reads none from it
        return serving.aux_layer_ids
    return side.draft_ids(draft)


def engine_aux_ids_or_none(
    serving: ServingSide | None, engine: str | None = None
) -> tuple[int, ...] | None:
    """``engine_aux_ids``, or None where there is no serving side or its draft config cannot
    be read (the callers that only look, and report the unreadable config elsewhere)."""
    if serving is None:
        return None
    try:
        return engine_aux_ids(serving, engine=engine)
    except EagleContractError:
        return None
