"""Turn a contract into units of work (one check on one sampled shard) and run them.

The pytest plugin makes each unit an item; the CLI runs them in a loop. No check logic
lives in either shell.
"""

from __future__ import annotations

import random
import re
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .checks.shard_checks import SHARD_CHECKS, Shard
from .contract.model import Contract
from .errors import UsageError
from .findings import Finding
from .shards.formats import FORMATS, SHARD_GLOBS

if TYPE_CHECKING:
    from .capture.core import CaptureIndex
    from .models.target import TargetModel

DEFAULT_SAMPLE = 10
Sampling = int | None  # None: every shard


@dataclass(frozen=True)
class Unit:
    """One check on one shard (or on the contract as a whole when ``shard`` is None)."""

    contract: Contract
    check: str
    shard: Path | None = None
    label: str = ""
    evidence: Path | None = None  # a sampled shard whose norms back the layout hints
    evidence_label: str = ""
    problem: str = ""  # why there are no shards (the ``shards`` unit)

    @property
    def name(self) -> str:
        return f"{self.check}[{self.label}]" if self.shard is not None else self.check


def _natural_key(path: Path) -> list[object]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def discover(root: Path, format: str = "auto") -> list[Path]:
    """Every shard file under ``root`` (recursively), in natural order."""
    if root.is_file():
        return [root]
    if not root.exists():
        raise UsageError(f"shard path {root} does not exist")
    globs = FORMATS[format].globs if format != "auto" else SHARD_GLOBS
    found = {p for pattern in globs for p in root.rglob(pattern) if p.is_file()}
    return sorted(found, key=_natural_key)


def choose(paths: Sequence[Path], sample: Sampling, seed: int) -> list[Path]:
    """A deterministic, seeded sample of ``paths``, kept in natural order."""
    if sample is None or sample >= len(paths):
        return list(paths)
    picked = random.Random(seed).sample(range(len(paths)), sample)
    return [paths[i] for i in sorted(picked)]


def parse_sample(text: str | int | None) -> Sampling:
    if text is None:
        return DEFAULT_SAMPLE
    if isinstance(text, int):
        value = text
    elif text.strip().lower() == "all":
        return None
    else:
        try:
            value = int(text)
        except ValueError:
            raise UsageError(f"--sample takes a positive number or 'all', not {text!r}") from None
    if value < 1:
        raise UsageError(f"--sample takes a positive number or 'all', not {value}")
    return value


def shard_paths(contract: Contract, shards: Iterable[Path] | None, sample: Sampling,
                seed: int) -> list[tuple[Path, str]]:
    """The sampled shards of a contract with their display labels."""
    training = contract.training
    if training is None:
        return []
    roots = list(shards) if shards else ([training.shards] if training.shards else [])
    if not roots:
        raise UsageError(f"{contract.path}: no shards given: set training.shards in the contract "
                         "or pass shard paths")
    labelled: list[tuple[Path, str]] = []
    for root in roots:
        found = discover(root, training.format)
        if not found:
            raise UsageError(f"no shard files under {root} (format {training.format})")
        for path in found:
            label = path.relative_to(root).as_posix() if root.is_dir() else path.name
            labelled.append((path, label))
    keep = set(choose([p for p, _ in labelled], sample, seed))
    return [(p, label) for p, label in labelled if p in keep]


CONTRACT_CHECKS = ("layout",)
EVIDENCE = "evidence"  # per shard, when a target model is given
CAPTURE = "capture"  # per shard, when capture files or a live server are given
SHARPNESS = "sharpness"  # contract level: the plugin runs it; `check --sharpness` on request
CHECKS = (*CONTRACT_CHECKS, *SHARD_CHECKS, EVIDENCE, CAPTURE)


def plan(contract: Contract, shards: Iterable[Path] | None = None,
         sample: Sampling = DEFAULT_SAMPLE, seed: int = 0,
         checks: Iterable[str] = CHECKS, target_model: Path | None = None,
         capture: bool = False) -> list[Unit]:
    """All units of a contract: ``layout`` first (when the contract has both sides), then
    the shard checks grouped by shard so each shard is read once.

    Shard paths given here that do not exist raise :class:`UsageError`; a contract whose
    own ``training.shards`` holds nothing gets a failing ``shards`` unit instead, so the
    contract-level checks still run.
    """
    wanted = set(checks)
    if target_model is None and contract.target.model is None:
        wanted.discard(EVIDENCE)
    if not capture:
        wanted.discard(CAPTURE)
    unknown = wanted - {*CHECKS, SHARPNESS}
    if unknown:
        raise UsageError(f"unknown checks {sorted(unknown)}: choose from {', '.join(CHECKS)}")
    found: list[tuple[Path, str]] = []
    units: list[Unit] = []
    if wanted:
        try:
            found = shard_paths(contract, shards, sample, seed)
        except UsageError as exc:
            if shards:
                raise
            if wanted - {*CONTRACT_CHECKS, SHARPNESS} and contract.training is not None:
                units.append(Unit(contract, "shards", problem=str(exc)))
    if "layout" in wanted and contract.serving:
        first = found[0] if found else (None, "")
        units.insert(0, Unit(contract, "layout", evidence=first[0], evidence_label=first[1]))
    if SHARPNESS in wanted and contract.training is not None:
        units.insert(1 if units and units[0].check == "layout" else 0,
                     Unit(contract, SHARPNESS))
    per_shard = [c for c in (*SHARD_CHECKS, EVIDENCE, CAPTURE) if c in wanted]
    units += [Unit(contract, check, path, label) for path, label in found for check in per_shard]
    return units


