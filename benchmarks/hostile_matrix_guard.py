"""A pytest plugin the matrix sweep (benchmarks/hostile_matrix.py) loads into each pytest run
(``-p hostile_matrix_guard``): it writes one line to ``out/hostile-guard.txt`` for every
failure that is a raw exception rather than a finding.

A finding fails its item through the plugin's ``UnitFailed`` (a text report) or
``pytest.fail(..., pytrace=False)`` (``Failed: ...``); a coded error of the package
(``EagleContractError`` and its subclasses) raised out of a fixture is a finding too. Anything
else -- an ``IndexError`` from an item, a collection error, an INTERNALERROR, a crashed xdist
worker -- is a line here, and the sweep counts the run as a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

GUARD = Path("out") / "hostile-guard.txt"
_WORKER = False  # an xdist worker: its controller writes the lines


def _coded() -> tuple[str, ...]:
    from pytest_eagle_contract import errors

    names = []
    for name in dir(errors):
        value = getattr(errors, name)
        if isinstance(value, type) and issubclass(value, errors.EagleContractError):
            names.append(name)
    return tuple(names)


def _write(kind: str, where: str, message: str) -> None:
    line = f"{kind}\t{where}\t{' '.join(message.split())[:400]}\n"
    fd = os.open(GUARD, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode("utf-8", "replace"))
    finally:
        os.close(fd)


def _raw(longrepr: Any) -> str:
    """'' when ``longrepr`` is a finding, else the exception's one-line message."""
    if longrepr is None or isinstance(longrepr, str):
        text = "" if longrepr is None else longrepr
        return text if "crashed while running" in text else ""
    crash = getattr(longrepr, "reprcrash", None)
    message = "" if crash is None else str(crash.message)
    if not message:
        text = str(longrepr)
        return text if "crashed while running" in text or "Error" in text[-300:] else ""
    if message.startswith(("Failed:", "Skipped:")):
        return ""
    head = message.split(":", 1)[0].rsplit(".", 1)[-1]
    if head in _coded():
        return ""
    return message


def pytest_configure(config: pytest.Config) -> None:
    global _WORKER
    _WORKER = hasattr(config, "workerinput")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _WORKER or not report.failed:
        return
    problem = _raw(report.longrepr)
    if problem:
        _write("raw", f"{report.nodeid} ({report.when})", problem)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed and not _WORKER:
        _write("collect", report.nodeid or "<session>", str(report.longrepr)[-400:])


def pytest_internalerror(excrepr: Any, excinfo: Any) -> None:
    _write("internal", "INTERNALERROR", str(excrepr)[-400:])
