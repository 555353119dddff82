"""The plugin's reports: JUnit properties on each contract item, and at the end of the
session (on the xdist controller) GitHub annotations and the ``--eagle-report`` file.

Each contract item's report carries ``eagle_contract`` (its unit and findings, plain JSON),
which xdist sends to the controller with the rest of the report.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from ..shells.args import add_annotations

_ATTR = "eagle_contract"


def addoption(group: Any) -> None:
    group.addoption(
        "--eagle-report",
        dest="eagle_report",
        metavar="PATH",
        default=None,
        help="write a report of the contracts' results: PATH.json (the versioned "
        "JSON report), else one self-contained HTML file with plots",
    )
    add_annotations(group.addoption, "eagle-")


class ReportHooks:
    """Registered by the plugin when contracts run."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.seen: list[dict[str, Any]] = []
        self.session: pytest.Session | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, None]:
        unit = getattr(item, "unit", None)
        if unit is None or call.when != "call":
            yield
            return
        from .junit import properties

        findings = list(getattr(item, "findings", []))  # warnings of a passing item too
        item.user_properties.extend(properties(unit.contract, findings))
        outcome = yield
        setattr(
            outcome.get_result(),
            _ATTR,
            {
                "contract": str(unit.contract.path),
                "check": unit.check,
                "label": unit.label,
                "shard": "" if unit.shard is None else str(unit.shard),
                "findings": [f.to_dict() for f in findings],
            },
        )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, _ATTR, None)
        if isinstance(data, dict) and not hasattr(self.config, "workerinput"):
            self.seen.append(data)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int) -> None:
        if hasattr(self.config, "workerinput") or not self.seen:
            return
        from .publish import publish

        path = self.config.getoption("eagle_report")
        report = Path(path) if path else None
        stopped = self.session is not None and bool(
            self.session.shouldstop or self.session.shouldfail  # -x, --maxfail
        )
        runs = _runs(self.seen, interrupted=stopped or exitstatus == pytest.ExitCode.INTERRUPTED)
        from ..errors import EagleContractError

        try:
            publish(
                runs,
                json_path=report if report and report.suffix == ".json" else None,
                html_path=report if report and report.suffix != ".json" else None,
                annotations=self.config.getoption("eagle_annotations"),
                session=True,
                runner=_runner(self.config) if report else None,
                echo=terminalreporter.write_line,
                flag="--eagle-report",
            )
        except EagleContractError as exc:  # a full disk: a line, not an INTERNALERROR
            terminalreporter.write_line(f"eagle-contract: error: {exc}", red=True)
            return
        if report is not None:
            terminalreporter.write_line(f"eagle-contract: report written to {report}")


def check_report_path(config: pytest.Config, reads: list[Path]) -> None:
    """``--eagle-report``: refused at the start (not after the run) where the write would
    be: onto ``reads`` (contracts, shards), a folder, a device, a file that is no report."""
    path = config.getoption("eagle_report")
    if not path or hasattr(config, "workerinput"):
        return
    from ..outputs import inputs
    from .publish import check_targets

    report = Path(path)
    json_path = report if report.suffix == ".json" else None
    html_path = None if json_path else report
    check_targets(inputs(*reads), json_path, html_path, "--eagle-report")


def _runner(config: pytest.Config) -> Any:
    from ..planner import Runner, Settings
    from ..shells import options

    return Runner(Settings(target_model=options.target_model(config)))


def _runs(seen: list[dict[str, Any]], interrupted: bool = False) -> list[Any]:
    """One CheckRun per contract, from the items' reports (xdist: in any order);
    ``interrupted``: the session stopped (Ctrl-C) before every item ran."""
    from ..contract.model import load_contract
    from ..findings import Finding
    from ..render import summary, unique
    from .run import CheckRun, UnitResult

    by_contract: dict[str, list[dict[str, Any]]] = {}
    for data in seen:
        by_contract.setdefault(data["contract"], []).append(data)
    runs = []
    for path, items in by_contract.items():
        units = [
            UnitResult(
                d["check"],
                d["label"],
                [Finding.from_dict(f) for f in d["findings"]],
                Path(d["shard"]) if d["shard"] else None,
            )
            for d in items
        ]
        findings = unique(f for u in units for f in u.findings)
        shards = list(dict.fromkeys((u.path, u.shard) for u in units if u.path is not None))
        line = summary(findings, len(units), len(shards))
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
