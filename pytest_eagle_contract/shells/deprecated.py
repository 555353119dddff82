"""Old spellings of options, kept for one release: each still works and says once, on
stderr, what replaces it (docs/cli.md, "Renamed options").

``record --out DIR`` and ``demo --out DIR`` became ``-o/--output DIR``: a hidden option
that stores where the new one does, with a warning. ``check --json REPORT`` and
``audit --json REPORT`` became ``--json-report REPORT`` (``--json`` alone now prints the
report on stdout, as ``--json`` does in every other command): argparse cannot tell the two
apart (``nargs='?'`` would swallow the contract path), so the command line is rewritten
before parsing: while the old spelling lives, ``--json`` followed by a word that is not an
option is the old one. ``resolve --engine TRAINER`` became ``resolve --trainer TRAINER``
(``--engine`` names a serving engine in every command): rewritten alike, with a warning.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

REMOVED_IN = "0.3.0"
"""The release that drops the old spellings (they exit 2 naming the new one from then)."""

_JSON_REPORT_COMMANDS = ("check", "audit")


def warn(command: str, old: str, new: str) -> None:
    print(
        f"eagle-contract {command}: warning: {old} is deprecated and goes in {REMOVED_IN}: "
        f"use {new}",
        file=sys.stderr,
    )


class Renamed(argparse.Action):
    """An option's old name: stores into the new one's ``dest``, warns, shows in no help."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        self.new: str = kwargs.pop("new")
        self.command: str = kwargs.pop("command")
        kwargs["help"] = argparse.SUPPRESS
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        warn(self.command, f"{option_string}", self.new)
        setattr(namespace, self.dest, values)


def _command_at(argv: list[str]) -> int | None:
    """Where the command's name is: the first word that is not an option (the top level
    takes no option with a value)."""
    return next((i for i, a in enumerate(argv) if not a.startswith("-")), None)


def rewrite(argv: Sequence[str]) -> list[str]:
    """``check``/``audit`` ``--json REPORT`` (or ``--json=REPORT``) as ``--json-report
    REPORT``, and ``resolve --engine TRAINER`` as ``--trainer TRAINER``, each with a
    warning; everything else as given. Until the old spelling goes, a word
    after ``--json`` that is not an option is the report path, as it always was."""
    out = list(argv)
    at = _command_at(out)
    if at is not None and out[at] == "resolve":
        return _trainer_engine(out, at)
    if at is None or out[at] not in _JSON_REPORT_COMMANDS:
        return out
    command = out[at]
    i = at + 1
    while i < len(out):
        word = out[i]
        if word == "--":
            break
        if word.startswith("--json="):
            _warn_json(command, word.split("=", 1)[1])
            out[i : i + 1] = ["--json-report", word.split("=", 1)[1]]
        elif word == "--json" and i + 1 < len(out) and not out[i + 1].startswith("-"):
            _warn_json(command, out[i + 1])
            out[i] = "--json-report"
            i += 1
        i += 1
    return out


def _warn_json(command: str, path: str) -> None:
    warn(command, "--json REPORT", "--json-report REPORT (--json alone prints the report)")
    if path.lower().endswith((".yaml", ".yml")):
        print(
            f"eagle-contract {command}: warning: {path} was taken as the report's path, as "
            f"--json REPORT always did; for the report on stdout write --json after the "
            "contract and shard paths",
            file=sys.stderr,
        )


def _trainer_engine(out: list[str], at: int) -> list[str]:
    """``resolve --engine TRAINER`` (or ``--engine=TRAINER``) as ``--trainer TRAINER``."""
    from ..engines.names import TRAINER_NAMES

    for i in range(at + 1, len(out)):
        word = out[i]
        if word == "--":
            break
        name = word.split("=", 1)[1] if word.startswith("--engine=") else None
        if word == "--engine" and i + 1 < len(out):
            name = out[i + 1]
        if name not in TRAINER_NAMES:
            continue
        warn("resolve", f"--engine {name}", f"--trainer {name} (--engine names a serving engine)")
        out[i : i + (1 if "=" in word else 2)] = ["--trainer", name]
        break  # one --engine: a second is argparse's to refuse
    return out
