"""The draft side: what a draft's config.json and weights say about its fc input."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import EagleContractError, UsageError

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


def weight_files(directory: Path) -> list[Path]:
    """The draft's ``*.safetensors`` files; one that is not a regular file (a FIFO would
    block the reader, a device never ends) is a usage error."""
    files = sorted(directory.glob("*.safetensors"))
    for file in files:
        if not file.is_file():
            raise UsageError(f"draft {directory}: {file.name} is not a regular file")
    return files


def read_draft_json(path: Path) -> dict[str, Any]:
    """A draft's config.json, a JSON object of bounded size. Raises UsageError."""
    from ..limits import read_json_object

    return read_json_object(path, f"cannot read draft config {path}")


def _size(data: dict[str, Any], key: str, path: Path, *inner: Any) -> int | None:
    """A size field: a whole number >= 0 at the top level or in ``inner`` objects, or None."""
    for where in (data, *(i for i in inner if isinstance(i, dict))):
        value = where.get(key)
        if value is None:
            continue
        if type(value) is not int or value < 0:
            raise EagleContractError(
                f"{path}: {key} must be a whole number, not {str(value)[:40]!r}"
            )
        if value:
            return value
    return None


def read_draft_config(path: str | Path) -> DraftConfig:
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    data = read_draft_json(path)
    speculators = data.get("speculators_config")
    transformer = data.get("transformer_layer_config")
    return DraftConfig(
        path=path,
        aux_ids=_aux_ids(data, path),
        num_aux_hidden_states=_size(data, "num_aux_hidden_states", path),
        target_hidden_size=_size(data, "target_hidden_size", path, speculators),
        hidden_size=_size(data, "hidden_size", path, transformer),
        draft_vocab_size=_size(data, "draft_vocab_size", path),
        vocab_size=_size(data, "vocab_size", path, transformer),
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
    files = weight_files(directory)
    if not files:
        return None
    from safetensors import SafetensorError, safe_open

    fc_shape: tuple[int, ...] | None = None
    d2t = t2d = None
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as f:
                for key in f.keys():
                    name = key.removeprefix("model.")
                    if name == "fc.weight":
                        fc_shape = tuple(f.get_slice(key).get_shape())
                    elif name == "d2t":
                        d2t = f.get_tensor(key)
                    elif name == "t2d":
                        t2d = f.get_tensor(key)
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise UsageError(f"draft {directory}: cannot read {file.name}: {exc}") from None
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
