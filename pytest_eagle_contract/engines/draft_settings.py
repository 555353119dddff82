"""A draft's position and norm settings as each reader resolves them from its config.json.

Two field layouts exist (read from the releases' own code):

- transformers 4 (4.57.1, ``configuration_llama.py``): ``rope_theta`` at the top level
  (default 10000.0), ``rope_scaling`` beside it (``type`` copied to ``rope_type``); a
  ``rope_parameters`` key is an unknown attribute nobody reads.
- transformers 5 (5.x, ``modeling_rope_utils.RotaryEmbeddingConfigMixin``): everything in
  ``rope_parameters``; a file's ``rope_scaling`` is taken as ``rope_parameters`` when present,
  a top-level ``rope_theta`` fills ``rope_parameters["rope_theta"]`` when that is missing,
  else ``default_theta`` 10000.0; llama3/yarn/longrope get ``original_max_position_embeddings``
  = ``max_position_embeddings`` when unset. ``save_pretrained`` writes ``rope_parameters`` only
  (no top-level ``rope_theta``), so a trainer reading ``config.rope_theta`` finds nothing.

Both majors default ``max_position_embeddings`` to 2048 and ``head_dim`` to
hidden_size // num_attention_heads (LlamaConfig). An engine parses the file with the
transformers it pins and then reads what its draft model reads (``ENGINE_READS``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

DEFAULT_THETA = 10000.0  # RotaryEmbeddingConfigMixin.default_theta; LlamaConfig 4.x's default
DEFAULT_MAX_POSITION = 2048  # LlamaConfig's default, both majors
SCALED_TYPES = ("llama3", "yarn", "longrope")


@dataclass(frozen=True)
class DraftSettings:
    """What the draft's attention and fc run with. ``None``: not set (and no default)."""

    rope_theta: float | None = None
    rope_type: str | None = None
    rope_factor: float | None = None
    original_max_position_embeddings: int | None = None
    max_position_embeddings: int | None = None
    sliding_window: int | None = None  # the window of the layers that slide; None: none slide
    head_dim: int | None = None
    dtype: str | None = None
    fc_norm: bool | None = None
    norm_output: bool | None = None

    def items(self) -> list[tuple[str, Any]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self)]


@dataclass(frozen=True)
class Reading:
    """One reader's view of the file: who, what it resolves, and the set fields it ignores."""

    reader: str
    settings: DraftSettings
    ignores: tuple[str, ...] = ()


class BadField(ValueError):
    """A field of the wrong type (the message names it)."""


