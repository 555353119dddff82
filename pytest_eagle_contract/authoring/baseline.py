"""Baselines that move on purpose: re-measure a contract's norm bounds from current shards
and rewrite only those values in the YAML text, keeping key order and every comment but
the one beside a rewritten bound (which describes the new numbers).

The run that changes a baseline still fails (exit 1 / a failing ``baseline`` item), so an
update is always a reviewed diff, as in pytest-regressions. Before it rewrites, the update
runs the ``norms`` family of the contract as it stands on the same shards: where check
would say a slot looks like the embedding or fits another slot's bounds (swapped or
shifted layers, :data:`..checks.norms.LAYOUT_CAUSES`), the update says so too, with the
family's own findings, beside the bounds it changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..contract.model import Contract, NormBounds, load_contract, parse_contract
from ..errors import EagleContractError, UsageError
from ..shards.discovery import Sampling, shard_paths
from .observed import Observed, fit_bounds, observe

if TYPE_CHECKING:
    from ..findings import Finding


@dataclass(frozen=True)
class BoundChange:
    key: str
    old: NormBounds | None
    new: NormBounds

    def __str__(self) -> str:
        return f"{self.key}: {self.old or 'none'} -> {self.new}"


@dataclass(frozen=True)
class Update:
    """What ``update_contract`` changed, and what the norms family of the contract as it
    stood says of the shards the new bounds came from: findings whose cause is the slots'
    layout (empty: only the norms moved)."""

    changes: list[BoundChange]
    warnings: list[Finding] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The changes, then each warning's rule, place and hint, one line each (the
        plugin's ``baseline`` item lists them)."""
        out = [str(c) for c in self.changes]
        out += [f"warning: {f.code} {f.message} ({f.file}); hint: {f.hint}" for f in self.warnings]
        return out


def _fmt(bounds: NormBounds) -> str:
    return f"{{min: {bounds.low:.6g}, max: {bounds.high:.6g}}}"


def _same(a: NormBounds | None, b: NormBounds) -> bool:
    return a is not None and f"{a.low:.6g}" == f"{b.low:.6g}" and f"{a.high:.6g}" == f"{b.high:.6g}"


def measure(
    contract: Contract, shards: Iterable[Path] | None, sample: Sampling, seed: int
) -> tuple[list[NormBounds], Observed]:
    """The bounds the shards call for, and what was observed (per slot, each shard's
    median)."""
    training = contract.training
    if training is None:
        raise UsageError(f"{contract.path}: no training section to measure")
    paths = [p for p, _ in shard_paths(contract, shards, sample, seed)]
    obs = observe(paths, training.format, contract.target.hidden_size)
    if len(obs.medians) != len(training.slots):
        raise UsageError(
            f"the shards hold {len(obs.medians)} slots, the contract "
            f"{len(training.slots)}: fix the contract's slots first"
        )
    # drawn as infer draws them: as quiet as the contract's sharpness self-test allows, and
    # not cut apart where a reference capture tells the slots apart
    text = contract.path.read_text("utf-8") if contract.path.is_file() else None
    reference = contract.target.reference_capture and contract.target.model is not None

    def sharp(bounds: list[tuple[float, float]]) -> bool:
        if text is None:
            return True
        from ..sharpness.selftest import sharpness

        try:
            edited = parse_contract(rewrite(text, [NormBounds(*b) for b in bounds]), contract.path)
        except EagleContractError:
            return False
        return sharpness(edited).sharp

    fit = fit_bounds(obs.medians, obs.rows, sharp, cut=not reference)
    return [NormBounds(*b) for b in fit.bounds], obs


