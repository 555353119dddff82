"""Findings to text (like a compiler's diagnostics) and to JSON."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from .findings import Finding


def format_finding(f: Finding) -> str:
    """One finding as a multi-line diagnostic."""
    lines = [f"{f.code} {f.rule.name}: {f.message}"]
    where = []
    if f.contract:
        where.append(f"{f.contract}:{f.line}" if f.line else f.contract)
    if f.file:
        where.append(f"shard {f.file}")
    if f.slot is not None:
        where.append(f"slot {f.slot}")
    if where:
        lines.append("  --> " + ", ".join(where))
    for label, value in (("expected", f.expected), ("found", f.found), ("hint", f.hint)):
        if value:
            lines.append(f"  {label:>8}: {value}")
    return "\n".join(lines)


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
    errors = sum(f.severity == "error" for f in findings)
    warnings = len(findings) - errors
    if not errors:
        tail = f", {warnings} warning(s)" if warnings else ""
        return f"ok: {units} checks on {shards} shard(s) passed{tail}"
    codes = sorted({f.code for f in findings if f.severity == "error"})
    return (f"FAILED: {errors} finding(s) [{', '.join(codes)}] in {units} checks on "
            f"{shards} shard(s)")


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False, default=str)
