"""What one contract's run found, in the shape every report reads: :class:`CheckRun`."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..contract.model import Contract
    from ..findings import Finding
    from ..plan.planner import Outcome


@dataclass(frozen=True)
class UnitResult:
    """One unit's findings, and what its family measured (:meth:`..plan.planner.Runner.check`):
    ``shard`` is the shard's label ('' for a contract-level unit)."""

    check: str
    shard: str
    findings: list[Finding]
    path: Path | None = None
    measured: dict[str, Any] = field(default_factory=dict)


class ProbeEstimate(Protocol):
    """What the reports read of a probe's estimate (the ``probe`` family's Estimate): the
    layout's name, the acceptance length, the acceptance rate per draft step."""

    @property
    def name(self) -> str: ...

    @property
    def accept_length(self) -> float: ...

    @property
    def per_step(self) -> tuple[float, ...]: ...


@dataclass(frozen=True)
class CheckRun:
    contract: Contract
    units: list[UnitResult]
    findings: list[Finding]
    summary: str
    shard_paths: list[tuple[Path, str]] = field(default_factory=list)
    interrupted: bool = False  # the run was stopped (Ctrl-C) before every unit ran

    @property
    def ok(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    @property
    def not_run(self) -> list[str]:
        """Why checks that apply did not run (EC009): empty when the verdict is complete."""
        from ..findings import NOT_RUN

        return [
            f"{f.file}: {f.message}" if f.file else f.message
            for f in self.findings
            if f.code == NOT_RUN
        ]

    @property
    def complete(self) -> bool:
        """Every unit ran, and every check that applies ran in it."""
        return not self.interrupted and not self.not_run

    @property
    def verdict(self) -> str:
        """passed, "passed, incomplete" (a check that applies did not run), INTERRUPTED or
        FAILED."""
        if not self.ok:
            return "FAILED"
        if self.interrupted:
            return "INTERRUPTED"
        return "passed, incomplete" if self.not_run else "passed"

    @classmethod
    def of(cls, contract: Contract, outcome: Outcome, summary: str) -> CheckRun:
        measured = outcome.measured or [{} for _ in outcome.units]
        units = [
            UnitResult(u.check, u.label, fs, u.shard, m)
            for u, fs, m in zip(outcome.units, outcome.per_unit, measured)
        ]
        return cls(contract, units, outcome.findings, summary, shard_paths=_shards(units))


def _shards(units: list[UnitResult]) -> list[tuple[Path, str]]:
    """The run's shards, each once, in order."""
    seen: dict[Path, str] = {}
    for u in units:
        if u.path is not None:
            seen.setdefault(u.path, u.shard)
    return list(seen.items())


def accept_lengths(findings: Sequence[Finding]) -> dict[str, float]:
    """Estimated acceptance length per layout, where findings carry it in ``extra``:
    ``estimates`` (the probe's, each with ``name`` and ``accept_length``) or one
    ``accept_length`` (with ``layout`` or ``name``, else the rule code)."""
    out: dict[str, float] = {}
    for f in findings:
        listed = f.extra.get("estimates")
        for e in [*(listed if isinstance(listed, list) else []), f.extra]:
            value = e.get("accept_length") if isinstance(e, dict) else None
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out.setdefault(_name(e, f.code), float(value))
    return out


def _name(e: dict[str, Any], default: str) -> str:
    name = e.get("layout", e.get("name"))
    return name if isinstance(name, str) and name else default


def content_sha256(path: Path) -> str:
    """sha256 of the contract file's bytes (empty bytes when it is gone)."""
    try:
        data = path.read_bytes()
    except OSError:
        data = b""
    return hashlib.sha256(data).hexdigest()
