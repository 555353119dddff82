"""The ``measured-acceptance`` family: the acceptance a running engine measures with the
draft loaded (:mod:`..capture.acceptance`), on the shards' own prompts, against the
contract's floor ``serving.min_accept_length``; the ``measure`` command shares it.

A shard's prompt is its ids before the first token its loss mask trains on (where the reply
the draft learned to predict begins); a shard without a mask, or trained from its first
token, gives none and is named in a note.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..findings import Finding, RuleCode, finding
from .family import CheckFamily

if TYPE_CHECKING:
    from ..capture.acceptance import Measured
    from ..contract.model import Contract
    from ..errors import CaptureError
    from ..models.acceptance import Estimate
    from .unit import MeasureSettings, Resources, Unit

KEY = "serving.min_accept_length"


@dataclass(frozen=True)
class Prompts:
    ids: list[list[int]]
    shards: list[str]  # the label of the shard each prompt came from
    skipped: list[str] = field(default_factory=list)  # "label: why"


def shard_prompts(contract: Contract, ms: MeasureSettings) -> Prompts:
    """The prompts of the sampled shards (UsageError where no shard exists)."""
    from ..capture.acceptance import prompt_of
    from ..shards.discovery import shard_paths
    from ..shards.reading import comparable
    from ..shards.shard import Shard

    fmt = contract.training.format if contract.training is not None else "auto"
    out = Prompts([], [])
    for path, label in shard_paths(contract, list(ms.shards) or None, ms.sample, ms.seed):
        shard = Shard.load(path, label, fmt, None)
        sample = shard.sample
        if sample is None:
            out.skipped.append(f"{label}: unreadable ({shard.error})")
            continue
        ids = None if sample.ids is None else comparable(sample.ids)
        mask = None if sample.mask is None else comparable(sample.mask)
        if ids is None or ids.ndim != 1 or ids.dtype.kind != "i":
            out.skipped.append(f"{label}: no one-dimensional integer input_ids")
            continue
        prompt = prompt_of(ids.tolist(), None if mask is None else mask.reshape(-1).tolist())
        if prompt is None:
            why = "no loss mask" if mask is None else "its loss mask leaves no prompt before it"
            out.skipped.append(f"{label}: {why}")
            continue
        out.ids.append(prompt)
        out.shards.append(label)
    return out


def steps_of(measured: Measured) -> int | None:
    """The draft tokens per round the engine ran (K), where its counters tell."""
    c = measured.counts
    if c.per_position is not None:
        return len(c.per_position)
    if measured.engine == "sglang" and c.rounds:
        return c.drafted // c.rounds
    return None


def probe_estimates(
    contract: Contract,
    prompts: list[list[int]],
    new_tokens: int,
    steps: int,
    target_dir: Path,
    draft_path: Path,
) -> list[Estimate]:
    """The probe on the same prompts: the target's greedy continuation of each by
    ``new_tokens``, chains of ``steps`` from the engine's first round on (aux states of the
    prompt, the first generated token embedded), per layout (``layouts_of``)."""
    import torch

    from ..models.acceptance import Chains, draft_dir, greedy_sequences, layouts_of
    from ..models.draft_model import EagleDraft
    from ..models.inputs import unfit
    from ..models.target import TargetModel

    target = TargetModel.open(target_dir)
    folder = draft_dir(draft_path)
    draft = EagleDraft.load(folder)
    layouts = layouts_of(contract, folder, target.num_layers, target.arch, [], "sglang")
    chains = Chains(draft, target.module, layouts, steps)
    chains.refuse_unfit(target.hidden_size)
    sequences, firsts = [], []
    for p in prompts:
        ids = torch.tensor(p, dtype=torch.long)
        if unfit(ids, target) is not None:
            continue
        sequences += greedy_sequences(target.module, [ids], len(p) + new_tokens)
        firsts.append(len(p) - 1)
    return chains.estimates_from(sequences, firsts)


def served_estimate(estimates: list[Estimate]) -> Estimate | None:
    """The estimate of the layout the engine serves: the first row not the trainer's alone."""
    return next((e for e in estimates if e.name != "trainer"), None)


def findings_of(
    contract: Contract, measured: Measured, estimates: list[Estimate] | None = None
) -> list[Finding]:
    """EC725 when the measured accept length is exactly 1.0 or exactly K + 1 (nothing
    measured: checks/profile.py ``saturated``); EC712 when it is under
    ``serving.min_accept_length``, a warning when only a lower bound is known and it is under."""
    from .profile import saturated

    exact = (
        []
        if measured.lower_bound
        else saturated(
            measured.accept_length,
            steps_of(measured),
            f"{measured.engine}'s measured accept length",
            contract=contract,
        )
    )
    return exact + _below_floor(contract, measured, estimates)


