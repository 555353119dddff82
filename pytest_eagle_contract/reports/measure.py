"""What the HTML report plots: per slot, every shard's median norm against the contract's
bounds; with the target's weights, the target's per-layer norm curve with the slots on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .run import CheckRun, ProbeEstimate


@dataclass(frozen=True)
class SlotNorms:
    slot: int
    layer: str
    bounds: tuple[float, float] | None
    medians: list[tuple[str, float]]  # (shard label, median per-token norm)


@dataclass(frozen=True)
class TargetCurve:
    """The target's median per-token norm at every canonical layer (x = 0 embed, 1..L the
    residual stream, L+1 final_norm) on one shard's tokens, and each slot placed at its
    declared layer with the median it measured there."""

    shard: str
    layers: list[str]
    medians: list[float]
    placed: list[tuple[int, str, int, float]]  # (slot, declared layer, x, measured median)


@dataclass(frozen=True)
class Measurements:
    slots: list[SlotNorms] = field(default_factory=list)
    curve: TargetCurve | None = None
    problems: list[str] = field(default_factory=list)
    probe: tuple[ProbeEstimate, ...] = ()


def measure(run: CheckRun) -> Measurements:
    """What the run's families measured (:attr:`.run.UnitResult.measured`), in the shape the
    plots read. Reads no shard and runs no model: a plot the families did not measure for
    (no norms on a shard, no target curve) is left out."""
    problems = [str(u.measured["problem"]) for u in run.units if "problem" in u.measured]
    probe: tuple[ProbeEstimate, ...] = ()
    curve = None
    for u in run.units:
        if "estimates" in u.measured and not probe:
            from ..models.acceptance import Estimate

            probe = tuple(Estimate.from_dict(e) for e in u.measured["estimates"])
        if "curve" in u.measured and curve is None:
            c = u.measured["curve"]
            placed = [(int(i), str(layer), int(x), float(m)) for i, layer, x, m in c["placed"]]
            curve = TargetCurve(str(c["shard"]), list(c["layers"]), list(c["medians"]), placed)
    spec = run.contract.training
    if spec is None:
        return Measurements(problems=problems, probe=probe)
    medians: dict[int, list[tuple[str, float]]] = {i: [] for i in range(len(spec.slots))}
    for u in run.units:
        for i, median in enumerate(u.measured.get("medians", ())):
            if i in medians and median is not None:
                medians[i].append((u.shard, float(median)))
    slots = [
        SlotNorms(
            s.index, str(s.layer), None if s.norm is None else (s.norm.low, s.norm.high), medians[i]
        )
        for i, s in enumerate(spec.slots)
    ]
    return Measurements(slots, curve, problems, probe)
