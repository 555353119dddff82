"""Turn a contract into units of work (one check family on the contract, or on one sampled
shard) and run them.

The pytest plugin makes each unit an item; the CLI runs them in a loop. Which families run,
and what each needs, comes from the check registry (:mod:`.registry`), so the two
shells plan alike and refuse alike. No check logic lives here or in either shell.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..checks.unit import Settings, Unit
from ..contract.model import Contract
from ..errors import EagleContractError, UsageError
from ..findings import Finding, finding
from ..shards.discovery import DEFAULT_SAMPLE, Sampling, roots_of, shard_paths

T = TypeVar("T")

if TYPE_CHECKING:
    from ..capture.files import CaptureIndex
    from ..checks.family import CheckFamily, Need
    from ..models.acceptance import Estimate
    from ..models.target import TargetModel
    from ..pool import Kind
    from ..shards.shard import Shard


def _available(
    contract: Contract,
    target_model: Path | None,
    capture: bool,
    serving_target: Path | None = None,
    tokenizer: Path | None = None,
    conversations: Path | None = None,
    measure: bool = False,
) -> set[Need]:
    have: set[Need] = set()
    if contract.training is not None:
        have.add("training")
    if contract.serving is not None:
        have.add("serving")
        if (contract.serving.min_accept_length, contract.serving.max_accept_drop) != (None, None):
            have.add("floor")
    if target_model is not None or contract.target.model is not None:
        have.add("target")
    if capture:
        have.add("capture")
    if serving_target is not None or (contract.serving and contract.serving.target_model):
        have.add("serving-target")
    tk = contract.tokenizer
    if tokenizer is not None or tk is not None:
        have.add("tokenizer")
    if tokenizer is not None or (tk is not None and tk.path is not None):
        have.add("tokenizer-dir")
    if conversations is not None or (tk is not None and tk.conversations is not None):
        have.add("conversations")
    if measure:
        have.add("measure")
    return have


def families(
    contract: Contract,
    checks: Iterable[str] | None = None,
    *,
    without: Iterable[str] = (),
    target_model: Path | None = None,
    capture: bool = False,
    reference: bool = False,
    serving_target: Path | None = None,
    tokenizer: Path | None = None,
    conversations: Path | None = None,
    measure: bool = False,
) -> list[CheckFamily]:
    """The families to run, in registry order.

    ``checks=None``: every default family whose needs are met, less ``without`` (e.g.
    ``--no-sharpness``); the rest are left out quietly. Named ``checks``: exactly those, and
    a family whose needs are not met is a :class:`UsageError` saying what to add.
    """
    from ..checks.family import NEED_HOW
    from .registry import BY_NAME, FAMILIES, SELECTABLE

    have = _available(
        contract, target_model, capture, serving_target, tokenizer, conversations, measure
    )
    if reference and "target" not in have:
        raise UsageError("--reference-capture needs " + NEED_HOW["target"])
    named = list(checks) if checks is not None else None
    skip = set(without)
    unknown = [c for c in [*(named or []), *skip] if c not in SELECTABLE]
    if unknown:
        raise UsageError(f"unknown checks {unknown}: choose from {', '.join(SELECTABLE)}")
    if named is None:
        return [
            f
            for f in FAMILIES
            if f.default and f.selectable and f.needs <= have and f.name not in skip
        ]
    if not named:
        raise UsageError("--checks is empty: name at least one check")
    for name in named:
        missing = sorted(BY_NAME[name].needs - have)
        if missing:
            raise UsageError(f"check {name!r} needs " + " and ".join(NEED_HOW[m] for m in missing))
    return [f for f in FAMILIES if f.name in named]


def plan(
    contract: Contract,
    shards: Iterable[Path] | None = None,
    sample: Sampling = DEFAULT_SAMPLE,
    seed: int = 0,
    checks: Iterable[str] | None = None,
    target_model: Path | None = None,
    capture: bool = False,
    without: Iterable[str] = (),
    reference: bool = False,
    serving_target: Path | None = None,
    tokenizer: Path | None = None,
    conversations: Path | None = None,
    measure: bool = False,
) -> list[Unit]:
    """All units of a contract: contract-level families first, then the shard families
    grouped by shard so each shard is read once.

    Shard paths given here that do not exist raise :class:`UsageError`; a contract whose
    own ``training.shards`` holds nothing gets a failing ``shards`` unit instead, so the
    contract-level checks still run.
    """
    chosen = families(
        contract,
        checks,
        without=without,
        target_model=target_model,
        capture=capture,
        reference=reference,
        serving_target=serving_target,
        tokenizer=tokenizer,
        conversations=conversations,
        measure=measure,
    )
    per_contract = [f for f in chosen if f.scope == "contract"]
    per_shard = [f for f in chosen if f.scope == "shard"]
    found: list[tuple[Path, str]] = []
    problem: list[Unit] = []
    with_evidence = (
        "layout",
        "target-identity",
        "token-parity",
    )  # contract units that read a first shard
    if per_shard or any(f.name in with_evidence for f in per_contract):
        try:
            found = shard_paths(contract, shards, sample, seed)
        except UsageError as exc:
            if shards:
                raise
            if per_shard:
                problem.append(Unit(contract, "shards", problem=str(exc)))
    first = found[0] if found else (None, "")
    roots = roots_of(contract, shards)
    units = [
        Unit(contract, f.name, evidence=first[0], evidence_label=first[1], roots=roots)
        if f.name in with_evidence
        else Unit(contract, f.name, roots=roots)
        for f in per_contract
    ]
    units += problem
    units += [Unit(contract, f.name, path, label) for path, label in found for f in per_shard]
    return units


class Runner:
    """Runs units and holds what they share (the :class:`..checks.unit.Resources` the
    families ask for): the last few shards read (so a shard's families share one read), the
    target model and the capture files, opened once."""

    def __init__(self, settings: Settings | None = None, keep: int = 2) -> None:
        self.settings = settings or Settings()
        self._cache: OrderedDict[tuple[Path, str, int], Shard] = OrderedDict()
        self._keep = keep
        self._targets: dict[Path, TargetModel] = {}
        self._captures: CaptureIndex | None = None
        self._estimates: dict[tuple[Path, tuple[Path, ...]], list[Estimate] | Exception] = {}
        self._asked: set[object] = set()
        self._once: dict[object, Any] = {}

    def captures(self) -> CaptureIndex:
        """The capture files, indexed once per run."""
        if self._captures is None:
            from ..capture.files import load_captures

            self._captures = load_captures(self.settings.captures)
            if not len(self._captures) and not self._captures.problems:
                raise UsageError(
                    "no capture files under "
                    + ", ".join(map(str, self.settings.captures))
                    + ": record them with eagle-contract record"
                )
        return self._captures

    def unreported_capture_problems(self, index: CaptureIndex) -> list[str]:
        """Broken capture files, reported with the first unit that looks at them."""
        return list(index.problems) if self.first_time("capture problems") else []

    def target(self, contract: Contract) -> TargetModel | None:
        """The target model (override, else the contract's), opened once."""
        path = self.settings.target_model or contract.target.model
        return None if path is None else self.open_target(path)

    def serving_target(self, contract: Contract) -> Path | None:
        """The serving checkpoint's folder (override, else the contract's)."""
        serving = contract.serving.target_model if contract.serving else None
        return self.settings.serving_target_model or serving

    def open_target(self, path: Path) -> TargetModel:
        """A target model directory, opened (config and tensor index) once per run."""
        if path not in self._targets:
            from ..models.target import TargetModel

            self._targets[path] = TargetModel.open(path)
        return self._targets[path]

    def reference(self, contract: Contract) -> bool:
        given = self.settings.reference
        return contract.target.reference_capture if given is None else given

    def shard(self, contract: Contract, path: Path, label: str) -> Shard:
        from ..shards.shard import Shard

        assert contract.training is not None
        key = (path, contract.training.format, contract.target.hidden_size)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        shard = Shard.load(path, label, contract.training.format, contract.target.hidden_size)
        self._cache[key] = shard
        while len(self._cache) > self._keep:
            self._cache.popitem(last=False)
        return shard

    def forget(self) -> None:
        """Drop the shards kept (a worker holds one shard at a time)."""
        self._cache.clear()

    def shard_of(self, unit: Unit) -> Shard:
        """The (read, cached) shard of a shard unit."""
        assert unit.shard is not None
        return self.shard(unit.contract, unit.shard, unit.label)

    def estimates(self, contract: Contract, roots: Sequence[Path] = ()) -> list[Estimate]:
        """The acceptance probe's estimates for ``contract`` on prompts from the shards
        under ``roots`` (else the contract's), run once per run; a coded refusal (EC625: the
        target is not the shards') is raised again, not run again."""
        key = (contract.path, tuple(roots))
        if key not in self._estimates:
            from ..errors import CodedError
            from ..models.acceptance import probe_contract

            target = self.target(contract)
            assert target is not None  # the planner runs the probe only with a target
            try:
                self._estimates[key] = probe_contract(contract, target, roots)
            except CodedError as exc:
                self._estimates[key] = exc
        found = self._estimates[key]
        if isinstance(found, BaseException):
            raise found
        return found

    def once(self, key: object, make: Callable[[], T]) -> T:
        """``make()``, made once per run for ``key`` (what two steps of one family share)."""
        if key not in self._once:
            self._once[key] = make()
        return self._once[key]  # type: ignore[no-any-return]

    def first_time(self, key: object) -> bool:
        if key in self._asked:
            return False
        self._asked.add(key)
        return True

    def check(self, unit: Unit) -> Checked:
        """One unit's findings, waived codes removed, and what its family measured for the
        reports. A shard that cannot be read fails each of its units with its read error
        (EC001-EC003) and measures nothing; a measure that cannot be taken says why."""
        from .registry import BY_NAME

        family = BY_NAME[unit.check]
        error = self.shard_of(unit).error if family.scope == "shard" else None
        if error is not None:
            found = [
                finding(
                    error.code,
                    error.message,
                    contract=unit.contract,
                    key="training.shards",
                    file=unit.label,
                    hint=error.hint,
                )
            ]
        else:
            found = family.execute(self, unit)
        findings = [f for f in found if f.code not in unit.contract.waivers]
        if family.measure is None or error is not None:
            return Checked(findings)
        try:
            return Checked(findings, family.measure(self, unit))
        except (EagleContractError, ValueError) as exc:
            return Checked(findings, {"problem": f"{unit.label or unit.check}: {exc}"})

    def run(self, unit: Unit) -> list[Finding]:
        """:meth:`check`'s findings alone."""
        return self.check(unit).findings


@dataclass(frozen=True)
class Checked:
    """One unit's findings, and what its family measured for the reports (plain JSON)."""

    findings: list[Finding]
    measured: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """What running a list of units found (``measured[i]``: what unit i's family measured)."""

    units: list[Unit]
    per_unit: list[list[Finding]]
    measured: list[dict[str, Any]] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        from ..render import unique

        return unique(f for found in self.per_unit for f in found)

    @property
    def failed(self) -> bool:
        return any(f.severity == "error" for f in self.findings)

    @property
    def shards(self) -> int:
        """The shard files read: the shard units', and those a contract-level family
        compared (:data:`..checks.unit.COMPARED`)."""
        from ..checks.unit import shards_counted

        return shards_counted((u.shard for u in self.units), self.measured)

    @property
    def unreachable(self) -> bool:
        """The server was never reached: every capture unit holds an EC705 of a server
        nothing answered at, and no other error was found (exit 69, not 1: the run says
        nothing about the data)."""
        from ..findings import UNREACHABLE

        capture = [found for u, found in zip(self.units, self.per_unit) if u.check == "capture"]
        errors = [f for f in self.findings if f.severity == "error"]
        return (
            bool(capture)
            and all(any(f.extra.get(UNREACHABLE) for f in found) for found in capture)
            and all(f.extra.get(UNREACHABLE) for f in errors)
        )


def run_units(units: list[Unit], runner: Runner | None = None, workers: int = 1) -> Outcome:
    runner = runner or Runner()
    per_unit: list[list[Finding]] = [[] for _ in units]
    measured: list[dict[str, Any]] = [{} for _ in units]
    for i, checked in iter_units(units, runner, workers):
        per_unit[i], measured[i] = checked.findings, checked.measured
    return Outcome(units, per_unit, measured)


def iter_units(
    units: Sequence[Unit], runner: Runner, workers: int = 1, kind: Kind = "process"
) -> Iterator[tuple[int, Checked]]:
    """``(index, checked)`` of each unit as it finishes.

    With ``workers`` > 1 the families that need only the shard run in a pool, one task per
    shard file (its families share one read); the rest run here, with the shards they read
    (the layout's evidence shard) kept here so that no file is read twice."""
    from .registry import BY_NAME

    def alone(u: Unit) -> bool:
        family = BY_NAME[u.check]
        return u.shard is not None and family.run is None and family.scope == "shard"

    here = {p for u in units if not alone(u) for p in (u.shard, u.evidence) if p is not None}
    groups: dict[Path, list[int]] = {}
    for i, u in enumerate(units):
        if workers > 1 and alone(u) and u.shard not in here:
            groups.setdefault(u.shard, []).append(i)  # type: ignore[arg-type]
    if len(groups) < 2:
        groups = {}
    pooled = {i for idx in groups.values() for i in idx}
    from ..pool import executor, imap, single_threaded

    if not groups:
        for i, u in enumerate(units):
            if alone(u):
                with single_threaded():  # as a worker would
                    checked = runner.check(u)
            else:
                checked = runner.check(u)
            yield i, checked
        return

    tasks = [(runner.settings, [units[i] for i in idx], idx) for idx in groups.values()]
    with executor(min(workers, len(tasks)), kind) as pool:
        done = imap(_run_group, tasks, pool)  # the workers start now, beside the units here
        for i, u in enumerate(units):
            if i not in pooled:
                yield i, runner.check(u)
        for (_, _, indices), future in done:
            yield from zip(indices, future.result())


_local = threading.local()


def _run_group(task: tuple[Settings, list[Unit], list[int]]) -> list[Checked]:
    """A pool task: the units of one shard, on this worker's runner, the shard then dropped."""
    settings, units, _ = task
    runner: Runner | None = getattr(_local, "runner", None)
    if runner is None or runner.settings != settings:
        runner = _local.runner = Runner(settings, keep=1)
    try:
        return [runner.check(u) for u in units]
    finally:
        runner.forget()
