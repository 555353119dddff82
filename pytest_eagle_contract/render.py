"""Findings to text (like a compiler's diagnostics) and to JSON."""

from __future__ import annotations

import json
import re
import textwrap
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from .findings import NOT_RUN, Finding
from .tables import table

WIDTH = 120
"""The widest line the short view prints (prose is wrapped; a table's row is not, except
``matrix``'s, whose list cells wrap after a comma: ``tables.table(width=...)``)."""
FEW = 3
"""A rule code found more often than this prints as one entry with its count."""


def format_finding(f: Finding, width: int | None = None, tail: str = "") -> str:
    """One finding as a multi-line diagnostic; with ``width`` (the terminal's short view)
    its prose is wrapped at that width and EC501's every-engine table is cut to the rows
    that differ from the contract's own engine (the whole table: ``-v``, ``matrix``).
    ``tail`` ends its hint (the short view's ``eagle-contract explain CODE``)."""
    level = "" if f.severity == "error" else f"{f.severity}: "
    lines = [f"{level}{f.code} {f.rule.name}: {f.message}"]
    where = []
    if f.contract:
        contract = display_path(f.contract)
        where.append(f"{contract}:{f.line}" if f.line else contract)
    if f.file:  # a shard's label, or the training guard's "batch I [row R]"
        where.append(f.file if f.file.startswith("batch ") else f"shard {f.file}")
    if f.slot is not None:
        where.append(f"slot {f.slot}")
    if where:
        lines.append("  --> " + ", ".join(where))
    if f.details:
        details = f.details if width is None else _short_details(f)
        lines.extend("      " + line for line in details.splitlines())
    for label, value in (("expected", f.expected), ("found", f.found), ("hint", f.hint)):
        if value:
            lines.append(f"  {label:>8}: {value}")
    if tail:
        lines.append(f"{lines.pop()}{tail}" if f.hint else f"  {'see':>8}: {tail.lstrip(' ·')}")
    return "\n".join(lines if width is None else [w for line in lines for w in _fit(line, width)])


def format_findings(
    findings: Sequence[Finding], shown: int = 3, width: int | None = None, tail: str = ""
) -> str:
    """Diagnostics grouped: the same rule at the same place in many shards prints once,
    followed by the other shards' names and what they showed (``tail``: ends the last
    one's hint, as :func:`format_finding`'s)."""
    groups: dict[tuple[Any, ...], list[Finding]] = {}
    seen: Counter[tuple[Any, ...]] = Counter()
    for n, f in enumerate(findings):
        if not f.file:  # contract-level: alone
            groups[(n,)] = [f]
            continue
        place = (f.code, f.contract, f.line, f.slot)
        seen[(*place, f.file)] += 1  # the k-th such finding of one shard groups with the
        groups.setdefault((*place, seen[(*place, f.file)]), []).append(f)  # others' k-th
    blocks = []
    for n, same in enumerate(groups.values(), 1):
        text = format_finding(same[0], width, tail if n == len(groups) else "")
        rest = [f for f in same[1:] if f.file]
        if rest:
            names = ", ".join(f.file for f in rest[:shown])
            more = f" and {len(rest) - shown} more" if len(rest) > shown else ""
            text += f"\n  {'also in':>8}: {len(rest)} other shard(s): {names}{more}"
        blocks.append(text)
    return "\n\n".join(blocks)


