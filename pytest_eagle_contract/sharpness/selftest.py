"""The sharpness self-test: is the contract strict enough to catch every pipeline bug?

For every mutation class (``mutations.KINDS``) and each of its cases, a good record is
built to the contract, the bug is put in, and the contract's own checks run on it (the
layout check, for a contract-level mutation). The case is caught when the expected rule
code fails. The good record is the hardest one for the contract: its norms are chosen,
inside the bounds, so that the mutated record stays inside them if any record can (both
medians in the overlap of two slots' bounds, for a swap). So "caught" means caught for
every good shard, not for a lucky one. Deterministic (fixed seed), no Hypothesis needed.
See docs/sharpness.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..contract.model import Contract
from ..findings import Finding, finding
from . import records as rec
from .mutations import KINDS, Fresh, Mutation, Source, mutation_list

TOKENS = 8  # tokens of a witness record (within training.sequence)
SEED = 0
SPREAD = 0.2
EVIDENCE_KINDS = frozenset({"swap-slots", "shift-layers", "embed-in-front", "target-twin"})
"""Mutation classes that put another layer's state in a slot: a reference capture sees them."""


@dataclass(frozen=True)
class CaseResult:
    """One mutation case run against the contract."""

    mutation: Mutation
    caught: bool
    codes: tuple[str, ...]  # error codes the mutated record (or contract) raised
    advice: str = ""  # why it got through and what to tighten
    key: str = "training.slots"  # the contract key to tighten
    reproduce: str = ""


@dataclass(frozen=True)
class SharpnessRow:
    """One mutation class: caught is None when no case applies to the contract."""

    kind: str
    caught: bool | None
    expected: str
    seen: tuple[str, ...]
    cases: int
    escaped: tuple[str, ...]


@dataclass(frozen=True)
class SharpnessReport:
    contract: Contract
    results: list[CaseResult]
    rows: list[SharpnessRow]
    findings: list[Finding]

    @property
    def sharp(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)


def _errors(findings: Sequence[Finding]) -> tuple[str, ...]:
    return tuple(sorted({f.code for f in findings if f.severity == "error"}))


MAX_ELEMENTS = 1 << 24  # tokens * hidden * slots of one witness record (64 MiB in float32)


