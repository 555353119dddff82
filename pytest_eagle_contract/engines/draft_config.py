"""What a draft's config.json says about its fc input: the aux layer ids under every key an
engine may read, the sizes. Which key an engine reads is the engine's business
(``base.Engine.id_keys``); the draft's weights are ``models/draft.py``."""

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
    # eagle_config.use_aux_hidden_state as written (None: not written; the engines default
    # to true): false makes SGLang (0.5.9 on) and vLLM feed the draft the last state only
    use_aux_hidden_state: bool | None = None

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


def key_line(path: Path, key: str) -> int | None:
    """The line (1-based) of ``key``'s last part, quoted, in the draft's config.json text
    (``"eagle_aux_hidden_state_layer_ids"``): where a user edits the ids; None where the
    text does not hold it (a GGUF draft, a file gone or past the JSON limit)."""
    from ..limits import DEFAULT_JSON_MAX_BYTES, JSON_MAX_BYTES_ENV, env_bytes

    word = f'"{key.rpartition(".")[2]}"'
    try:
        with path.open("rb") as f:
            text = f.read(env_bytes(JSON_MAX_BYTES_ENV, DEFAULT_JSON_MAX_BYTES)).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return next((n for n, line in enumerate(text.splitlines(), 1) if word in line), None)


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
    """A draft's config.json (or its folder), or a GGUF draft (llama.cpp: its baked ids)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    from . import gguf_meta

    if gguf_meta.is_gguf(path):
        meta = gguf_meta.read_metadata(path)
        return DraftConfig(
            path=path,
            aux_ids=gguf_meta.draft_ids(path, meta),
            num_aux_hidden_states=None,
            target_hidden_size=gguf_meta.size(meta, ".target_hidden_size"),
            hidden_size=gguf_meta.size(meta, ".embedding_length"),
            draft_vocab_size=None,
            vocab_size=gguf_meta.size(meta, ".vocab_size"),
        )
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
        use_aux_hidden_state=_use_aux(data),
    )


def _use_aux(data: dict[str, Any]) -> bool | None:
    """``eagle_config.use_aux_hidden_state`` where it is a boolean (the key SGLang's
    ``spec_aux_hidden_state.py`` and vLLM's ``llama_eagle3.py`` read)."""
    eagle = data.get("eagle_config")
    value = eagle.get("use_aux_hidden_state") if isinstance(eagle, dict) else None
    return value if isinstance(value, bool) else None
