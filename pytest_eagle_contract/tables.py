"""The one table renderer: aligned plain-text columns for every table the tool prints."""

from __future__ import annotations

from collections.abc import Sequence


def table(
    header: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    indent: str = "  ",
    right: Sequence[int] = (),
    marks: Sequence[str] | None = None,
) -> str:
    """``rows`` under ``header``, each column as wide as its widest cell.

    ``right`` lists the columns aligned right (numbers); ``marks`` (one string per row,
    e.g. ``"!"`` or ``" "``) is printed in front of each row, a blank in front of the
    header, so differing rows stand out.
    """
    cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells if i < len(row)) for i in range(len(header))]
    lines = []
    for n, row in enumerate(cells):
        parts = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lead = ""
        if marks is not None:
            lead = (" " * len(marks[0]) if marks else "") if n == 0 else marks[n - 1]
            lead += " "
        lines.append((indent + lead + "  ".join(parts)).rstrip())
    return "\n".join(lines)
