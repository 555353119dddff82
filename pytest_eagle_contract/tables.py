"""The one table renderer: aligned plain-text columns for every table the tool prints."""

from __future__ import annotations

from collections.abc import Sequence

SEP = ", "
"""Where a cell may wrap: between the items of a list (``residual:2, residual:30``)."""


def table(
    header: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    indent: str = "  ",
    right: Sequence[int] = (),
    marks: Sequence[str] | None = None,
    width: int | None = None,
) -> str:
    """``rows`` under ``header``, each column as wide as its widest cell.

    ``right`` lists the columns aligned right (numbers); ``marks`` (one string per row,
    e.g. ``"!"`` or ``" "``) is printed in front of each row, a blank in front of the
    header, so differing rows stand out. ``width``: where a line would be wider, the
    widest column whose cells are lists wraps them after a comma (``SEP``) onto
    continuation lines, blank in the other columns, until the lines fit or no list cell
    can wrap further; no item is cut.
    """
    cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells if i < len(row)) for i in range(len(header))]
    lead_width = (len(marks[0]) + 1 if marks else 1) if marks is not None else 0
    if width is not None:
        _fit(cells, widths, width - len(indent) - lead_width)
    wrapped = [
        [_wrap(cell, widths[i]) if n else [cell] for i, cell in enumerate(row)]
        for n, row in enumerate(cells)
    ]
    widths = [
        max(len(x) for row in wrapped if i < len(row) for x in row[i]) for i in range(len(header))
    ]
    lines = []
    for n, pieces in enumerate(wrapped):
        for k in range(max(len(p) for p in pieces)):
            parts = [
                (p[k] if k < len(p) else "").rjust(widths[i])
                if i in right
                else (p[k] if k < len(p) else "").ljust(widths[i])
                for i, p in enumerate(pieces)
            ]
            lead = ""
            if marks is not None:
                mark = (" " * len(marks[0]) if marks else "") if n == 0 else marks[n - 1]
                lead = (mark if k == 0 else " " * len(mark)) + " "
            lines.append((indent + lead + "  ".join(parts)).rstrip())
    return "\n".join(lines)


def _fit(cells: list[list[str]], widths: list[int], room: int) -> None:
    """Narrow ``widths`` (in place) so the columns and their gaps fit ``room``: the widest
    column holding a list cell first, down to its longest item."""
    while sum(widths) + 2 * (len(widths) - 1) > room:
        over = sum(widths) + 2 * (len(widths) - 1) - room
        best = None
        for i, w in enumerate(widths):
            floor = max(
                (len(item) for row in cells[1:] if i < len(row) for item in _items(row[i])),
                default=w,
            )
            floor = max(floor, len(cells[0][i]))
            if floor < w and (best is None or w > widths[best[0]]):
                best = (i, floor)
        if best is None:
            return  # nothing left to wrap: the line stays wide
        i, floor = best
        widths[i] = max(floor, widths[i] - over)


def _items(cell: str) -> list[str]:
    """A cell's items as it wraps them (each but the last keeps its comma)."""
    parts = cell.split(SEP)
    return [p + "," for p in parts[:-1]] + parts[-1:]


def _wrap(cell: str, width: int) -> list[str]:
    """``cell`` in lines of at most ``width``, broken after a comma only."""
    if len(cell) <= width:
        return [cell]
    lines: list[str] = []
    for item in _items(cell):
        if lines and len(lines[-1]) + 1 + len(item) <= width:
            lines[-1] += " " + item
        else:
            lines.append(item)
    return lines
