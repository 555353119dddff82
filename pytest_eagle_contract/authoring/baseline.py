"""Baselines that move on purpose: re-measure a contract's norm bounds from current shards
and rewrite only those values in the YAML text, keeping comments and key order.

The run that changes a baseline still fails (exit 1 / a failing ``baseline`` item), so an
update is always a reviewed diff, as in pytest-regressions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..contract.model import Contract, NormBounds, load_contract, parse_contract
from ..errors import EagleContractError, UsageError
from ..shards.discovery import Sampling, shard_paths
from .observed import fit_bounds, observe


@dataclass(frozen=True)
class BoundChange:
    key: str
    old: NormBounds | None
    new: NormBounds

    def __str__(self) -> str:
        return f"{self.key}: {self.old or 'none'} -> {self.new}"


def _fmt(bounds: NormBounds) -> str:
    return f"{{min: {bounds.low:.6g}, max: {bounds.high:.6g}}}"


def _same(a: NormBounds | None, b: NormBounds) -> bool:
    return a is not None and f"{a.low:.6g}" == f"{b.low:.6g}" and f"{a.high:.6g}" == f"{b.high:.6g}"


def measure(
    contract: Contract, shards: Iterable[Path] | None, sample: Sampling, seed: int
) -> list[NormBounds]:
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
    return [NormBounds(*b) for b in fit.bounds]


def rewrite(text: str, new: list[NormBounds]) -> str:
    """``text`` with each ``training.slots[i].norm`` replaced (or added) by ``new[i]``."""
    import yaml

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    training = _child(root, "training")
    slots = _child(training, "slots") if training is not None else None
    if not isinstance(slots, yaml.SequenceNode):
        raise UsageError("the contract has no training.slots list")
    edits: list[tuple[int, int, str]] = []
    for node, bounds in zip(slots.value, new):
        value = _child(node, "norm")
        if value is not None:
            edits.append((value.start_mark.index, value.end_mark.index, _fmt(bounds)))
        elif node.flow_style:
            close = node.end_mark.index - 1
            edits.append((close, close, f", norm: {_fmt(bounds)}"))
        else:
            last = node.value[-1][1].end_mark
            indent = " " * node.start_mark.column
            at = last.index
            edits.append((at, at, f"\n{indent}norm: {_fmt(bounds)}"))
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


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
) -> list[BoundChange]:
    """Re-measure and rewrite ``path`` in place; the changes made (empty: nothing moved)."""
    contract = load_contract(path)
    new = measure(contract, shards, sample, seed)
    assert contract.training is not None
    changes = [
        BoundChange(f"training.slots[{spec.index}].norm", spec.norm, bounds)
        for spec, bounds in zip(contract.training.slots, new)
        if not _same(spec.norm, bounds)
    ]
    if changes:
        text = rewrite(path.read_text("utf-8"), new)
        parse_contract(text, path)  # never leave a contract that would not load
        from ..outputs import write_text

        write_text(path, text, "", replace=True)  # atomic: never half a contract
    return changes
