"""Findings to text (like a compiler's diagnostics) and to JSON."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from .findings import NOT_RUN, Finding


def format_finding(f: Finding) -> str:
    """One finding as a multi-line diagnostic."""
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
        lines.extend("      " + line for line in f.details.splitlines())
    for label, value in (("expected", f.expected), ("found", f.found), ("hint", f.hint)):
        if value:
            lines.append(f"  {label:>8}: {value}")
    return "\n".join(lines)


def format_findings(findings: Sequence[Finding], shown: int = 3) -> str:
    """Diagnostics grouped: the same rule at the same place in many shards prints once,
    followed by the other shards' names and what they showed."""
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
    for same in groups.values():
        text = format_finding(same[0])
        rest = [f for f in same[1:] if f.file]
        if rest:
            names = ", ".join(f.file for f in rest[:shown])
            more = f" and {len(rest) - shown} more" if len(rest) > shown else ""
            text += f"\n  {'also in':>8}: {len(rest)} other shard(s): {names}{more}"
        blocks.append(text)
    return "\n\n".join(blocks)


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