class Runner:
    """Runs units, keeping the last few shards read so a shard's checks share one read."""

    def __init__(self, keep: int = 2, serving_args: str | None = None,
                 target_model: Path | None = None, reference: bool | None = None,
                 captures: Sequence[Path] = (), sglang_url: str | None = None,
                 timeout: float = 60.0) -> None:
        self._cache: OrderedDict[tuple[Path, str, int], Shard] = OrderedDict()
        self._keep = keep
        self._serving_args = serving_args
        self._target_path = target_model
        self._reference = reference
        self._targets: dict[Path, TargetModel] = {}
        self._capture_dirs = list(captures)
        self._captures: CaptureIndex | None = None
        self._sglang_url = sglang_url
        self._timeout = timeout
        self._reported_broken = False  # broken capture files are reported once per run

    @property
    def wants_reference(self) -> bool:
        return bool(self._reference)

    @property
    def captures_enabled(self) -> bool:
        return bool(self._capture_dirs or self._sglang_url)

    def captures(self) -> CaptureIndex:
        """The capture files, indexed once per run."""
        if self._captures is None:
            from .capture.core import load_captures

            self._captures = load_captures(self._capture_dirs)
            if not len(self._captures) and not self._captures.problems:
                raise UsageError("no capture files under " + ", ".join(
                    map(str, self._capture_dirs)) + ": record them with eagle-contract record")
        return self._captures

    def target(self, contract: Contract) -> TargetModel | None:
        """The target model (override, else the contract's), opened once."""
        path = self._target_path or contract.target.model
        return None if path is None else self.open_target(path)

    def open_target(self, path: Path) -> TargetModel:
        """A target model directory, opened (config and tensor index) once per run."""
        if path not in self._targets:
            from .models.target import TargetModel

            self._targets[path] = TargetModel.open(path)
        return self._targets[path]

    def reference(self, contract: Contract) -> bool:
        return contract.target.reference_capture if self._reference is None else self._reference

    def shard(self, contract: Contract, path: Path, label: str) -> Shard:
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

    def run(self, unit: Unit) -> list[Finding]:
        """Findings of one unit, waived codes removed."""
        if unit.shard is None:
            findings = self._contract_level(unit)
            return [f for f in findings if f.code not in unit.contract.waivers]
        shard = self.shard(unit.contract, unit.shard, unit.label)
        if shard.error is not None:
            findings = [Finding(shard.error.code, shard.error.message, file=unit.label,
                                contract=str(unit.contract.path),
                                line=unit.contract.line_of("training.shards"),
                                hint=shard.error.hint)]
        elif unit.check == CAPTURE:
            from .capture.core import verify_against_capture, verify_live

            if self._sglang_url:
                findings = verify_live(unit.contract, shard, self._sglang_url, self._timeout)
            else:
                index = self.captures()
                findings = [Finding("EC707", problem, file=unit.label,
                                    contract=str(unit.contract.path))
                            for problem in index.problems if not self._reported_broken]
                self._reported_broken = True
                findings += verify_against_capture(unit.contract, shard, index)
        elif unit.check == EVIDENCE:
            from .checks.evidence import check_evidence

            target = self.target(unit.contract)
            assert target is not None
            findings = check_evidence(unit.contract, shard, target, self.reference(unit.contract))
        else:
            findings = SHARD_CHECKS[unit.check](unit.contract, shard)
        return [f for f in findings if f.code not in unit.contract.waivers]

    def _contract_level(self, unit: Unit) -> list[Finding]:
        from .checks.layout import check_layout

        contract = unit.contract
        if unit.check == "shards":
            return [Finding("EC513", unit.problem, contract=str(contract.path),
                            line=contract.line_of("training.shards"),
                            hint="fix training.shards, or pass the shard location "
                                 "(eagle-contract check CONTRACT PATH, pytest --eagle-shards)")]
        if unit.check == SHARPNESS:
            from .sharpness.selftest import check_sharpness

            return check_sharpness(contract)
        if unit.check != "layout":
            raise ValueError(f"unknown contract-level check {unit.check}")
        stats_of = None
        identified = None
        if unit.evidence is not None:
            shard = self.shard(contract, unit.evidence, unit.evidence_label)
            if shard.sample is not None:
                def stats_of(i: int) -> object:
                    return shard.stats(i) if i < len(shard.slots) else None

                target = self.target(contract)
                ids = shard.sample.input_ids
                if target is not None and self.reference(contract) and ids is not None:
                    from .checks.evidence import identify

                    found = identify([s.tensor for s in shard.slots], ids, target)
                    identified = {i.slot: i for i in found}
        return check_layout(contract, self._serving_args, stats_of, identified)


@dataclass(frozen=True)
class Outcome:
    """What running a list of units found."""

    units: list[Unit]
    per_unit: list[list[Finding]]

    @property
    def findings(self) -> list[Finding]:
        from .render import unique

        return unique(f for found in self.per_unit for f in found)

    @property
    def failed(self) -> bool:
        return any(f.severity == "error" for f in self.findings)

    @property
    def shards(self) -> int:
        return len({u.shard for u in self.units if u.shard is not None})


def run_units(units: list[Unit], runner: Runner | None = None) -> Outcome:
    runner = runner or Runner()
    return Outcome(units, [runner.run(unit) for unit in units])
