"""The draft side: what a draft's config.json and weights say about its fc input."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EagleContractError

IDS_KEY = "eagle_aux_hidden_state_layer_ids"


@dataclass(frozen=True)
class DraftConfig:
    path: Path
    nested_ids: tuple[int, ...] | None  # eagle_config.eagle_aux_hidden_state_layer_ids
    top_level_ids: tuple[int, ...] | None  # the speculators / vLLM style key
    num_aux_hidden_states: int | None
    target_hidden_size: int | None
    hidden_size: int | None
    draft_vocab_size: int | None
    vocab_size: int | None
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    def ids_for(self, engine: str) -> tuple[int, ...] | None:
        """The ids the engine reads: SGLang only the nested key; vLLM top-level first."""
        if engine == "sglang":
            return self.nested_ids
        return self.top_level_ids or self.nested_ids

    def n_aux(self, engine: str, version: tuple[int, ...] = ()) -> int:
        """How many aux states the draft's fc is built for, by the engine's rule."""
        if engine == "vllm" or (engine == "sglang" and version and version < (0, 5, 12)):
            return 3  # hard-coded hidden * 3
        if self.num_aux_hidden_states:
            return self.num_aux_hidden_states
        ids = self.nested_ids if engine == "sglang" else self.ids_for(engine)
        return len(ids) if ids else 3

    @property
    def fc_in_hidden(self) -> int | None:
        return self.target_hidden_size or self.hidden_size


def _ids(value: Any, where: str, path: Path) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(i, int) for i in value):
        raise EagleContractError(f"{path}: {where} must be a list of integers, not {value!r}")
    return tuple(value)


def read_draft_config(path: str | Path) -> DraftConfig:
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise EagleContractError(f"cannot read draft config {path}: {exc}") from None
    if not isinstance(data, dict):
        raise EagleContractError(f"{path}: not a JSON object")
    eagle = data.get("eagle_config") or {}
    speculators = data.get("speculators_config") or {}
    transformer = data.get("transformer_layer_config") or {}
    return DraftConfig(
        path=path,
        nested_ids=_ids(eagle.get(IDS_KEY) if isinstance(eagle, dict) else None,
                        f"eagle_config.{IDS_KEY}", path),
        top_level_ids=_ids(data.get(IDS_KEY), IDS_KEY, path),
        num_aux_hidden_states=data.get("num_aux_hidden_states"),
        target_hidden_size=data.get("target_hidden_size") or speculators.get("target_hidden_size"),
        hidden_size=data.get("hidden_size") or transformer.get("hidden_size"),
        draft_vocab_size=data.get("draft_vocab_size"),
        vocab_size=data.get("vocab_size") or transformer.get("vocab_size"),
        raw=data,
    )


@dataclass(frozen=True)
class DraftWeights:
    path: Path
    fc_shape: tuple[int, ...] | None
    d2t_problem: str | None


def read_draft_weights(directory: Path, vocab_size: int | None,
                       draft_vocab_size: int | None) -> DraftWeights | None:
    """fc.weight's shape and d2t/t2d consistency from the draft's safetensors files."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        return None
    from safetensors import safe_open

    fc_shape: tuple[int, ...] | None = None
    d2t = t2d = None
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                name = key.removeprefix("model.")
                if name == "fc.weight":
                    fc_shape = tuple(f.get_slice(key).get_shape())
                elif name == "d2t":
                    d2t = f.get_tensor(key)
                elif name == "t2d":
                    t2d = f.get_tensor(key)
    return DraftWeights(files[0].parent, fc_shape,
                        _vocab_problem(d2t, t2d, vocab_size, draft_vocab_size))


def _vocab_problem(d2t: Any, t2d: Any, vocab_size: int | None,
                   draft_vocab_size: int | None) -> str | None:
    import torch

    if d2t is None and t2d is None:
        return None
    if d2t is None or t2d is None:
        return "only one of d2t and t2d is present"
    if draft_vocab_size is not None and d2t.numel() != draft_vocab_size:
        return f"d2t has {d2t.numel()} entries, draft_vocab_size is {draft_vocab_size}"
    if vocab_size is not None and t2d.numel() != vocab_size:
        return f"t2d has {t2d.numel()} entries, the target vocab_size is {vocab_size}"
    if int(t2d.sum()) != d2t.numel():
        return f"t2d marks {int(t2d.sum())} target tokens, d2t maps {d2t.numel()}"
    target_ids = torch.arange(d2t.numel()) + d2t.long()
    if bool(((target_ids < 0) | (target_ids >= t2d.numel())).any()):
        return "d2t maps draft tokens outside the target vocabulary"
    if not bool(t2d.bool()[target_ids].all()):
        bad = int((~t2d.bool()[target_ids]).nonzero()[0, 0])
        return f"draft token {bad} maps to target {int(target_ids[bad])}, which t2d does not mark"
    return None
