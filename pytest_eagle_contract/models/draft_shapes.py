"""What a draft checkpoint must hold before it runs.

The probe runs the draft's decoder layer on the target's states (``draft_model``). A
``config.json`` or a weight file from elsewhere can say anything: zero heads, a head size
that does not divide the projections, an eps that is a word, an fc as wide as no layout,
a ``d2t`` that maps outside the vocabulary. Each is checked here against the others and
named in a :class:`UsageError` (exit 2) before any matrix is multiplied.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:
    import torch

LAYER = "midlayer."


def whole(config: Mapping[str, Any], key: str, default: int | None = None) -> int | None:
    """``config[key]`` as a whole number >= 1 (or ``default`` when absent); else None."""
    value = config.get(key, default)
    if value is None:
        return default
    return value if type(value) is int and value >= 1 else None


def number(config: Mapping[str, Any], key: str, default: float) -> float | None:
    """``config[key]`` as a finite number > 0 (or ``default`` when absent); else None."""
    value = config.get(key)
    if value is None:
        return default
    if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def config_problems(config: Mapping[str, Any]) -> list[str]:
    """What in a draft's config.json the decoder layer cannot run with."""
    out = []
    heads = whole(config, "num_attention_heads")
    if heads is None:
        out.append(f"num_attention_heads is {config.get('num_attention_heads')!r}, not >= 1")
    kv = whole(config, "num_key_value_heads", heads)
    if kv is None or (heads is not None and heads % kv):
        out.append(
            f"num_key_value_heads is {config.get('num_key_value_heads')!r}, not a divisor of "
            f"num_attention_heads {heads}"
        )
    if config.get("head_dim") is not None and whole(config, "head_dim") is None:
        out.append(f"head_dim is {config.get('head_dim')!r}, not >= 1")
    for key, default in (("rms_norm_eps", 1e-6), ("rope_theta", 10000.0)):
        if number(config, key, default) is None:
            out.append(f"{key} is {str(config.get(key))[:40]!r}, not a number above 0")
    for key in ("rope_scaling", "rope_parameters"):
        value = config.get(key)
        if value is not None and not isinstance(value, dict):
            out.append(f"{key} is a {type(value).__name__}, not an object")
        elif isinstance(value, dict) and (value.get("rope_type") or value.get("type")) == "llama3":
            names = (
                "factor",
                "low_freq_factor",
                "high_freq_factor",
                "original_max_position_embeddings",
            )
            bad = [n for n in names if number(value, n, math.nan) is None or n not in value]
            low, high = value.get("low_freq_factor"), value.get("high_freq_factor")
            if bad or low == high:
                out.append(f"{key} (llama3) needs numbers above 0 for {list(names)}")
    return out


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(n) for n in t.shape)


def weight_problems(config: Mapping[str, Any], weights: Mapping[str, torch.Tensor]) -> list[str]:
    """What in the draft's tensors does not fit its config or each other."""
    from ..shards.reading import widens

    out = []
    for name, t in weights.items():
        if name not in ("d2t", "t2d") and (not t.is_floating_point() or not widens(t.dtype)):
            out.append(f"{name} is {t.dtype}, not floating-point weights")
    if out:
        return out
    fc = weights["fc.weight"]
    if fc.dim() != 2 or 0 in fc.shape:
        return [f"fc.weight is {list(_shape(fc))}, not [hidden, n_aux * target hidden]"]
    hidden = int(fc.shape[0])
    heads = whole(config, "num_attention_heads") or 1
    kv = whole(config, "num_key_value_heads", heads) or heads
    hd = whole(config, "head_dim") or hidden // heads
    if hd < 2 or hd % 2:
        out.append(f"the head size is {hd}: RoPE needs an even head size >= 2")
    up = weights[LAYER + "mlp.up_proj.weight"]
    inter = int(up.shape[0]) if up.dim() else 0
    expected: dict[str, tuple[int, ...]] = {
        LAYER + "self_attn.q_proj.weight": (heads * hd, 2 * hidden),
        LAYER + "self_attn.k_proj.weight": (kv * hd, 2 * hidden),
        LAYER + "self_attn.v_proj.weight": (kv * hd, 2 * hidden),
        LAYER + "self_attn.o_proj.weight": (hidden, heads * hd),
        LAYER + "mlp.gate_proj.weight": (inter, hidden),
        LAYER + "mlp.up_proj.weight": (inter, hidden),
        LAYER + "mlp.down_proj.weight": (hidden, inter),
        "norm.weight": (hidden,),
        LAYER + "input_layernorm.weight": (hidden,),
        LAYER + "hidden_norm.weight": (hidden,),
        LAYER + "post_attention_layernorm.weight": (hidden,),
    }
    for name, shape in expected.items():
        if _shape(weights[name]) != shape or 0 in shape:
            out.append(
                f"{name} is {list(_shape(weights[name]))}, expected {list(shape)} "
                f"(hidden {hidden} from fc.weight, {heads} heads, {kv} kv heads, head size {hd})"
            )
    head = weights.get("lm_head.weight")
    if head is not None and (head.dim() != 2 or head.shape[0] < 1 or head.shape[1] != hidden):
        out.append(f"lm_head.weight is {list(_shape(head))}, expected [draft vocab >= 1, {hidden}]")
    d2t = weights.get("d2t")
    if d2t is not None:
        rows = int(head.shape[0]) if head is not None and head.dim() == 2 else None
        import torch

        if d2t.dim() != 1 or d2t.is_floating_point() or d2t.is_complex() or d2t.dtype is torch.bool:
            out.append(f"d2t is {d2t.dtype} {list(_shape(d2t))}, not [draft vocab] integers")
        elif rows is not None and d2t.shape[0] != rows:
            out.append(f"d2t has {d2t.shape[0]} entries, lm_head.weight {rows} rows")
    return out


def run_problems(
    draft_hidden: int,
    fc_in: int,
    weights: Mapping[str, torch.Tensor],
    embedding: torch.Tensor,
    lm_head: torch.Tensor | None,
    aux_width: int,
) -> list[str]:
    """What does not fit between the draft and the target it runs beside, for one layout's
    aux states ``aux_width`` wide."""
    import torch

    out = []
    if aux_width != fc_in:
        out.append(f"the layout feeds {aux_width} values per token, fc.weight takes {fc_in}")
    if embedding.dim() != 2 or embedding.shape[1] != draft_hidden:
        out.append(
            f"the target's embedding is {list(_shape(embedding))}, the draft's hidden size "
            f"is {draft_hidden}"
        )
    head = weights.get("lm_head.weight", lm_head)
    if head is None:
        out.append("no lm_head.weight in the draft and no target lm_head")
    elif head.dim() != 2 or head.shape[1] != draft_hidden or head.shape[0] < 1:
        out.append(f"the lm_head is {list(_shape(head))}, the draft's hidden size {draft_hidden}")
    d2t = weights.get("d2t")
    if d2t is not None and head is not None and d2t.dim() == 1 and d2t.numel():
        targets = torch.arange(d2t.numel()) + d2t.long()
        rows = int(embedding.shape[0])
        if int(targets.min()) < 0 or int(targets.max()) >= rows:
            out.append(f"d2t maps draft tokens outside the target's {rows} embedding rows")
    return out


def refuse(path: object, problems: list[str]) -> None:
    """Raise the draft's problems as one usage error."""
    if problems:
        raise UsageError(f"draft {path}: " + "; ".join(problems[:5]))
