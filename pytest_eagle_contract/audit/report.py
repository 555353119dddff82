"""The audit report: findings, per-slot distributions, outlier shards, drift; JSON and text.

Outliers are judged against the set's own distribution, robustly: per slot, the median of
the per-shard medians and their MAD (scaled to a standard deviation, never below
``MIN_SCALE`` of the median); a shard whose median lies more than ``OUTLIER_Z`` such
deviations away stands out. Drift compares each slot's set median with a previous audit's:
a change beyond ``DRIFT_RTOL`` names the slot that moved.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..findings import Finding
from .summaries import FileSummary, SetSummary

if TYPE_CHECKING:
    from ..contract.model import Contract

OUTLIER_Z = 5.0
MIN_SCALE = 0.01  # a set of near-identical medians: 1 % of the median is one deviation
MIN_SHARDS = 5  # fewer shards than this have no distribution to stand out from
DRIFT_RTOL = 0.03
MAX_PREVIOUS = 1 << 26  # a previous audit report is at most 64 MiB


def findings_of(summary: FileSummary) -> list[Finding]:
    return [Finding.from_dict(d) for d in summary.findings]


def _quantile(ordered: Sequence[float], q: float) -> float:
    at = q * (len(ordered) - 1)
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _layer(contract: Contract, slot: int) -> str:
    specs = contract.training.slots if contract.training else ()
    return str(specs[slot].layer) if slot < len(specs) else "?"


def _per_slot(files: Sequence[FileSummary]) -> list[list[tuple[FileSummary, float]]]:
    width = max((len(f.medians) for f in files), default=0)
    return [
        [(f, m) for f in files if i < len(f.medians) and (m := f.medians[i]) is not None]
        for i in range(width)
    ]


def _center(values: Sequence[float]) -> tuple[float, float, float]:
    """median, MAD and the robust scale (1.4826 MAD, at least MIN_SCALE of the median)."""
    center = statistics.median(values)
    mad = statistics.median(abs(v - center) for v in values)
    return center, mad, max(1.4826 * mad, MIN_SCALE * abs(center))


def outliers(contract: Contract, files: Sequence[FileSummary]) -> list[dict[str, Any]]:
    out = []
    for slot, pairs in enumerate(_per_slot(files)):
        if len(pairs) < MIN_SHARDS:
            continue
        center, mad, scale = _center([m for _, m in pairs])
        for f, m in pairs:
            z = (m - center) / scale if scale else 0.0
            if abs(z) > OUTLIER_Z:
                side = "above" if z > 0 else "below"
                out.append(
                    {
                        "path": f.path,
                        "label": f.label,
                        "slot": slot,
                        "layer": _layer(contract, slot),
                        "median": m,
                        "z": z,
                        "reason": f"slot {slot} ({_layer(contract, slot)}) median norm "
                        f"{m:.4g} is {abs(z):.1f} robust deviations {side} the set's "
                        f"{center:.4g} (MAD {mad:.3g})",
                    }
                )
    return sorted(out, key=lambda o: (o["path"], o["slot"]))


def _slots(contract: Contract, files: Sequence[FileSummary], merged: SetSummary) -> list[Any]:
    out = []
    for slot, pairs in enumerate(_per_slot(files)):
        ordered = sorted(m for _, m in pairs)
        entry: dict[str, Any] = {"slot": slot, "layer": _layer(contract, slot)}
        entry.update(merged.slots[slot].moments.to_dict())
        if ordered:
            center, mad, _ = _center(ordered)
            entry.update(
                median=center,
                mad=mad,
                p5=_quantile(ordered, 0.05),
                p95=_quantile(ordered, 0.95),
            )
        entry["histogram"] = merged.slots[slot].histogram.to_dict()
        out.append(entry)
    return out


def load_previous(path: Path) -> dict[str, Any]:
    """A previous audit's JSON report (``--against``); UsageError when it is not one."""
    try:
        if path.stat().st_size > MAX_PREVIOUS:
            raise UsageError(f"--against {path}: larger than an audit report can be")
        data = json.loads(path.read_bytes())
    except OSError as exc:
        raise UsageError(f"--against {path}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError):
        raise UsageError(f"--against {path}: not JSON") from None
    if not (isinstance(data, dict) and data.get("kind") == "audit"):
        raise UsageError(f"--against {path}: not an audit report (eagle-contract audit --json)")
    slots = data.get("slots")
    if not isinstance(slots, list) or not all(isinstance(s, dict) for s in slots):
        raise UsageError(f"--against {path}: its 'slots' are not a list of slot summaries")
    return data


def drift(previous: dict[str, Any], slots: list[dict[str, Any]], against: str) -> dict[str, Any]:
    rows = []
    before_slots = previous["slots"]
    for now in slots:
        i = now["slot"]
        was = before_slots[i] if i < len(before_slots) else {}
        before, after = was.get("median"), now.get("median")
        if not (isinstance(before, (int, float)) and isinstance(after, (int, float))):
            continue
        change = (after - before) / before if before else math.inf
        rows.append(
            {
                "slot": i,
                "layer": now["layer"],
                "before": before,
                "after": after,
                "change": change,
                "moved": abs(change) > DRIFT_RTOL,
            }
        )
    return {
        "against": against,
        "rtol": DRIFT_RTOL,
        "slots_before": len(before_slots),
        "slots": rows,
        "moved": [r["slot"] for r in rows if r["moved"]],
    }


def build(
    contract: Contract,
    files: Sequence[FileSummary],
    *,
    checks: Sequence[str],
    read: int,
    complete: bool,
    previous: dict[str, Any] | None = None,
    against: str = "",
    cost: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The audit report of ``files`` (any order: everything is taken in path order)."""
    files = sorted(files, key=lambda f: f.path)
    merged = SetSummary.of(list(files))
    slots = _slots(contract, files, merged)
    found = [d for f in files for d in f.findings]
    outl = outliers(contract, files)
    moved = drift(previous, slots, against) if previous is not None else None
    errors = any(d.get("severity") == "error" for d in found)
    return {
        "schema_version": 1,
        "kind": "audit",
        "contract": str(contract.path),
        "name": contract.name,
        "ok": not (errors or outl or (moved and moved["moved"])),
        "complete": complete,
        "shards": len(files),
        "read": read,
        "cached": len(files) - read,
        "unreadable": merged.unreadable,
        "checks": list(checks),
        "findings": found,
        "slots": slots,
        "lengths": {**_moments(f.tokens for f in files), **merged.lengths.to_dict()},
        "coverage": {**_moments(f.coverage for f in files), **merged.coverage.to_dict()},
        "outliers": outl,
        "drift": moved,
        "cost": cost or {},
    }


def _moments(values: Any) -> dict[str, Any]:
    from .summaries import Moments

    m = Moments()
    for v in values:
        if v is not None:
            m.add(float(v))
    return m.to_dict()


def format_text(report: dict[str, Any]) -> str:
    """The report for a terminal: per-slot table, outliers, drift, lengths and coverage."""
    from ..tables import table

    def num(v: Any) -> str:
        return "-" if v is None else f"{v:.4g}"

    lines = ["per-shard median norm, per slot:"]
    rows = [
        [
            s["slot"],
            s["layer"],
            s["count"],
            *(num(s.get(k)) for k in ("median", "mad", "p5", "p95", "min", "max")),
        ]
        for s in report["slots"]
    ]
    header = ["slot", "layer", "shards", "median", "MAD", "p5", "p95", "min", "max"]
    lines.append(table(header, rows, right=range(2, 9)))
    outl = report["outliers"]
    if outl:
        paths = {o["path"] for o in outl}
        lines.append(f"\n{len(paths)} shard(s) stand out from the set:")
        lines += [f"  {o['label']}: {o['reason']}" for o in outl]
    moved = report["drift"]
    if moved is not None:
        lines.append(
            f"\ndrift against {moved['against']} (moved: change beyond {moved['rtol']:.0%}):"
        )
        lines += [
            f"  slot {r['slot']} ({r['layer']}): {r['before']:.4g} -> {r['after']:.4g} "
            f"({r['change']:+.1%}){'  MOVED' if r['moved'] else ''}"
            for r in moved["slots"]
        ]
        if moved["slots_before"] != len(report["slots"]):
            lines.append(
                f"  the previous audit had {moved['slots_before']} slots, this one "
                f"{len(report['slots'])}"
            )
    for key, what in (("lengths", "sequence length (tokens)"), ("coverage", "loss-mask coverage")):
        part = report[key]
        bins = ", ".join(f"[{num(lo)}, {num(hi)}): {n}" for lo, hi, n in part["bins"])
        lines.append(
            f"\n{what}: mean {num(part['mean'])}, min {num(part['min'])}, "
            f"max {num(part['max'])}; {bins or 'none'}"
        )
    return "\n".join(lines)
