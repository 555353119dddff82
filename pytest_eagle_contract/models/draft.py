"""The draft side: what a draft's config.json and weights say about its fc input."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import EagleContractError

_IDS_SUFFIX = "aux_hidden_state_layer_ids"


@dataclass(frozen=True)
class DraftConfig:
    """What a draft's config.json says. Which ``aux_ids`` key an engine reads is the engine's
    business (``engines.base.Engine.id_keys``)."""

    path: Path
    # every list under a key ending in "aux_hidden_state_layer_ids", top level or one object
    # down, by dotted key: {"eagle_config.eagle_aux_hidden_state_layer_ids": (1, 29, 57)}
    aux_ids: Mapping[str, tuple[int, ...]]
    num_aux_hidden_states: int | None
    target_hidden_size: int | None
    hidden_size: int | None
    draft_vocab_size: int | None
    vocab_size: int | None

    @property
    def fc_in_hidden(self) -> int | None:
        return self.target_hidden_size or self.hidden_size


def _ids(value: Any, where: str, path: Path) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(i, int) for i in value):
        raise EagleContractError(f"{path}: {where} must be a list of integers, not {value!r}")
    return tuple(value)


def _aux_ids(data: dict[str, Any], path: Path, prefix: str = "") -> dict[str, tuple[int, ...]]:
    found: dict[str, tuple[int, ...]] = {}
    nested_first = sorted(data.items(), key=lambda item: not isinstance(item[1], dict))
    for key, value in nested_first:
        if key.endswith(_IDS_SUFFIX) and (ids := _ids(value, prefix + key, path)) is not None:
            found[prefix + key] = ids
        elif isinstance(value, dict) and not prefix:
            found.update(_aux_ids(value, path, f"{key}."))
    return found


def read_draft_json(path: Path) -> dict[str, Any]:
    """A draft's config.json, a JSON object of bounded size. Raises UsageError."""
    from ..limits import read_json_object

    return read_json_object(path, f"cannot read draft config {path}")


def read_draft_config(path: str | Path) -> DraftConfig:
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    data = read_draft_json(path)
    speculators = data.get("speculators_config") or {}
    transformer = data.get("transformer_layer_config") or {}
    return DraftConfig(
        path=path,
        aux_ids=_aux_ids(data, path),
        num_aux_hidden_states=data.get("num_aux_hidden_states"),
        target_hidden_size=data.get("target_hidden_size") or speculators.get("target_hidden_size"),
        hidden_size=data.get("hidden_size") or transformer.get("hidden_size"),
        draft_vocab_size=data.get("draft_vocab_size"),
        vocab_size=data.get("vocab_size") or transformer.get("vocab_size"),
    )


@dataclass(frozen=True)
class DraftWeights:
    path: Path
    fc_shape: tuple[int, ...] | None
    d2t_problem: str | None


def read_draft_weights(
    directory: Path, vocab_size: int | None, draft_vocab_size: int | None
) -> DraftWeights | None:
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
    return DraftWeights(
        files[0].parent, fc_shape, _vocab_problem(d2t, t2d, vocab_size, draft_vocab_size)
    )


def _vocab_problem(
    d2t: Any, t2d: Any, vocab_size: int | None, draft_vocab_size: int | None
) -> str | None:
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
