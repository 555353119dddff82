"""Hand a run's results to every report asked for: JSON, HTML, GitHub Actions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..planner import Runner
    from .run import CheckRun


def publish(
    runs: Sequence[CheckRun],
    *,
    json_path: Path | None = None,
    html_path: Path | None = None,
    annotations: str = "auto",
    runner: Runner | None = None,
    session: bool = False,
    echo: Callable[[str], None] = print,
) -> None:
    """``json_path``: the check report (a session report of every contract with
    ``session``); ``html_path``: the HTML report; ``annotations``: auto, github or none."""
    from . import github, json_report

    if json_path is not None:
        data = (
            json_report.session_report(list(runs))
            if session or len(runs) != 1
            else json_report.check_report(runs[0])
        )
        json_report.write(json_path, data)
    if html_path is not None:
        from ..planner import Runner
        from .html import write

        write(html_path, runs, runner or Runner())
    github.emit(runs, annotations, echo)