def _below_floor(
    contract: Contract, measured: Measured, estimates: list[Estimate] | None
) -> list[Finding]:
    serving = contract.serving
    floor = serving.min_accept_length if serving is not None else None
    length = measured.accept_length
    if floor is None or length is None or length >= floor:
        return []
    c = measured.counts
    bound = "at least " if measured.lower_bound else ""
    served = served_estimate(estimates or [])
    if measured.lower_bound:
        hint = "this is a lower bound: launch llama-server with --metrics for the exact rounds"
    elif served is not None and served.accept_length >= floor:
        hint = (
            f"the probe estimates {served.accept_length:.3f} for the served layout "
            f"({served.name}): the engine runs the draft otherwise than the probe does "
            "(its draft length, its aux layers: eagle-contract resolve; the GGUF conversion)"
        )
    elif served is not None:
        trainer = estimates[0] if estimates else None
        hint = (
            f"the probe also estimates {served.accept_length:.3f} for the served layout "
            f"({served.name})"
            + (
                f", the trainer's layout {trainer.accept_length:.3f}: fix the layout (EC501)"
                if trainer is not None and trainer is not served and trainer.name == "trainer"
                else ": the draft itself accepts too little (retrain or lower the floor)"
            )
        )
    else:
        hint = (
            "check the served layout (eagle-contract check, EC501) and compare with the "
            "probe's estimate on the same prompts (eagle-contract measure ... --draft DIR "
            "--target-model DIR)"
        )
    return [
        finding(
            "EC712",
            f"{measured.engine} measured an accept length of {bound}{length:.3f} per round "
            f"({c.accepted} accepted draft tokens in {c.rounds} rounds, "
            f"{measured.prompts} prompts), below the floor {floor}",
            contract=contract,
            key=KEY,
            expected=f">= {floor}",
            found=f"{bound}{length:.3f}",
            hint=hint,
            details=render(measured, estimates or []),
            severity="warning" if measured.lower_bound else "error",
            extra={"measured": measured.to_dict()},
        )
    ]


_UNREACHABLE: RuleCode = "EC715"


def error_finding(contract: Contract, exc: CaptureError, engine: str) -> Finding:
    """A failed measurement as a finding: EC713 and EC714 as raised, EC705 (transport) as
    EC715."""
    from ..errors import ServerUnreachable
    from ..findings import UNREACHABLE

    code: RuleCode = exc.code if exc.code in ("EC713", "EC714") else _UNREACHABLE
    gone = {UNREACHABLE: True} if isinstance(exc, ServerUnreachable) else None
    return finding(
        code, f"{engine}: {exc.message}", contract=contract, key=KEY, hint=exc.hint, extra=gone
    )


def no_prompts(contract: Contract, prompts: Prompts) -> Finding:
    shown = "; ".join(prompts.skipped[:3]) + ("; ..." if len(prompts.skipped) > 3 else "")
    return finding(
        "EC716",
        f"no sampled shard gives a prompt ({len(prompts.skipped)} skipped: {shown})",
        contract=contract,
        key=KEY,
        hint="measuring needs shards whose loss mask marks the reply (the prompt is the ids "
        "before its first trained token)",
    )


def render(measured: Measured, estimates: list[Estimate]) -> str:
    """The measurement as text: engine, accept length, rate, per position, the probe's rows."""
    from ..capture.acceptance import DEFINITION
    from ..tables import table

    c = measured.counts
    length, rate, per = measured.accept_length, measured.acceptance_rate, measured.per_position
    bound = " (a lower bound)" if measured.lower_bound else ""
    lines = [
        f"{measured.engine} at {measured.url}: {measured.prompts} prompts x "
        f"{measured.new_tokens} new tokens, greedy",
        (
            f"accept length {length:.3f}{bound} per round (1 + {c.accepted} accepted / "
            f"{c.rounds} rounds)"
            if length is not None
            else "accept length unknown (no rounds)"
        )
        + ("" if rate is None else f"; acceptance rate {rate:.3f} ({c.accepted}/{c.drafted})"),
        f"rounds from: {measured.rounds_from}",
    ]
    if per is not None:
        lines.append("per position: " + " ".join(f"{p:.3f}" for p in per))
    if measured.engine_accept_length is not None:
        lines.append(f"engine's own accept length: {measured.engine_accept_length:.3f}")
    if estimates:
        rows = []
        for e in estimates:
            reach, cum = 1.0, []
            for p in e.per_step:
                reach *= p
                cum.append(f"{reach:.3f}")
            gap = "" if length is None else f"{length - e.accept_length:+.3f}"
            rows.append([e.name, f"{e.accept_length:.3f}", gap, " ".join(cum), e.chains])
        lines.append(
            table(
                ["probe layout", "estimate", "measured-est", "per position", "chains"],
                rows,
                right=(1, 2, 4),
            )
        )
    lines += [f"note: {n}" for n in measured.notes]
    lines.append(DEFINITION)
    return "\n".join(lines)


def measure_contract(
    contract: Contract, ms: MeasureSettings, prompts: Prompts | None = None
) -> tuple[Measured | None, list[Finding]]:
    """Measure on the contract's sampled prompts (or ``prompts``): the measurement (None
    when it failed) and its findings."""
    from ..capture.acceptance import measure
    from ..errors import CaptureError

    prompts = prompts or shard_prompts(contract, ms)
    if not prompts.ids:
        return None, [no_prompts(contract, prompts)]
    try:
        measured = measure(ms.engine, ms.url, prompts.ids, ms.new_tokens, ms.timeout)
    except CaptureError as exc:
        return None, [error_finding(contract, exc, ms.engine)]
    return measured, findings_of(contract, measured)


def _measured(runner: Resources, unit: Unit) -> tuple[Measured | None, list[Finding]]:
    ms = runner.settings.measure
    assert ms is not None  # the planner runs this family only with a measure URL
    return runner.once(
        ("measured", unit.contract.path), lambda: measure_contract(unit.contract, ms)
    )


def _run(runner: Resources, unit: Unit) -> list[Finding]:
    return _measured(runner, unit)[1]


def _measure(runner: Resources, unit: Unit) -> dict[str, Any]:
    measured = _measured(runner, unit)[0]
    return {} if measured is None else {"measured": measured.to_dict()}


FAMILY = CheckFamily(
    "measured-acceptance",
    "contract",
    "the acceptance a running engine measures with the draft loaded, against the floor",
    codes=("EC712", "EC713", "EC714", "EC715", "EC716"),
    keys=(KEY,),
    run=_run,
    measure=_measure,
    needs=frozenset({"serving", "floor", "measure"}),
)
