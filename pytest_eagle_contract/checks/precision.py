"""The ``precision`` family: hidden states stored in FP8 (``shards/precision.py``) read back
as the trainer reads them. Their scales missing (EC310) or unusable (EC312), values
clipped at the format's largest magnitude (EC311), a slot whose values fall below the
smallest normal FP8 number under a scale it shares with larger slots (EC313). Every other
family already sees the dequantized values."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from ..findings import Finding, finding
from .family import CheckFamily, shard_input

if TYPE_CHECKING:
    from ..contract.model import Contract
    from ..shards.precision import Precision
    from ..shards.shard import Shard

MAX_SATURATION = 0.01
"""Share of values at the FP8 maximum, beyond the one per scale group that sets the scale
(rounding puts a few more there: 0.14 % on the tests' 128-value tokens), above which
values were clipped."""
MAX_UNDERFLOW = 0.3
"""Share of a slot's values below the smallest normal FP8 number above which the scale,
set by a larger slot, has cost the slot its digits. The values that underflow first are
the slot's smallest: on Gaussian states the slot's dequantized error grows by 10 % at a
30 % share, 20 % at 44 %, 58 % at 67 %; on the tiny target's embed slot beside deep slots
with a massive activation, 16 % (x1000) costs nothing measurable and 43 % (x3000) 45 %
more error (benchmarks/false_alarms_seams.py; 0.1 warned on the x1000 case)."""


def check_precision(contract: Contract, shard: Shard) -> list[Finding]:
    _, sample = shard_input(contract, shard)
    stored: list[Precision] = sample.metadata.get("precision", [])
    out: list[Finding] = []
    for info in stored:
        at = partial(finding, contract=contract, file=shard.label, details=info.describe())
        whole = partial(at, key="training.slots")  # the state key's finding, not a slot's
        if not info.dequantized and not info.problem:
            out.append(
                whole(
                    "EC310",
                    f"{info.key} is stored as {info.dtype} with no {_scales(info.key)}: the "
                    f"values are read as stored, and any state above {info.max_value:g} was "
                    f"clipped ({info.saturation:.2%} of the values sit at +-{info.max_value:g})",
                    expected=f"{_scales(info.key)} beside {info.key} (one per token)",
                    found=f"{info.dtype} states, no scales",
                    hint="write FP8 states with their scales (hs-connectors' "
                    "FP8HiddenStatesConnector does), or store them as bfloat16",
                )
            )
        if info.problem:
            out.append(
                whole(
                    "EC312",
                    f"{_scales(info.key)} cannot dequantize {info.key}: {info.problem}; the "
                    f"states are read as stored {info.dtype}",
                    expected="positive finite float scales that broadcast against the states",
                    found=info.problem,
                    hint="the writer's scales were lost or corrupted: regenerate the shard",
                )
            )
        if info.saturation > MAX_SATURATION:
            out.append(
                whole(
                    "EC311",
                    f"{info.saturation:.2%} of {info.key} sit at the {info.dtype} maximum "
                    f"+-{info.max_value:g}: states larger than that were clipped",
                    expected=f"at most {MAX_SATURATION:.1%} beyond one per scale group",
                    found=f"{info.saturated} of {info.values} values",
                    hint="scale each token (or each token and slot) by its amax / max before "
                    "the cast, as hs-connectors' quantize_tensor_to_fp8 does",
                    severity="warning",
                )
            )
        for index, share in enumerate(info.underflow):
            if share > MAX_UNDERFLOW and len(info.underflow) > 1:
                out.append(
                    at(
                        "EC313",
                        f"{share:.1%} of slot {index}'s values fall below the smallest normal "
                        f"{info.dtype} number under {info.scales or 'the shared scale'}: a "
                        "larger slot sets the scale and this one loses its digits",
                        slot=index,
                        expected=f"at most {MAX_UNDERFLOW:.0%} below the smallest normal",
                        found=f"{share:.1%}",
                        hint="scale each token and slot on its own ([T, k, 1] scales), or "
                        "store this slot as bfloat16",
                        severity="warning",
                    )
                )
    return out


def _scales(key: str) -> str:
    """The scales key of a state key (``hidden_states[2]``, a list entry: the list's)."""
    return key.split("[", 1)[0] + "_scales"


FAMILY = CheckFamily(
    "precision",
    "shard",
    "FP8-stored states: their scales there and usable, no clipping, no underflow",
    codes=("EC310", "EC311", "EC312", "EC313"),
    keys=("training.slots",),
    on_shard=check_precision,
)