def rewrite(
    text: str,
    new: Sequence[NormBounds | None],
    comments: Sequence[str | None] = (),
) -> str:
    """``text`` with each ``training.slots[i].norm`` replaced (or added) by ``new[i]`` (None:
    that slot left as it is); ``comments[i]``, where given, replaces the comment at the end
    of the line the rewritten bound ends on (or is added there)."""
    import yaml

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    training = _child(root, "training")
    slots = _child(training, "slots") if training is not None else None
    if not isinstance(slots, yaml.SequenceNode):
        raise UsageError("the contract has no training.slots list")
    edits: list[tuple[int, int, str]] = []
    notes = list(comments) + [None] * (len(new) - len(comments))
    for node, bounds, note in zip(slots.value, new, notes):
        if bounds is None:
            continue
        value = _child(node, "norm")
        if value is not None:
            edits.append((value.start_mark.index, value.end_mark.index, _fmt(bounds)))
            ends = node.end_mark.index if node.flow_style else value.end_mark.index
        elif node.flow_style:
            close = node.end_mark.index - 1
            edits.append((close, close, f", norm: {_fmt(bounds)}"))
            ends = node.end_mark.index
        else:  # a new last key, after the line (and its comment) the node ends on
            at = _line_end(text, node.value[-1][1].end_mark.index)
            indent = " " * node.start_mark.column
            tail = f"  # {_one_line(note)}" if note else ""
            edits.append((at, at, f"\n{indent}norm: {_fmt(bounds)}{tail}"))
            continue
        if note:
            edits.append(_comment_edit(text, ends, note))
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def _line_end(text: str, at: int) -> int:
    end = text.find("\n", at)
    return len(text) if end < 0 else end


def _one_line(note: str) -> str:
    return " ".join(note.split())


def _comment_edit(text: str, at: int, note: str) -> tuple[int, int, str]:
    """The edit that puts ``# note`` at the end of the line ``at`` is on: in place of the
    comment there, or after the line's last character; nothing where more YAML follows."""
    end = _line_end(text, at)
    rest = text[at:end]
    stripped = rest.lstrip()
    if stripped and not stripped.startswith("#"):
        return at, at, ""  # another node follows on the line (a flow list): left alone
    return at, end, f"  # {_one_line(note)}"


def _child(node: Any, key: str) -> Any:
    import yaml

    if not isinstance(node, yaml.MappingNode):
        return None
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return v
    return None


def update_contract(
    path: Path, shards: Iterable[Path] | None = None, sample: Sampling = None, seed: int = 0
) -> Update:
    """Re-measure and rewrite ``path`` in place: the changes made (none: nothing moved) and
    what the norms family says of the shards' layout under the bounds as they were."""
    contract = load_contract(path)
    new, obs = measure(contract, shards, sample, seed)
    assert contract.training is not None
    warnings = layout_warnings(contract, shards, sample, seed)
    changes = [
        BoundChange(f"training.slots[{spec.index}].norm", spec.norm, bounds)
        for spec, bounds in zip(contract.training.slots, new)
        if not _same(spec.norm, bounds)
    ]
    if changes:
        moved = {c.key for c in changes}
        keep: list[NormBounds | None] = [
            b if f"training.slots[{i}].norm" in moved else None for i, b in enumerate(new)
        ]
        notes = [_note(i, obs, warnings) for i in range(len(new))]
        text = rewrite(path.read_text("utf-8"), keep, notes)
        parse_contract(text, path)  # never leave a contract that would not load
        from ..outputs import write_text

        write_text(path, text, "", replace=True)  # atomic: never half a contract
    return Update(changes, warnings)


def layout_warnings(
    contract: Contract, shards: Iterable[Path] | None, sample: Sampling, seed: int
) -> list[Finding]:
    """The ``norms`` family's findings on these shards, under the contract as it stands,
    whose cause is the slots' layout (check's own words: slot 0 looks like the embedding,
    the value fits the bounds of slot k: slots swapped or layers shifted)."""
    from ..checks.norms import layout_moved
    from ..plan.planner import Runner, plan, run_units

    units = plan(contract, list(shards) if shards else None, sample, seed, checks=["norms"])
    return [f for f in run_units(units, Runner()).findings if layout_moved(f)]


def _note(index: int, obs: Observed, warnings: list[Finding]) -> str:
    """The comment beside slot ``index``'s rewritten bound: where it came from, the medians
    it spans, and what check said of the slot."""
    values = obs.medians[index]
    note = (
        f"slot {index}: re-measured by `eagle-contract infer --update` from {obs.shards} "
        f"shard(s); medians {min(values):.6g}..{max(values):.6g}"
    )
    said = next((f for f in warnings if f.slot == index), None)
    if said is not None:
        note += f"; check: {said.code} {said.hint}"
    return note
