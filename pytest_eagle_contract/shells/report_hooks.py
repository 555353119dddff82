"""The plugin's reports: JUnit properties on each contract item, and at the end of the
session (on the xdist controller) GitHub annotations and the report files
(``--eagle-json-report``, ``--eagle-html-report``).

Each contract item's report carries ``eagle_contract`` (its contract, and per unit it ran
the unit's findings and measures, plain JSON), which xdist sends to the controller with the
rest of the report.

pytest's terminal reporter keeps every report to the end of the session. On the controller,
the reports of a passing contract item share what its three reports (setup, call, teardown)
and the other items of its contract hold alike, once the other plugins have read them
(:meth:`ReportHooks.pytest_runtest_logreport`); the findings the
reports need are kept compact (:class:`_Seen`).
"""

from __future__ import annotations

import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from . import options
from .options import CONTRACT_SUFFIXES

_ATTR = "eagle_contract"
_NO_FINDINGS: tuple[dict[str, Any], ...] = ()


class _Seen(NamedTuple):
    """One contract item's result, as the controller keeps it (strings interned)."""

    contract: str
    check: str
    label: str
    shard: str
    findings: tuple[dict[str, Any], ...]
    measured: dict[str, Any] | None  # None: nothing (most items, most runs)

    @classmethod
    def of(cls, data: dict[str, Any]) -> list[_Seen]:
        """The item's units (one, or a batch's)."""
        contract, intern = sys.intern(str(data["contract"])), sys.intern
        return [
            cls(
                contract,
                intern(str(u["check"])),
                intern(str(u["label"])),
                intern(str(u["shard"])),
                tuple(u["findings"]) or _NO_FINDINGS,
                u.get("measured") or None,
            )
            for u in data["units"]
        ]


class ReportHooks:
    """Registered by the plugin when contracts run."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.seen: list[_Seen] = []
        self.session: pytest.Session | None = None
        self._controller = not hasattr(config, "workerinput")
        self._measures = any(options.report_paths(config)[:2])  # a report plots them
        self._open: dict[str, pytest.TestReport] = {}  # nodeid -> its setup report
        self._shared: dict[Any, Any] = {}  # a value -> the one copy the reports share

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, None]:
        results = getattr(item, "results", None)
        if results is None or call.when != "call":
            yield
            return
        from ..reports.junit import properties

        findings = list(getattr(item, "findings", []))  # warnings of a passing item too
        measures = [m for _, _, m in results]
        contract = item.unit.contract  # type: ignore[attr-defined]
        item.user_properties.extend(properties(contract, findings, measures))
        outcome = yield
        units = [
            {
                "check": unit.check,
                "label": unit.label,
                "shard": "" if unit.shard is None else str(unit.shard),
                "findings": [f.to_dict() for f in found],
                "measured": measured if self._measures else {},
            }
            for unit, found, measured in results
        ]
        setattr(outcome.get_result(), _ATTR, {"contract": str(contract.path), "units": units})
        results.clear()  # sent with the report: the item keeps nothing per unit it ran

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """On the controller, after every other plugin has read it: the item's result into
        :attr:`seen`; a contract item's report shares its node id, location and keywords
        with the item's setup report and its JUnit properties with the other items' equal
        ones, and drops ``eagle_contract`` (kept in :attr:`seen`)."""
        if not self._controller:
            return
        data = getattr(report, _ATTR, None)
        if isinstance(data, dict):
            self.seen.extend(_Seen.of(data))
        if report.when == "setup":
            if report.passed and _is_contract_item(report):
                self._open[report.nodeid] = report
                report.nodeid = sys.intern(report.nodeid)
                report.outcome, report.when = "passed", "setup"  # the code's own (one) strings
                fspath, line, domain = report.location
                report.location = (sys.intern(fspath), line, domain)
            return
        first = self._open.get(report.nodeid)
        if report.when == "teardown":
            self._open.pop(report.nodeid, None)
        if first is None:
            return
        if hasattr(report, _ATTR):
            delattr(report, _ATTR)
        if not report.passed:  # a failure's report stays as pytest made it
            return
        report.nodeid, report.location = first.nodeid, first.location
        report.keywords, report.outcome = first.keywords, first.outcome
        report.when = "call" if report.when == "call" else "teardown"
        report.user_properties = self._one(tuple(map(tuple, report.user_properties)))

    def _one(self, value: Any) -> Any:
        return self._shared.setdefault(value, value)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int) -> None:
        if hasattr(self.config, "workerinput") or not self.seen:
            return
        from ..reports.publish import publish

        reports = options.report_paths(self.config)
        stopped = self.session is not None and bool(
            self.session.shouldstop or self.session.shouldfail  # -x, --maxfail
        )
        runs = _runs(self.seen, interrupted=stopped or exitstatus == pytest.ExitCode.INTERRUPTED)
        from ..errors import EagleContractError

        try:
            publish(
                runs,
                json_path=reports.json,
                html_path=reports.html,
                annotations=self.config.getoption("eagle_annotations"),
                session=True,
                echo=terminalreporter.write_line,
                flags=(reports.json_flag, reports.html_flag),
            )
        except EagleContractError as exc:  # a full disk: a line, not an INTERNALERROR
            terminalreporter.write_line(f"eagle-contract: error: {exc}", red=True)
            return
        for report in (reports.json, reports.html):
            if report is not None:
                terminalreporter.write_line(f"eagle-contract: report written to {report}")


def check_report_path(config: pytest.Config, reads: list[Path]) -> None:
    """``--eagle-json-report``, ``--eagle-html-report``: refused at the start (not after the
    run) where a write would be: onto ``reads`` (contracts, shards), a folder, a device, a
    file that is no report."""
    reports = options.report_paths(config)
    if not (reports.json or reports.html) or hasattr(config, "workerinput"):
        return
    from ..outputs import inputs
    from ..reports.publish import check_targets

    check_targets(
        inputs(*reads), reports.json, reports.html, (reports.json_flag, reports.html_flag)
    )


def _is_contract_item(report: pytest.TestReport) -> bool:
    """A contract item's node id is ``CONTRACT.yaml::check[...]``."""
    return report.nodeid.partition("::")[0].endswith(CONTRACT_SUFFIXES)


def _runs(seen: list[_Seen], interrupted: bool = False) -> list[Any]:
    """One CheckRun per contract, from the items' reports (xdist: in any order);
    ``interrupted``: the session stopped (Ctrl-C) before every item ran."""
    from ..checks.unit import shards_counted
    from ..contract.model import load_contract
    from ..findings import Finding
    from ..render import summary, unique
    from ..reports.run import CheckRun, UnitResult

    by_contract: dict[str, list[_Seen]] = {}
    for data in seen:
        by_contract.setdefault(data.contract, []).append(data)
    runs = []
    for path, items in by_contract.items():
        units = [
            UnitResult(
                d.check,
                d.label,
                [Finding.from_dict(f) for f in d.findings],
                Path(d.shard) if d.shard else None,
                dict(d.measured or {}),
            )
            for d in items
        ]
        findings = unique(f for u in units for f in u.findings)
        shards = list(dict.fromkeys((u.path, u.shard) for u in units if u.path is not None))
        measured = [u.measured for u in units]
        line = summary(findings, len(units), shards_counted((u.path for u in units), measured))
        runs.append(
            CheckRun(
                load_contract(Path(path)),
                units,
                findings,
                f"INTERRUPTED after {len(units)} checks: {line}" if interrupted else line,
                shard_paths=shards,
                interrupted=interrupted,
            )
        )
    return runs