def _num(data: dict[str, Any], key: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise BadField(f"{key} must be a number, not {str(value)[:40]!r}")
    return float(value)


def _int(data: dict[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise BadField(f"{key} must be a whole number, not {str(value)[:40]!r}")
    return value


def _dict(data: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadField(f"{key} must be an object, not {str(value)[:40]!r}")
    return value


def _flag(data: dict[str, Any], *keys: str) -> bool | None:
    for key in keys:
        if key in data and data[key] is not None:
            if not isinstance(data[key], bool):
                raise BadField(f"{key} must be true or false, not {str(data[key])[:40]!r}")
            return bool(data[key])
    return None


def _sliding(data: dict[str, Any]) -> int | None:
    """The window, when any layer slides: ``layer_types`` naming ``sliding_attention``, or
    Qwen2's ``use_sliding_window``; a bare ``sliding_window`` with neither is Mistral's."""
    window = _int(data, "sliding_window")
    types = data.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise BadField("layer_types must be a list of strings")
        return window if "sliding_attention" in types else None
    if data.get("use_sliding_window") is False:
        return None
    return window


def _common(data: dict[str, Any]) -> dict[str, Any]:
    hidden, heads = _int(data, "hidden_size"), _int(data, "num_attention_heads")
    head_dim = _int(data, "head_dim") or (hidden // heads if hidden and heads else None)
    dtype = data.get("dtype") or data.get("torch_dtype")
    return {
        "max_position_embeddings": _int(data, "max_position_embeddings") or DEFAULT_MAX_POSITION,
        "sliding_window": _sliding(data),
        "head_dim": head_dim,
        "dtype": str(dtype) if isinstance(dtype, str) else None,
        "fc_norm": _flag(data, "fc_norm", "use_aux_norm"),
        "norm_output": _flag(data, "norm_output"),
    }


def _scaling(params: dict[str, Any] | None, max_position: int, fill: bool) -> dict[str, Any]:
    params = params or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if not isinstance(rope_type, str):
        raise BadField(f"rope_type must be a string, not {str(rope_type)[:40]!r}")
    original = _int(params, "original_max_position_embeddings")
    if original is None and fill and rope_type in SCALED_TYPES:
        original = max_position
    return {
        "rope_type": rope_type,
        "rope_factor": _num(params, "factor"),
        "original_max_position_embeddings": original,
    }


def flat(data: dict[str, Any]) -> dict[str, Any]:
    """A speculators config's ``transformer_layer_config`` (the draft layer's LlamaConfig)
    lifted to the top level, as vLLM's speculators converter does; other configs as they are."""
    inner = data.get("transformer_layer_config")
    if isinstance(inner, dict) and "speculators_config" in data:
        return {**data, **inner}
    return data


def as_transformers(data: dict[str, Any], major: int) -> DraftSettings:
    """``data`` (a config.json) as transformers ``major`` (4 or 5) resolves it.
    Raises :class:`BadField`."""
    data = flat(data)
    common = _common(data)
    for flag in ("fc_norm", "norm_output"):  # the draft models' getattr(config, flag, False)
        common[flag] = bool(common[flag])
    if major == 4:
        theta = _num(data, "rope_theta")
        scaling = _dict(data, "rope_scaling")
        return DraftSettings(
            rope_theta=DEFAULT_THETA if theta is None else theta,
            **_scaling(scaling, common["max_position_embeddings"], fill=True),
            **common,
        )
    params = _dict(data, "rope_scaling") or _dict(data, "rope_parameters") or {}
    theta = _num(params, "rope_theta")
    if theta is None:
        theta = _num(data, "rope_theta")
    return DraftSettings(
        rope_theta=DEFAULT_THETA if theta is None else theta,
        **_scaling(params, common["max_position_embeddings"], fill=True),
        **common,
    )


def stated(data: dict[str, Any]) -> DraftSettings:
    """What a trainer's own config file states, in either layout (rope_parameters first),
    with no defaults filled in."""
    data = flat(data)
    params = _dict(data, "rope_parameters") or _dict(data, "rope_scaling") or {}
    theta = _num(params, "rope_theta")
    common = _common(data)
    if data.get("max_position_embeddings") is None:
        common["max_position_embeddings"] = None
    has_type = "rope_type" in params or "type" in params
    return DraftSettings(
        rope_theta=_num(data, "rope_theta") if theta is None else theta,
        rope_type=_scaling(params, 0, fill=False)["rope_type"] if has_type else None,
        rope_factor=_num(params, "factor"),
        original_max_position_embeddings=_int(params, "original_max_position_embeddings"),
        **{k: v for k, v in common.items()},
    )


@dataclass(frozen=True)
class EngineReads:
    """What one engine release range does with a draft config (read from its code)."""

    engine: str
    first: str | None  # the first release this row covers (None: every earlier one)
    last: str | None  # the last (None: every later one)
    transformers: int  # the major it pins
    ignores: tuple[str, ...]  # settings its EAGLE-3 draft never reads
    source: str  # where this was read
    # vLLM 0.12-0.19.0 on transformers 4 (patch_rope_parameters): rope_scaling, else the
    # file's rope_parameters, as the scaling; the config's rope_theta (4.x: 10000 when the
    # file has none at the top level) written over its theta
    patched: bool = False


# vLLM, read from each of its 47 wheels 0.8.4-0.34.0: up to 0.11.2 llama.py reads rope_theta
# and rope_scaling as transformers 4 leaves them; 0.12.0-0.19.0 (transformers<5) go through
# patch_rope_parameters (``patched``); from 0.19.1 transformers 5 is admitted (pip takes
# the newest: 5.x) and required from 0.24.0; llama.py takes the window from layer_types
# from 0.10.1; llama_eagle3 reads fc_norm and norm_output from 0.22.0.
# SGLang, read from each wheel 0.5.9-0.5.23 (METADATA, srt/models/llama.py, llama_eagle3.py):
# 0.5.9 pins transformers==4.57.1; 0.5.10 pins 5.3.0 (5.x ever since); llama_eagle3 reads
# fc_norm (or use_aux_norm) and norm_output from 0.5.12; no llama.py builds a sliding-window
# attention, so the draft's window is never applied. Releases not read here: no row.
_FLAGS = ("fc_norm", "norm_output")
_VL = "vllm {} wheels: METADATA, transformers_utils/config.py, models/llama.py, llama_eagle3.py"
_SG = "sglang {} wheel: METADATA, srt/models/llama.py, llama_eagle3.py"
ENGINE_READS: tuple[EngineReads, ...] = (
    EngineReads(
        "sglang",
        None,
        "0.5.9",
        4,
        ("sliding_window", "fc_norm", "norm_output"),
        _SG.format("0.5.9"),
    ),
    EngineReads(
        "sglang",
        "0.5.10",
        "0.5.11",
        5,
        ("sliding_window", "fc_norm", "norm_output"),
        _SG.format("0.5.10, 0.5.11"),
    ),
    EngineReads("sglang", "0.5.12", None, 5, ("sliding_window",), _SG.format("0.5.12-0.5.23")),
    EngineReads(
        "vllm",
        None,
        "0.10.0",
        4,
        ("sliding_window", "fc_norm", "norm_output"),
        _VL.format("0.8.4-0.10.0"),
    ),
    EngineReads("vllm", "0.10.1", "0.11.2", 4, _FLAGS, _VL.format("0.10.1-0.11.2")),
    EngineReads("vllm", "0.12.0", "0.19.0", 4, _FLAGS, _VL.format("0.12.0-0.19.0"), True),
    EngineReads("vllm", "0.19.1", "0.21.0", 5, _FLAGS, _VL.format("0.19.1-0.21.0")),
    EngineReads("vllm", "0.22.0", None, 5, (), _VL.format("0.22.0-0.34.0")),
)


def _key(version: str) -> tuple[int, ...]:
    out = []
    for part in version.split(".")[:4]:
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits[:6]) if digits else 0)
    return tuple(out)


def engine_reads(engine: str, version: str | None) -> EngineReads | None:
    """The row covering ``engine`` at ``version`` (None: the newest), or None when this tool
    has not read that release's code."""
    rows = [r for r in ENGINE_READS if r.engine == engine]
    if not rows:
        return None
    if version is None:
        return rows[-1]
    v = _key(version)
    for row in rows:
        if (row.first is None or _key(row.first) <= v) and (
            row.last is None or v <= _key(row.last)
        ):
            return row
    return None


def as_engine(data: dict[str, Any], engine: str, version: str | None) -> Reading | None:
    """``data`` as ``engine`` at ``version`` loads it, or None when not known."""
    row = engine_reads(engine, version)
    if row is None:
        return None
    settings = as_transformers(data, row.transformers)
    if row.patched:
        flat_data = flat(data)
        params = _dict(flat_data, "rope_scaling") or _dict(flat_data, "rope_parameters") or {}
        max_position = settings.max_position_embeddings or DEFAULT_MAX_POSITION
        settings = replace(settings, **_scaling(params, max_position, fill=True))
    label = f"{engine} {version}" if version else f"{engine} (newest known)"
    return Reading(label, settings, row.ignores)
