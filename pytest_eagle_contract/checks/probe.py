"""The ``probe`` family: gates a contract's floor (``serving.min_accept_length``,
``serving.max_accept_drop``) on the acceptance estimates of :mod:`..models.acceptance`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..findings import Finding, RuleCode, finding
from .family import CheckFamily

if TYPE_CHECKING:
    from ..contract.model import Contract, ServingSpec
    from ..models.acceptance import Estimate
    from .unit import Resources, Unit


def floor_findings(contract: Contract, estimates: list[Estimate]) -> list[Finding]:
    """EC906 under ``serving.min_accept_length``; EC907 past ``serving.max_accept_drop``."""
    from ..models.acceptance import CONVENTION, STEPS

    serving = contract.serving
    if serving is None or not estimates:
        return []
    quoted = "; ".join(e.quote() for e in estimates)
    trainer = estimates[0] if contract.training is not None else None
    return [
        finding(
            code,
            message,
            contract=contract,
            key=_LIMIT[code],
            expected=expected,
            found=found,
            hint=_hint(e, trainer),
            details=f"probe ({STEPS}-token greedy chains): {quoted}. {CONVENTION}",
        )
        for e, code, message, expected, found in _shortfalls(serving, estimates, trainer)
    ]


_LIMIT: dict[RuleCode, str] = {
    "EC906": "serving.min_accept_length",
    "EC907": "serving.max_accept_drop",
}  # the contract key each probe rule holds a served layout to
_Shortfall = tuple["Estimate", RuleCode, str, str, str]  # estimate, code, message, expected, found


def _shortfalls(
    serving: ServingSpec, estimates: list[Estimate], trainer: Estimate | None
) -> list[_Shortfall]:
    """Each served layout under the floor (EC906), then each past the allowed drop (EC907)."""
    out: list[_Shortfall] = []
    floor = serving.min_accept_length
    if floor is not None:
        for e in estimates:
            if e.name != "trainer" and e.accept_length < floor:
                out.append(
                    (
                        e,
                        "EC906",
                        f"estimated acceptance length {e.accept_length:.3f} under {e.name}, "
                        f"below the floor {floor}",
                        f">= {floor}",
                        f"{e.accept_length:.3f}",
                    )
                )
    drop = serving.max_accept_drop
    if drop is not None and trainer is not None and trainer.accept_length > 0:
        for e in estimates[1:]:
            lost = (trainer.accept_length - e.accept_length) / trainer.accept_length
            if lost > drop:
                out.append(
                    (
                        e,
                        "EC907",
                        f"{e.name} accepts {e.accept_length:.3f} tokens per target forward, "
                        f"the trainer's layout {trainer.accept_length:.3f}: {lost:.1%} less",
                        f"a drop <= {drop:.1%}",
                        f"{lost:.1%}",
                    )
                )
    return out


def _hint(served: Estimate, trainer: Estimate | None) -> str:
    if trainer is not None and served.layers != trainer.layers:
        return (
            f"{served.name} feeds {', '.join(map(str, served.layers))}, the draft was trained "
            f"on {', '.join(map(str, trainer.layers))}: fix the layout (EC501) before the draft"
        )
    return "the layouts agree: the draft itself accepts too little (retrain or lower the floor)"


def _run(runner: Resources, unit: Unit) -> list[Finding]:
    from ..models.acceptance import TargetMismatch

    try:
        estimates = runner.estimates(unit.contract, unit.roots)
    except TargetMismatch as exc:  # not random prompts in place of the shards': a finding
        return [
            finding(
                exc.code,
                exc.message,
                contract=unit.contract,
                key="target.model",
                file=str(exc.path),
                expected=exc.expected,
                found=exc.found,
                hint=exc.hint,
            )
        ]
    return floor_findings(unit.contract, estimates)


def measured_estimates(runner: Resources, unit: Unit) -> dict[str, Any]:
    """The estimates the gate judged (the runner keeps them: not run again)."""
    return {"estimates": [e.to_dict() for e in runner.estimates(unit.contract, unit.roots)]}


FAMILY = CheckFamily(
    "probe",
    "contract",
    "the draft's estimated acceptance length under each served layout, against the floor",
    codes=("EC906", "EC907", "EC625"),
    keys=("serving.min_accept_length", "serving.max_accept_drop", "serving.draft_config"),
    run=_run,
    measure=measured_estimates,
    needs=frozenset({"serving", "target", "floor"}),
)
