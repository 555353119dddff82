"""A generated rules file (``*_rules.json``, written by ``scripts/gen_*_rules.py`` from each
release's own code) and the version arithmetic every engine does on it: its releases, a
version read or refused in the engine's words, whether a row's span covers a version."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import EagleContractError, Unservable

Row = dict[
    str, Any
]  # a rule row: "since" (a release), "until" (the first it no longer holds, or None)


@dataclass(frozen=True)
class Release:
    """The rules of one release, as an engine reads them from its table: the version asked
    for and the span of releases its row covers (:func:`span`); each engine adds its own."""

    version: str
    span: str


class RuleTable:
    """The rules file ``file`` beside this module, of the project users install as
    ``project`` (its name in errors), a version of which looks like ``example``."""

    def __init__(self, file: str, project: str, example: str) -> None:
        self.file, self.project, self.example = file, project, example

    @functools.cached_property
    def _parsed(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((Path(__file__).parent / self.file).read_text("utf-8"))
        return data

    def data(self) -> dict[str, Any]:
        """The whole file, read once."""
        return self._parsed

    def releases(self) -> list[str]:
        """Every covered release, oldest first."""
        found: list[str] = self._parsed["releases"]
        return found

    def version(self, text: str) -> Any:
        """``text`` as a version, or an error naming the project."""
        found = _parsed_version(text)
        if found is None:
            raise EagleContractError(
                f"{text!r} is not a {self.project} version (e.g. {self.example})"
            )
        return found

    def covers(self, row: Row, version: str) -> bool:
        """Whether ``row`` holds in ``version``."""
        v = self.version(version)
        return self.version(row["since"]) <= v and (
            row["until"] is None or v < self.version(row["until"])
        )

    def check(self, version: str, missing: str = " has no EAGLE-3") -> None:
        """Raise Unservable for ``version`` outside the covered releases: before the first
        (``{project} {version}{missing}``) or past the newest the rules were made from."""
        first, newest = self.releases()[0], self.releases()[-1]
        if self.version(version) < self.version(first):
            raise Unservable(f"{self.project} {version}{missing} (first in {first})")
        if self.version(version) > self.version(newest):
            raise Unservable(
                f"{self.project} {version} is newer than the built-in rules (up to {newest})"
            )

    def row(self, version: str, missing: str = " has no EAGLE-3") -> Row:
        """The ``rows`` entry that covers ``version`` (:meth:`check` first)."""
        self.check(version, missing)
        return next(r for r in self._parsed["rows"] if self.covers(r, version))


def span(row: Row) -> str:
    """A row's releases, as a version spec."""
    return f"{row['since']} <= v < {row['until']}" if row["until"] else f">={row['since']}"


@functools.lru_cache(maxsize=4096)
def _parsed_version(text: str) -> Any:
    """``text`` as a packaging Version, None where it is not one (kept: a fix search reads
    the same few release strings millions of times)."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return None