def format_short(
    findings: Sequence[Finding],
    width: int = WIDTH,
    known: Sequence[Finding] = (),
    few: int = FEW,
) -> str:
    """The terminal's default view: one entry per rule code, ended by its
    ``eagle-contract explain CODE``. A code found up to ``few`` times prints its
    diagnostics (wrapped at ``width``); a code found more often prints one line with the
    count and where they are, the first one's place on a ``-->`` line, its message and its
    hint (EC501's: each span's). With ``few``, EC501's findings (one per engine-version span
    that feeds the fc another input) print the first in full and the others' message and
    hint, one each.
    Findings in ``known`` (printed before by the same run: the demo's second look at a
    shard set) print as one line per code. Every finding in full: :func:`format_findings`
    (``-v``); the reports hold them all."""
    seen = set(known)
    by_code: dict[str, list[Finding]] = {}
    again: dict[str, list[Finding]] = {}
    for f in findings:
        (again if f in seen else by_code).setdefault(f.code, []).append(f)
    blocks = []
    for code, same in by_code.items():
        first = same[0]
        tail = f" · eagle-contract explain {code}"
        if len(same) > 1 and few and all(isinstance(f.extra.get("matrix"), list) for f in same):
            blocks.append(_spans(same, width, tail))
            continue
        if len(same) <= few:
            blocks.append(format_findings(same, width=width, tail=tail))
            continue
        level = "" if first.severity == "error" else f"{first.severity}: "
        head = f"{level}{code} {first.rule.name}: {_count(len(same), 'finding')}{_spread(same)}"
        lines = [head]
        if _place(first):
            lines.append(f"  --> {_place(first)}" + ("" if len(same) == 1 else " (the first)"))
        lines.append(f"  {first.message}")
        lines.extend(_hints(same, tail))
        blocks.append("\n".join(w for line in lines for w in _fit(line, width)))
    for same in again.values():
        first = same[0]
        text = f"{first.code} {first.rule.name}: the {_count(len(same), 'finding')} above again"
        blocks.append("\n".join(_fit(text + _spread(same), width)))
    return "\n\n".join(blocks)


def _hints(findings: Sequence[Finding], tail: str) -> list[str]:
    """The first finding's hint, ended by ``tail``; of EC501's findings (one per engine-version
    span, each with its own fix) each distinct hint, up to ``FEW``, then how many more."""
    hints = list(dict.fromkeys(f.hint for f in findings if f.hint))
    if not all(isinstance(f.extra.get("matrix"), list) for f in findings):
        hints = hints[:1]
    lines = [f"  {'hint':>8}: {h}" for h in hints[:FEW]]
    if len(hints) > FEW:
        lines.append(f"  {'':>8}  and {len(hints) - FEW} other hint(s) (-v prints each)")
    if not lines:
        return [f"  {'see':>8}: {tail.lstrip(' ·')}"]
    lines[-1] += tail
    return lines


def _spans(findings: Sequence[Finding], width: int, tail: str) -> str:
    """EC501 found for several engine-version spans: the first in full (its table cut to
    the rows that differ), then each other span's message and its own hint."""
    lines = []
    for f in findings[1:]:
        lines.append(f"  {'also':>8}: {f.message}")
        if f.hint:
            lines.append(f"  {'hint':>8}: {f.hint}")
    if lines[-1].lstrip().startswith("hint: "):
        lines[-1] += tail
    else:
        lines.append(f"  {'see':>8}: {tail.lstrip(' ·')}")
    rest = [w for line in lines for w in _fit(line, width)]
    return "\n".join([format_finding(findings[0], width), *rest])


def _spread(findings: Sequence[Finding]) -> str:
    """Where a code's findings are: ``, slots 0, 1, 2 in 12 shards``."""
    slots = sorted({f.slot for f in findings if f.slot is not None})
    shards = {f.file for f in findings if f.file}
    parts = []
    if slots:
        parts.append(("slot " if len(slots) == 1 else "slots ") + ", ".join(map(str, slots)))
    if shards:
        parts.append(_count(len(shards), "shard"))
    if not slots:
        return f" in {parts[0]}" if parts else ""
    return ", " + " in ".join(parts)


