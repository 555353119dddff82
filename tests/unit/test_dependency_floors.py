"""Every dependency floor in pyproject.toml sits at or above the first release free of the
known advisories (issue 16: ``pyarrow>=14`` admitted 14.0.0, whose Arrow reader unpickles
extension metadata, CVE-2023-47248). A new dependency needs a table in dependency_floors.toml
beside this file."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"
FLOORS = Path(__file__).parents[1] / "dependency_floors.toml"

# name -> {least: the least safe version, advisories: what it is past, note: how the tool
# uses the package, where that matters}
SAFE: dict[str, dict[str, Any]] = tomllib.loads(FLOORS.read_text("utf-8"))


def _why(row: dict[str, Any]) -> str:
    """A table's advisories and note in one line ("none known" for neither)."""
    why = [*row["advisories"], row.get("note")]
    return "; ".join(w for w in why if w) or "none known"


def _requirements() -> list[Requirement]:
    data = tomllib.loads(PYPROJECT.read_text("utf-8"))
    texts = list(data["build-system"]["requires"]) + list(data["project"]["dependencies"])
    for extra in data["project"]["optional-dependencies"].values():
        texts += extra
    return [Requirement(t) for t in texts]


def _floor(req: Requirement) -> Version | None:
    """The least version ``req`` admits (its ``>=``, ``==``, ``~=`` or ``>`` bound)."""
    bounds = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=", ">")]
    return max(bounds, default=None)


@pytest.mark.parametrize("req", _requirements(), ids=str)
def test_floor_is_past_every_known_advisory(req: Requirement) -> None:
    name = req.name.lower()
    assert name in SAFE, f"{req}: add a [{name}] table (least, advisories) to {FLOORS.name}"
    least = SAFE[name]["least"]
    floor = _floor(req)
    if Version(least) > Version("0"):
        assert floor is not None and floor >= Version(least), (
            f"{req} admits versions before {least}: {_why(SAFE[name])}"
        )


def test_installed_versions_meet_the_floors() -> None:
    """The floors stay satisfiable by what is installed here (torch 2.13.0 CPU among it)."""
    for req in _requirements():
        try:
            installed = Version(importlib.metadata.version(req.name))
        except importlib.metadata.PackageNotFoundError:
            continue  # an extra not installed (sglang)
        assert req.specifier.contains(installed, prereleases=True), f"{req}: {installed}"
