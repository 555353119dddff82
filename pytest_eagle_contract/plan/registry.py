"""Every check family, in the order their units run. A new family: one module with a
``FAMILY`` object, one line here (and its codes in findings.RULES and docs/rules.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..checks import (
    capture,
    draft,
    draft_config,
    evidence,
    files,
    identity,
    layout,
    measured,
    norms,
    precision,
    probe,
    profile,
    structure,
    token_parity,
    tokens,
    values,
    vocabulary,
)
from ..checks.family import CheckFamily
from ..sharpness import family as sharpness

if TYPE_CHECKING:
    from ..contract.model import Contract
    from ..findings import Finding
    from ..shards.shard import Shard

FAMILIES: tuple[CheckFamily, ...] = (
    layout.FAMILY,
    draft.FAMILY,
    draft_config.FAMILY,
    vocabulary.FAMILY,
    probe.FAMILY,
    measured.FAMILY,
    profile.FAMILY,
    sharpness.FAMILY,
    files.FAMILY,
    structure.FAMILY,
    values.FAMILY,
    precision.FAMILY,
    norms.FAMILY,
    evidence.FAMILY,
    capture.FAMILY,
    identity.FAMILY,
    tokens.TOKENIZER_FAMILY,
    tokens.FAMILY,
    token_parity.FAMILY,
)
BY_NAME: dict[str, CheckFamily] = {f.name: f for f in FAMILIES}
SELECTABLE: tuple[str, ...] = tuple(f.name for f in FAMILIES if f.selectable)


def owner(code: str) -> CheckFamily:
    """The family that owns a rule code."""
    return next(f for f in FAMILIES if code in f.codes)


def shard_check(name: str) -> Callable[[Contract, Shard], list[Finding]]:
    """The pure (contract, shard) function of a family that needs nothing but the shard."""
    check = BY_NAME[name].on_shard
    if check is None:
        raise ValueError(f"check family {name!r} needs more than a shard")
    return check


def markdown_table() -> str:
    """The check-family table of docs/rules.md (a test keeps the two equal)."""
    rows = [
        "| family | runs | needs | rule codes | what it checks |",
        "| --- | --- | --- | --- | --- |",
    ]
    for f in FAMILIES:
        runs = "per shard" if f.scope == "shard" else "per contract"
        if not f.default:
            runs += ", on request" if f.selectable else ", when needed"
        rows.append(
            f"| `{f.name}` | {runs} | {', '.join(sorted(f.needs))} | "
            f"{', '.join(f.codes)} | {f.summary} |"
        )
    return "\n".join(rows)