def _place(f: Finding) -> str:
    """The first finding's place: its contract line and its shard."""
    where = []
    if f.contract:
        contract = display_path(f.contract)
        where.append(f"{contract}:{f.line}" if f.line else contract)
    if f.file:
        where.append(f.file if f.file.startswith("batch ") else f"shard {f.file}")
    return ", ".join(where)


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _fit(line: str, width: int) -> list[str]:
    """``line`` wrapped at ``width``, its continuation lines indented under its text (after
    a ``label: `` lead); a table's row (two spaces inside the text) is left as it is."""
    if len(line) <= width:
        return [line]
    body = line.lstrip(" ")
    lead = len(line) - len(body)
    if "  " in body:
        return [line]
    label = re.match(r"[a-z][a-z -]*: ", body)  # hint: ..., likely cause: ...
    hang = lead + (len(label.group(0)) if label and len(label.group(0)) < 24 else 4)
    return textwrap.wrap(
        line,
        width,
        subsequent_indent=" " * hang,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [line]


def cut(line: str, width: int) -> str:
    """``line`` cut to ``width`` columns, ending ``…`` where it was longer."""
    return line if len(line) <= width else line[: width - 1] + "…"


MATRIX_HEADING = "what the other engines and versions feed with these ids:"
"""The line above EC501's every-engine table in its details (``engines.matrix.summary``)."""


def _short_details(f: Finding) -> str:
    """``f.details`` with EC501's every-engine table cut to the rows that feed another input
    than the contract's own engine does (refusals and the rows like it counted in a line)."""
    rows = f.extra.get("matrix")
    if not isinstance(rows, list) or not rows:
        return f.details
    head, sep, _ = f.details.partition("\n" + MATRIX_HEADING)
    return head + "\n" + _short_table(rows) if sep else f.details


def _short_table(rows: Sequence[dict[str, object]]) -> str:
    """The short view of EC501's every-engine table: only the rows that feed the fc another
    input than the contract's own engine does; the refusals and the rows that feed the same
    are counted in one line that says where the whole table is."""
    own = [r for r in rows if r.get("own")]
    same = {_feeds(r) for r in own if r.get("feeds") is not None}
    shown = [r for r in rows if not r.get("own") and r.get("feeds") is not None]
    shown = [r for r in shown if _feeds(r) not in same]
    rest = len(rows) - len(own) - len(shown)
    lines = []
    if shown:
        lines.append("other engines that feed another input with these ids:")
        lines.append(
            table(
                ["engine", "versions", "fc gets", "vs trainer", "ids that fix"],
                [
                    [
                        r.get("title"),
                        r.get("label"),
                        ", ".join(_feeds(r)),
                        r.get("shown"),
                        _fix(r),
                    ]
                    for r in shown
                ],
            )
        )
    if rest:
        lines.append(
            f"{rest} more engine row(s) refuse these ids or feed what the contract's engine "
            "feeds (the whole table: -v, or eagle-contract matrix)"
        )
    return "\n".join(lines)


def _feeds(row: dict[str, object]) -> tuple[str, ...]:
    feeds = row.get("feeds")
    return tuple(str(x) for x in feeds) if isinstance(feeds, list) else ()


def _fix(row: dict[str, object]) -> str:
    if row.get("verdict") == "ok":
        return "-"
    fix = row.get("fix")
    return str(fix) if isinstance(fix, list) else "none"


def display_path(path: str) -> str:
    """``path`` relative to the working directory when it lies below it."""
    import os

    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def unique(findings: Iterable[Finding]) -> list[Finding]:
    """Drop repeats (a corrupt shard is reported by each of its checks)."""
    seen: set[tuple[Any, ...]] = set()
    out = []
    for f in findings:
        key = (f.code, f.message, f.file, f.slot, f.contract)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def summary(findings: Sequence[Finding], units: int, shards: int) -> str:
    """The run's last line. "ok" only when nothing failed and every check that applies ran:
    checks that did not run (EC009) are counted, and their reasons are printed above."""
    errors = sum(f.severity == "error" for f in findings)
    skipped = sum(f.code == NOT_RUN for f in findings)
    warnings = len(findings) - errors - skipped
    if not errors:
        tail = f", {warnings} warning(s)" if warnings else ""
        if skipped:
            return (
                f"passed, incomplete: {units} checks on {shards} shard(s) passed{tail}; "
                f"{skipped} check(s) did not run (EC009, the reasons above)"
            )
        return f"ok: {units} checks on {shards} shard(s) passed{tail}"
    codes = sorted({f.code for f in findings if f.severity == "error"})
    gap = f"; {skipped} check(s) did not run (EC009)" if skipped else ""
    return (
        f"FAILED: {errors} finding(s) [{', '.join(codes)}] in {units} checks on {shards} "
        f"shard(s){gap}"
    )


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False, default=str)
