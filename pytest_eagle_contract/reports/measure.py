"""What the HTML report plots: per slot, every shard's median norm against the contract's
bounds; with the target's weights, the target's per-layer norm curve with the slots on it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..plan.planner import Runner
    from ..shards.shard import Shard
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


def measure(run: CheckRun, runner: Runner) -> Measurements:
    """Read the run's shards again (through ``runner``, so cached ones are not) and measure."""
    from ..errors import EagleContractError

    problems: list[str] = []
    probe = _probe(run, runner, problems)
    spec = run.contract.training
    if spec is None:
        return Measurements(problems=problems, probe=probe)
    medians: dict[int, list[tuple[str, float]]] = {i: [] for i in range(len(spec.slots))}
    usable: Shard | None = None
    for path, label in run.shard_paths:
        try:
            shard = runner.shard(run.contract, path, label)
            if shard.error is not None or shard.split_problems:
                continue
            for i, slot in enumerate(shard.slots[: len(spec.slots)]):
                median = shard.stats(i).median if slot.array.dim() == 2 else math.nan
                if math.isfinite(median):
                    medians[i].append((label, median))
        except (EagleContractError, ValueError) as exc:
            problems.append(f"{label}: {exc}")
            continue
        if usable is None and shard.input_ids is not None:
            usable = shard
    slots = [
        SlotNorms(
            s.index, str(s.layer), None if s.norm is None else (s.norm.low, s.norm.high), medians[i]
        )
        for i, s in enumerate(spec.slots)
    ]
    curve = None
    if usable is not None:
        try:
            curve = _curve(run, runner, usable)
        except EagleContractError as exc:
            problems.append(f"target model: {exc}")
    return Measurements(slots, curve, problems, probe)


def _probe(run: CheckRun, runner: Runner, problems: list[str]) -> tuple[ProbeEstimate, ...]:
    """The probe's estimates where its family ran (run again: seeded, the gate's numbers)."""
    if not any(u.check == "probe" for u in run.units):
        return ()
    from ..errors import EagleContractError
    from ..models.acceptance import probe_contract

    try:
        target = runner.target(run.contract)
        return () if target is None else tuple(probe_contract(run.contract, target))
    except EagleContractError as exc:
        problems.append(f"probe: {exc}")
        return ()


def _curve(run: CheckRun, runner: Runner, shard: Shard) -> TargetCurve | None:
    from ..layers import Layer
    from ..models.reference import capture_canonical
    from ..shards.stats import norm_stats

    target = runner.target(run.contract)
    spec = run.contract.training
    ids = shard.input_ids
    if target is None or spec is None or ids is None:
        return None
    from ..models.inputs import unfit

    if unfit(ids, target) is not None:
        return None  # the shard's own checks say why the target may not run on it
    states = capture_canonical(target.module, ids.long())
    order = [Layer(k) for k in range(target.num_layers + 1)] + [Layer(-1)]
    x_of = {layer: x for x, layer in enumerate(order)}
    placed = []
    for i, slot in enumerate(spec.slots):
        if i < len(shard.slots) and slot.layer in x_of:
            median = shard.stats(i).median
            placed.append((i, str(slot.layer), x_of[slot.layer], float(median)))
    return TargetCurve(
        shard.label,
        [str(x) for x in order],
        [norm_stats(states[layer].float()).median for layer in order],
        placed,
    )
