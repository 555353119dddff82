"""Hand a run's results to every report asked for: JSON, HTML, GitHub Actions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .run import CheckRun

FLAGS = ("--json-report", "--html-report")
"""The options that name the JSON and the HTML report (eagle-contract check's), for messages."""


def publish(
    runs: Sequence[CheckRun],
    *,
    json_path: Path | None = None,
    html_path: Path | None = None,
    annotations: str = "auto",
    session: bool = False,
    echo: Callable[[str], None] = print,
    flags: tuple[str, str] = FLAGS,
) -> None:
    """``json_path``: the check report (a session report of every contract with
    ``session``); ``html_path``: the HTML report; ``annotations``: auto, github or none;
    ``flags``: the options that named the two reports, for messages. Neither report is
    written onto what the runs read (:mod:`..outputs`)."""
    from . import github, json_report

    reads = run_inputs(runs)
    if json_path is not None:
        data = (
            json_report.session_report(list(runs))
            if session or len(runs) != 1
            else json_report.check_report(runs[0])
        )
        json_report.write(json_path, data, flags[0], reads)
    if html_path is not None:
        from .html import write

        write(html_path, runs, flags[1], reads)
    github.emit(runs, annotations, echo)


def run_inputs(runs: Sequence[CheckRun]) -> tuple[Path, ...]:
    """What the runs read: contracts, shard roots and files, target models."""
    from ..outputs import inputs

    paths: list[Path | None] = []
    for run in runs:
        contract = run.contract
        training = contract.training
        paths += [contract.path, training.shards if training else None, contract.target.model]
        paths += [p for p, _ in run.shard_paths]
    return inputs(*paths)


def check_targets(
    reads: Sequence[Path],
    json_path: Path | None,
    html_path: Path | None,
    flags: tuple[str, str] = FLAGS,
) -> None:
    """Refuse report paths before a run (the same rules the writes apply after it)."""
    from ..outputs import checked_output
    from .html import MARK as PAGE
    from .json_report import MARK

    real = None
    if json_path is not None:
        real = checked_output(json_path, flags[0], reads=reads, ours=MARK)
    if html_path is not None:
        page = checked_output(html_path, flags[1], reads=reads, ours=PAGE)
        if real is not None and page == real:  # one would be written, then the other refused
            from ..errors import UsageError

            raise UsageError(
                f"{flags[1]} {html_path}: the same file as {flags[0]} {json_path}; give each "
                "report its own path"
            )
