"""Hidden states stored in FP8, read as the trainer reads them: dequantized.

The field's FP8 writer (hs-connectors' ``FP8HiddenStatesConnector``, which speculators'
data generation uses) stores ``hidden_states`` as ``float8_e4m3fn`` [T, k, H] and beside
it ``hidden_states_scales``, float32 [T, 1, 1]: one scale per token across the k slots,
``scale = amax / 448``. Its reader (``hs_connectors.transfer.FP8Transfer``) hands the
trainer ``fp8.to(bfloat16) * scale.to(bfloat16)``. :func:`dequantized` does the same for
every state key of a format that holds an FP8 tensor with a ``<key>_scales`` beside it,
so every check family sees the numbers the trainer trains on; what was stored is kept in
:class:`Precision` (the sample's ``metadata["precision"]``) for the ``precision`` family
and ``inspect``: the FP8 dtype, the scales' granularity, saturation (values at the
format's largest magnitude beyond the one per scale group that sets the scale), and per
slot the share of values below the smallest normal FP8 number (underflow under a scale
shared with a larger slot). A state key with no scales is left as stored (EC310); unusable
scales too (EC312). A shard with no FP8 state pays one dtype-name test per state key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from .formats.base import Format

SCALES_SUFFIX = "_scales"  # hs-connectors: SCALES_KEY = "hidden_states_scales"
DEQUANTIZED_DTYPE = "bfloat16"  # FP8Transfer's default dequantize_dtype
CHUNK = 1 << 22  # bytes of FP8 values counted at a time
MAX_LISTED = 1024  # list entries looked at (formats.base.MAX_SLOTS: more is garbage)
# each FP8 format: its largest finite magnitude, the bits of that magnitude (sign cleared),
# and its exponent bits (all clear: zero or subnormal, below the smallest normal number)
FP8_RANGE: dict[str, tuple[float, int, int]] = {
    "float8_e4m3fn": (448.0, 0x7E, 0x78),
    "float8_e4m3fnuz": (240.0, 0x7F, 0x78),
    "float8_e5m2": (57344.0, 0x7B, 0x7C),
    "float8_e5m2fnuz": (57344.0, 0x7F, 0x7C),
}


@dataclass
class Precision:
    """What one FP8 state key held, and how it was read."""

    key: str
    dtype: str
    max_value: float
    scales: str | None = None  # the granularity ("per token, shared by 4 slots"), or None
    scale_shape: tuple[int, ...] = ()
    dequantized: bool = False
    saturated: int = 0  # values at +-max beyond one per scale group
    values: int = 0
    underflow: list[float] = field(default_factory=list)  # per slot of the key
    problem: str = ""  # why the scales could not be used

    @property
    def saturation(self) -> float:
        return self.saturated / self.values if self.values else 0.0

    def describe(self) -> str:
        how = (
            f"dequantized to {DEQUANTIZED_DTYPE} with its scales ({self.scales}, "
            f"{list(self.scale_shape)})"
            if self.dequantized
            else f"NOT dequantized: {self.problem or 'no scales stored'}"
        )
        under = ", ".join(f"{u:.1%}" for u in self.underflow)
        return (
            f"{self.key}: stored {self.dtype} (max {self.max_value:g}), {how}; saturation "
            f"{self.saturation:.3%} ({self.saturated} values at +-{self.max_value:g}); "
            f"below the smallest normal per slot: {under}"
        )


def is_fp8(value: Any) -> bool:
    return str(getattr(value, "dtype", "")).removeprefix("torch.") in FP8_RANGE


def _holds_fp8(value: Any) -> bool:
    """An FP8 tensor, or a list of states (speculators v1) with one among them."""
    if isinstance(value, (list, tuple)):
        return any(is_fp8(v) for v in value[:MAX_LISTED])
    return is_fp8(value)


def dequantized(fmt: Format, tensors: dict[str, Any]) -> tuple[dict[str, Any], list[Precision]]:
    """``tensors`` with each FP8 state key of ``fmt`` that has usable ``<key>_scales``
    replaced by its dequantized values (and the scales key removed), and what each FP8 key
    held. Tensors without FP8 states come back as they are."""
    if not any(_holds_fp8(tensors.get(key)) for key, _ in fmt.states):
        return tensors, []
    out = dict(tensors)
    found: list[Precision] = []
    for key, packing in fmt.states:
        value = tensors.get(key)
        if not _holds_fp8(value):
            continue
        scales = out.pop(key + SCALES_SUFFIX, None)
        if isinstance(value, (list, tuple)):  # a list of [T, H] states: a scale list beside
            listed = isinstance(scales, (list, tuple)) and len(scales) == len(value)
            entries = []
            for j, item in enumerate(value):
                if not is_fp8(item):
                    entries.append(item)
                    continue
                scale = scales[j] if listed else scales
                info, result = _read(f"{key}[{j}]", item, scale, stacked=False)
                entries.append(item if result is None else result)
                found.append(info)
            out[key] = entries
            continue
        info, result = _read(key, value, scales, stacked=packing == "stacked")
        if result is not None:
            out[key] = result
        found.append(info)
    return out, found


def _read(
    key: str, value: Any, scales: Any, *, stacked: bool
) -> tuple[Precision, torch.Tensor | None]:
    import torch

    dtype = str(value.dtype).removeprefix("torch.")
    top, top_bits, exponent = FP8_RANGE[dtype]
    info = Precision(key, dtype, top)
    info.values = int(value.numel())
    at_max, info.underflow = _counts(value, top_bits, exponent, stacked)
    if scales is None:
        info.saturated = at_max
        return info, None
    info.scale_shape = tuple(int(n) for n in getattr(scales, "shape", ()))
    info.problem = _scales_problem(value, scales)
    if info.problem:
        info.saturated = at_max
        return info, None
    groups = int(scales.numel())
    info.saturated = max(0, at_max - groups)
    info.scales = _granularity(value, scales)
    info.dequantized = True
    wide = getattr(torch, DEQUANTIZED_DTYPE)
    return info, _widened(value) * scales.to(wide)


def _scales_problem(value: torch.Tensor, scales: Any) -> str:
    import torch

    if not isinstance(scales, torch.Tensor) or not scales.is_floating_point():
        kind = getattr(scales, "dtype", type(scales).__name__)
        return f"the scales are {str(kind).removeprefix('torch.')}, not floating-point numbers"
    shape, want = list(scales.shape), list(value.shape)
    broadcasts = scales.numel() == 1 or (
        len(shape) == len(want) and all(s in (1, w) for s, w in zip(shape, want, strict=True))
    )
    if not broadcasts:
        return f"the scales are {shape}, which does not broadcast against the states {want}"
    wide = scales.to(torch.float64)
    if not bool(torch.isfinite(wide).all()):
        return "the scales hold NaN or Inf"
    low = float(wide.min()) if wide.numel() else math.nan
    if not low > 0:
        return f"the scales hold {low:g}: a scale is a positive number"
    return ""


def _granularity(value: torch.Tensor, scales: torch.Tensor) -> str:
    shape = list(scales.shape)
    if scales.numel() == 1:
        return "one scale per tensor"
    if shape[0] == value.shape[0] and all(s == 1 for s in shape[1:]):
        if value.dim() == 3:
            return f"one scale per token, shared by its {value.shape[1]} slots"
        return "one scale per token"
    if value.dim() == 3 and shape[:2] == list(value.shape[:2]) and shape[2:] == [1]:
        return "one scale per token and slot"
    return f"scales of shape {shape}"


def _counts(value: Any, top_bits: int, exponent: int, stacked: bool) -> tuple[int, list[float]]:
    """Values at +-max, and per slot of a stacked [.., k, H] key (else for the whole key)
    the share with no exponent bits (zero or subnormal: digits lost to the scale), read
    from the bytes a chunk of rows at a time (CHUNK bytes of work space)."""
    import numpy as np
    import torch

    if value.numel() == 0:
        return 0, []
    raw = value.contiguous().view(torch.uint8).numpy()
    flat = raw.reshape(-1, raw.shape[-1]) if raw.ndim >= 2 else raw.reshape(1, -1)
    slots = int(raw.shape[-2]) if stacked and raw.ndim >= 3 else 1
    step = max(1, CHUNK // max(1, int(flat.shape[1])) // slots) * slots
    at_max, below = 0, np.zeros(slots, np.int64)
    for start in range(0, int(flat.shape[0]), step):
        block = flat[start : start + step]
        at_max += int(np.count_nonzero((block & 0x7F) == top_bits))
        low = ((block & exponent) == 0).reshape(-1, slots, block.shape[1])
        below += np.count_nonzero(low, axis=(0, 2))
    per_slot = value.numel() / slots
    return at_max, [float(b) / per_slot for b in below]


def _widened(value: Any) -> torch.Tensor:
    """An FP8 tensor as bfloat16, exactly (every FP8 number is one): a 256-entry table
    looked up per byte, faster than torch's element-wise cast."""
    import numpy as np
    import torch

    codes = torch.arange(256, dtype=torch.uint8).view(value.dtype).to(torch.bfloat16)
    table = codes.view(torch.int16).numpy()
    bits = np.take(table, value.contiguous().view(torch.uint8).numpy())
    return torch.from_numpy(bits).view(torch.bfloat16)
