"""docs/doctor.md's seam table names, for each seam that filters the layout check's findings,
exactly the codes the seam keeps (plan/doctor.py): a code added to a seam and not to its row
(DFlash's EC526-EC528 were) is a seam whose failures the docs do not announce."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_eagle_contract.plan import doctor

DOCS = Path(__file__).parents[2] / "docs"
SEAMS = {
    "layout": doctor.LAYOUT_CODES,
    "engine-rules": doctor.ENGINE_CODES,
    "method": doctor.METHOD_CODES,
    "serving-args": doctor.LAUNCH_CODES,
}


def _codes(cell: str) -> set[str]:
    """The codes a table cell names, ranges (EC517-EC520) spelled out."""
    out: set[str] = set()
    for first, last in re.findall(r"EC(\d{3})(?:-EC(\d{3}))?", cell):
        out |= {f"EC{n}" for n in range(int(first), int(last or first) + 1)}
    return out


def _row(seam: str) -> list[str]:
    for line in (DOCS / "doctor.md").read_text("utf-8").splitlines():
        if line.startswith(f"| `{seam}` |"):
            return [c.strip() for c in line.strip("|").split("|")]
    raise AssertionError(f"docs/doctor.md has no row for the {seam} seam")


@pytest.mark.parametrize("seam", sorted(SEAMS))
def test_each_seam_row_names_the_codes_the_seam_keeps(seam):
    assert _codes(_row(seam)[2]) == set(SEAMS[seam])


def test_ranges_are_spelled_out():
    assert _codes("EC512 (SGLang), EC517-EC519") == {"EC512", "EC517", "EC518", "EC519"}