def _length(contract: Contract) -> int:
    """Tokens of a witness record: within training.sequence, and never more than the
    element budget allows (a contract may allow 2**24 tokens of width 65536)."""
    spec = contract.training
    assert spec is not None
    budget = max(1, MAX_ELEMENTS // (contract.target.hidden_size * max(len(spec.slots), 1)))
    return min(max(TOKENS, spec.min_length), spec.max_length, budget)


def _recipe(contract: Contract, norms: Sequence[float]) -> rec.Recipe:
    T = _length(contract)
    return rec.Recipe(
        seed=SEED,
        length=T,
        slots=tuple(rec.SlotRecipe(n, SPREAD) for n in norms),
        mask="prefix" if T > 1 else "all",
        mask_at=T // 3,
    )


def _accept(contract: Contract, index: int) -> tuple[float, float]:
    """The median norms slot ``index`` accepts, pulled in by the dtype's rounding."""
    assert contract.training is not None
    slot = contract.training.slots[index]
    return (0.0, math.inf) if slot.norm is None else rec.norm_range(slot)


def _enforced(contract: Contract, index: int) -> tuple[float, float]:
    """The median norms the check lets through for slot ``index`` (its bounds as written):
    a mutated slot passes anywhere in them, the edges included."""
    assert contract.training is not None
    bounds = contract.training.slots[index].norm
    return (0.0, math.inf) if bounds is None else (bounds.low, bounds.high)


def _centers(contract: Contract) -> list[float]:
    assert contract.training is not None
    return [rec.center(*rec.norm_range(s)) for s in contract.training.slots]


def witness(contract: Contract, mutation: Mutation) -> list[float]:
    """Median norms of the good record that give ``mutation`` its best chance to pass.

    Each mutated slot k holding stored slot j times c asks n_j to lie in bounds_k / c; a
    slot j is put in the middle of the intersection of its own bounds with all of those.
    Where an intersection is empty the norms alone catch the case, whatever the record.
    """
    assert contract.training is not None
    n = len(contract.training.slots)
    ranges = [_accept(contract, j) for j in range(n)]
    enforced = [_enforced(contract, k) for k in range(n)]
    norms = _centers(contract)
    if mutation.op != "slots" or len(mutation.slot_map) != n:
        return norms
    for j in range(n):
        lo, hi = ranges[j]
        for k, entry in enumerate(mutation.slot_map):
            if isinstance(entry, Source) and entry.slot == j and k < n:
                klo, khi = enforced[k]  # what the check lets through, not the good range
                lo, hi = max(lo, klo / entry.factor), min(hi, khi / entry.factor)
        if lo <= hi:
            norms[j] = rec.center(lo, hi)
    return norms


class _Records:
    """Witness records of one contract, built once each, with their baseline verdict."""

    def __init__(self, contract: Contract) -> None:
        self.contract = contract
        self.slots: rec.SlotCache = {}
        self.good: dict[tuple[float, ...], bool] = {}

    def record(self, norms: Sequence[float]) -> rec.ShardRecord:
        return rec.build(self.contract, _recipe(self.contract, norms), self.slots)

    def is_good(self, norms: Sequence[float]) -> bool:
        key = tuple(norms)
        if key not in self.good:
            self.good[key] = not _errors(rec.check_record(self.contract, self.record(norms)))
        return self.good[key]


def _run(
    contract: Contract, mutation: Mutation, records: _Records, layout_codes: tuple[str, ...]
) -> CaseResult | None:
    if mutation.level == "contract":
        from ..checks.layout import check_layout

        found = check_layout(mutation.apply_contract(contract), explain=False)
        codes = tuple(
            c
            for c in _errors([f for f in found if f.code not in contract.waivers])
            if c not in layout_codes
        )
        caught = mutation.expected in codes
        return CaseResult(
            mutation,
            caught,
            codes,
            *(("", "serving") if caught else _advice(contract, mutation)),
            reproduce=f"check_layout({mutation!r}.apply_contract(contract))",
        )
    norms = witness(contract, mutation)
    if not records.is_good(norms):  # rounding put the hardest record out of bounds
        norms = _centers(contract)
    record = records.record(norms)
    try:
        mutated = mutation.apply(record)
    except rec.NotApplicable:
        return None
    codes = _errors(rec.check_record(contract, mutated))
    if mutation.expected not in codes and _evidence_catches(contract, mutation):
        codes = tuple(sorted({*codes, "EC604"}))
    caught = mutation.expected in codes or "EC604" in codes
    advice, key = ("", "") if caught else _advice(contract, mutation)
    return CaseResult(
        mutation, caught, codes, advice, key, reproduce=f"check_record(contract, {mutated!r})"
    )


def _evidence_catches(contract: Contract, m: Mutation) -> bool:
    """A reference capture (``target.model`` with ``reference_capture``) names every slot's
    layer on the shard's own tokens, so a slot holding another layer's state is EC604."""
    t = contract.target
    return (
        t.model is not None
        and t.reference_capture
        and "EC604" not in contract.waivers
        and m.kind in EVIDENCE_KINDS
    )


def _slot_key(i: int) -> str:
    return f"training.slots[{i}].norm"


def _advice(contract: Contract, m: Mutation) -> tuple[str, str]:
    """Why ``m`` got through, and the contract key to tighten."""
    assert contract.training is not None
    slots = contract.training.slots
    if m.expected in contract.waivers:
        return (
            f"the contract waives {m.expected} ({contract.waivers[m.expected]}): a waived "
            f"code catches nothing",
            "waive",
        )
    if m.op != "slots":
        return f"the checks did not report {m.expected}", "training"
    changed = [
        (k, e)
        for k, e in enumerate(m.slot_map)
        if k < len(slots) and not (isinstance(e, Source) and e.slot == k and e.factor == 1.0)
    ]
    unbounded = [k for k, _ in changed if slots[k].norm is None]
    if unbounded:
        k = unbounded[0]
        return (
            f"slot {k} ({slots[k].layer}) has no norm bounds: add {_slot_key(k)} "
            "(eagle-contract infer measures them)",
            _slot_key(k),
        )
    if m.kind == "swap-slots":
        (i, _), (j, _) = changed[:2]
        a, b = slots[i].norm, slots[j].norm
        assert a is not None and b is not None
        lo, hi = max(a.low, b.low), min(a.high, b.high)
        return (
            f"slots {i} ({slots[i].layer}) and {j} ({slots[j].layer}) have overlapping "
            f"norm bounds {a} and {b}: a shard whose two medians both lie in "
            f"[{lo:.4g}, {hi:.4g}] passes with the two swapped; tighten {_slot_key(i)} "
            f"(line {contract.line_of(_slot_key(i))}) or {_slot_key(j)} "
            f"(line {contract.line_of(_slot_key(j))}) so they do not overlap, or set "
            "target.model with reference_capture: true (a reference capture tells them apart)",
            _slot_key(i),
        )
    parts = []
    for k, entry in changed:
        bounds = slots[k].norm
        if isinstance(entry, Fresh):
            parts.append(
                f"slot {k} ({slots[k].layer}) bounds {bounds} accept {entry.what} "
                f"(modelled median norm {entry.norm:.4g})"
            )
        else:
            assert bounds is not None
            span = bounds.high / bounds.low if bounds.low > 0 else math.inf
            source = "its own norm" if entry.slot == k else f"slot {entry.slot}'s norm"
            parts.append(
                f"slot {k} ({slots[k].layer}) bounds {bounds} (a span of x{span:.3g}) "
                f"accept {source} x{entry.factor:.4g}"
            )
    k = changed[0][0]
    return (
        ("; ".join(parts) or "the mutated values fit every bound")
        + f"; tighten {_slot_key(k)} (line {contract.line_of(_slot_key(k))})"
        + (" or the other slots named" if len(changed) > 1 else ""),
        _slot_key(k),
    )


def sharpness(contract: Contract) -> SharpnessReport:
    """Run every mutation case against ``contract``; rows for the table, findings for the
    gate (EC801 per class that gets through, EC802 when a good record fails)."""
    if contract.training is None:
        return SharpnessReport(contract, [], [], [])
    records = _Records(contract)
    base = records.record(_centers(contract))
    base_findings = rec.check_record(contract, base)
    records.good[tuple(_centers(contract))] = not _errors(base_findings)
    if _errors(base_findings):
        contradiction = finding(
            "EC802",
            "a shard built to the contract's own description fails it: "
            + ", ".join(_errors(base_findings)),
            contract=contract,
            key="training",
            expected="no findings",
            found="; ".join(f"{f.code} {f.message}" for f in base_findings),
            hint="the contract contradicts itself (bounds, dtypes, lengths, vocabulary); "
            "no mutation can be judged against it",
            details=f"reproduce: check_record(contract, {base!r})",
        )
        empty = [SharpnessRow(kind, None, code, (), 0, ()) for kind, (code, _) in KINDS.items()]
        return SharpnessReport(contract, [], empty, [contradiction])
    layout_codes: tuple[str, ...] = ()
    if contract.serving is not None:
        from ..checks.layout import check_layout

        layout_codes = _errors(
            [f for f in check_layout(contract, explain=False) if f.code not in contract.waivers]
        )
    results = [
        r
        for m in mutation_list(contract)
        if (r := _run(contract, m, records, layout_codes)) is not None
    ]
    rows: list[SharpnessRow] = []
    findings: list[Finding] = []
    for kind, (code, bug) in KINDS.items():
        mine = [r for r in results if r.mutation.kind == kind]
        expected = "/".join(sorted({r.mutation.expected for r in mine} or {code}))
        seen = tuple(sorted({c for r in mine for c in r.codes}))
        escaped = [r for r in mine if not r.caught]
        rows.append(
            SharpnessRow(
                kind,
                (not escaped) if mine else None,
                expected,
                seen,
                len(mine),
                tuple(r.mutation.case for r in escaped),
            )
        )
        if escaped:
            first = escaped[0]
            findings.append(
                finding(
                    "EC801",
                    f"the contract lets '{kind}' through ({bug}): "
                    + ", ".join(r.mutation.case for r in escaped),
                    expected=f"caught by {expected}",
                    found="; ".join(
                        f"{r.mutation.case}: {', '.join(r.codes) or 'no finding'}" for r in escaped
                    ),
                    contract=contract,
                    key=first.key,
                    hint=first.advice,
                    details="\n".join(
                        [
                            *(f"{r.mutation.case}: {r.advice}" for r in escaped[1:]),
                            f"reproduce: eagle-contract check --sharpness {contract.path}",
                            f"in Python: {first.reproduce}",
                        ]
                    ),
                    extra={"kind": kind, "cases": [r.mutation.id for r in escaped]},
                )
            )
    findings = [f for f in findings if f.code not in contract.waivers]
    return SharpnessReport(contract, results, rows, findings)


def check_sharpness(contract: Contract) -> list[Finding]:
    """EC801 for every mutation class the contract lets through (EC802 if a good shard
    fails it); nothing when the contract is sharp."""
    return sharpness(contract).findings


def sharpness_table(contract: Contract) -> list[SharpnessRow]:
    return sharpness(contract).rows


def format_sharpness_table(rows: Sequence[SharpnessRow]) -> str:
    """class | caught | expected | seen | cases, one line per mutation class."""
    header = ("class", "caught", "expected", "codes seen", "cases")
    lines = [header]
    for r in rows:
        caught = "n/a" if r.caught is None else ("yes" if r.caught else "NO")
        cases = f"{r.cases - len(r.escaped)}/{r.cases}" if r.cases else "-"
        if r.escaped:
            cases += "  got through: " + "; ".join(r.escaped)
        lines.append((r.kind, caught, r.expected, ",".join(r.seen) or "-", cases))
    widths = [max(len(line[i]) for line in lines) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line[:4], widths)) + "  " + line[4]
        for line in lines
    ).rstrip()
