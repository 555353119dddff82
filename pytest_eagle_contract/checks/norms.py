"""The ``norms`` family: each slot's median per-token L2 norm inside its bounds."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..findings import Finding, finding
from ..shards.stats import NormStats, looks_like
from .family import CheckFamily, training_spec

if TYPE_CHECKING:
    from ..contract.model import Contract, SlotSpec
    from ..shards.shard import Shard
    from .unit import Resources, Unit


def check_norms(contract: Contract, shard: Shard) -> list[Finding]:
    spec = training_spec(contract)
    out: list[Finding] = []
    slots = [s for s in shard.slots if s.array.dim() == 2]
    measured = {s.index: shard.stats(s.index) for s in slots}
    for slot in slots:
        if slot.index >= len(spec.slots):
            continue
        slot_spec = spec.slots[slot.index]
        stats = measured[slot.index]
        if slot_spec.norm is None or math.isnan(stats.median) or stats.median in slot_spec.norm:
            continue
        others = [v for k, v in measured.items() if k != slot.index]
        hint, cause = _norm_hint(slot.index, stats, spec.slots, contract.target.hidden_size, others)
        out.append(
            finding(
                "EC401",
                f"slot {slot.index} ({slot.source}) has median per-token "
                f"norm {stats.median:.4g}, outside the bounds for {slot_spec.layer}",
                key=f"training.slots[{slot.index}].norm",
                slot=slot.index,
                expected=f"{slot_spec.layer}: median in {slot_spec.norm}",
                found=f"median {stats.median:.4g} (p5 {stats.p5:.4g}, p95 {stats.p95:.4g})",
                hint=hint,
                contract=contract,
                file=shard.label,
                extra={"cause": cause},
            )
        )
    return out


EMBEDDING_LIKE, FITS_ANOTHER_SLOT, OUTSIDE = "embedding-like", "fits-another-slot", "outside"
"""EC401's causes (its ``extra["cause"]``): the slot looks like the embedding, its median
fits another slot's bounds (swapped or shifted), or it is only outside its own."""
LAYOUT_CAUSES = frozenset({EMBEDDING_LIKE, FITS_ANOTHER_SLOT})
"""The causes that say the slots' layout moved, not only their norms (``infer --update``
warns with them: a baseline update must not take a layout bug in as new bounds)."""


def layout_moved(f: Finding) -> bool:
    """An EC401 whose cause is a layout one (:data:`LAYOUT_CAUSES`)."""
    return f.code == "EC401" and f.extra.get("cause") in LAYOUT_CAUSES


def _norm_hint(
    index: int, stats: NormStats, specs: tuple[SlotSpec, ...], hidden: int, others: list[NormStats]
) -> tuple[str, str]:
    """EC401's hint and its cause."""
    looks = embedding_like(index, stats, hidden, others)
    if looks:
        return f"{looks}, small and flat; an embedding slot in front of the fc input?", (
            EMBEDDING_LIKE
        )
    fits = [s for s in specs if s.index != index and s.norm and stats.median in s.norm]
    if fits:
        names = ", ".join(f"slot {s.index} ({s.layer})" for s in fits)
        return (
            f"the value fits the bounds of {names}: slots swapped or layers shifted?",
            FITS_ANOTHER_SLOT,
        )
    bounds = specs[index].norm
    assert bounds is not None
    side = "above" if stats.median > bounds.high else "below"
    return (
        f"the norm is {side} the bounds: the capture took a deeper or shallower layer "
        "(a one-layer shift), or the bounds need an update",
        OUTSIDE,
    )


def embedding_like(index: int, stats: NormStats, hidden: int, others: list[NormStats]) -> str:
    """Words "slot I looks like the embedding: median norm M" if its norms say so, else empty."""
    if looks_like(stats, hidden, others) != "embedding-like":
        return ""
    return f"slot {index} looks like the embedding: median norm {stats.median:.3g}"


def measured_medians(runner: Resources, unit: Unit) -> dict[str, Any]:
    """Each slot's median per-token norm on the unit's shard (None where the slot is not
    [T, H]), from the statistics the check computed: for the reports' plot."""
    shard = runner.shard_of(unit)
    spec = training_spec(unit.contract)
    if shard.sample is None or shard.split_problems:
        return {}
    medians: list[float | None] = []
    for i, slot in enumerate(shard.slots[: len(spec.slots)]):
        median = shard.stats(i).median if slot.array.dim() == 2 else math.nan
        medians.append(median if math.isfinite(median) else None)
    return {"medians": medians}


FAMILY = CheckFamily(
    "norms",
    "shard",
    "each slot's median per-token norm inside its bounds",
    codes=("EC401",),
    keys=("training.slots",),
    on_shard=check_norms,
    measure=measured_medians,
)
