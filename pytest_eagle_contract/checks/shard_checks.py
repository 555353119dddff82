"""The per-shard checks: a contract and one read shard in, findings out.

Each check family is one pytest item per shard: ``structure``, ``values``, ``norms``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ..contract.model import Contract, SlotSpec, TrainingSpec
from ..errors import ShardReadError
from ..findings import Finding
from ..shards.reading import Sample, Slot, dtype_name, read_sample
from ..stats import NormStats, guess, norm_stats


@dataclass
class Shard:
    """A shard read once, with its slots and norm statistics computed on first use."""

    path: Path
    label: str
    hidden_size: int | None
    sample: Sample | None = None
    error: ShardReadError | None = None
    _stats: dict[int, NormStats] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path, label: str, format: str, hidden_size: int | None) -> Shard:
        try:
            return cls(path, label, hidden_size, sample=read_sample(path, format))
        except ShardReadError as exc:
            return cls(path, label, hidden_size, error=exc)

    @cached_property
    def _split(self) -> tuple[list[Slot], list[str]]:
        assert self.sample is not None
        return self.sample.slots(self.hidden_size)

    @property
    def slots(self) -> list[Slot]:
        return self._split[0]

    @property
    def split_problems(self) -> list[str]:
        return self._split[1]

    def stats(self, index: int) -> NormStats:
        if index not in self._stats:
            self._stats[index] = norm_stats(self.slots[index].tensor)
        return self._stats[index]


def _finding(contract: Contract, shard: Shard, code: str, message: str, *, key: str = "training",
             slot: int | None = None, expected: object = "", found: object = "",
             hint: str = "") -> Finding:
    return Finding(code, message, expected=str(expected), found=str(found), file=shard.label,
                   slot=slot, contract=str(contract.path), line=contract.line_of(key), hint=hint)


def _spec(contract: Contract) -> TrainingSpec:
    if contract.training is None:
        raise ValueError(f"{contract.path}: the contract has no 'training' section")
    return contract.training


def check_structure(contract: Contract, shard: Shard) -> list[Finding]:
    spec = _spec(contract)
    sample = shard.sample
    assert sample is not None
    out: list[Finding] = []
    add = out.append
    fmt = sample.format
    keys = sample.keys
    for key in sorted(fmt.required_keys - fmt.optional_keys - keys):
        add(_finding(contract, shard, "EC101", f"key {key!r} is missing", key="training.format",
                     expected=f"{fmt.name} keys {sorted(fmt.required_keys)}", found=sorted(keys),
                     hint="the shard was written by another tool or version than "
                          f"training.format says ({fmt.name})"))
    allowed = fmt.required_keys | fmt.optional_keys | spec.extra_keys
    for key in sorted(keys - allowed):
        add(_finding(contract, shard, "EC102", f"unexpected key {key!r}", key="training.extra_keys",
                     expected=sorted(allowed), found=key,
                     hint="list it under training.extra_keys if the pipeline means to write it"))
    ids, mask = sample.input_ids, sample.loss_mask
    for name, tensor, want, key in (
        (fmt.ids_key, ids, spec.input_ids_dtype, "training.input_ids"),
        (fmt.mask_key or "loss_mask", mask, spec.loss_mask_dtype, "training.loss_mask"),
    ):
        if tensor is not None and dtype_name(tensor.dtype) != want:
            add(_finding(contract, shard, "EC201", f"{name} has dtype {dtype_name(tensor.dtype)}",
                         key=key, expected=want, found=dtype_name(tensor.dtype)))
    for problem in shard.split_problems:
        add(_finding(contract, shard, "EC203", problem, key="target.hidden_size",
                     expected=f"n_slots * hidden_size = n * {contract.target.hidden_size}",
                     found=problem,
                     hint="hidden_size in the contract, or the layers captured, disagree with "
                          "the shard"))
    slots = shard.slots
    hidden = contract.target.hidden_size
    for slot in slots:
        if slot.tensor.dim() != 2 or slot.tensor.shape[-1] != hidden:
            add(_finding(contract, shard, "EC203", f"slot {slot.index} ({slot.source}) has shape "
                         f"{list(slot.tensor.shape)}", key="target.hidden_size", slot=slot.index,
                         expected=f"[T, {hidden}]", found=list(slot.tensor.shape)))
    if not shard.split_problems and len(slots) != len(spec.slots):
        add(_finding(contract, shard, "EC204", f"the shard holds {len(slots)} slots, the contract "
                     f"{len(spec.slots)}", key="training.slots", expected=len(spec.slots),
                     found=f"{len(slots)}: " + ", ".join(s.source for s in slots),
                     hint=_count_hint(len(slots), len(spec.slots))))
    for slot, slot_spec in zip(slots, spec.slots):
        if slot.dtype != slot_spec.dtype:
            add(_finding(contract, shard, "EC201", f"slot {slot.index} ({slot.source}) has dtype "
                         f"{slot.dtype}", key=f"training.slots[{slot.index}]", slot=slot.index,
                         expected=slot_spec.dtype, found=slot.dtype,
                         hint="the draft will be served on the target's activation dtype "
                              f"({contract.target.dtype})"))
    lengths = {}
    if ids is not None:
        lengths[fmt.ids_key] = int(ids.shape[0])
    if mask is not None:
        lengths[fmt.mask_key or "loss_mask"] = int(mask.shape[0])
    for slot in slots:
        if slot.tensor.dim() >= 1:
            lengths[f"slot {slot.index} ({slot.source})"] = int(slot.tensor.shape[0])
    reference = lengths.get(fmt.ids_key)
    if reference is not None:
        for name, length in lengths.items():
            if length != reference:
                add(_finding(contract, shard, "EC202", f"{name} has {length} entries beside "
                             f"{reference} {fmt.ids_key}", key="training.sequence",
                             expected=reference, found=length,
                             hint="a generator truncated one and not the other "
                                  "(e.g. prompts cut to max_model_len - 1, mask left whole)"))
        row = sample.dataset_row
        if row is not None and ids is not None:
            row_ids = row.get("input_ids")
            if row_ids is None or not (row_ids.shape == ids.shape and bool((row_ids == ids).all())):
                add(_finding(contract, shard, "EC206", f"token_ids differ from input_ids of row "
                             f"{row['row']} of the dataset in {row['dataset']}",
                             key="training.format",
                             expected="the same ids (the trainer skips the sample otherwise)",
                             found="no such row" if row_ids is None else
                             f"{int(ids.numel())} token ids vs {int(row_ids.numel())} row ids",
                             hint="hs_{i} must be the capture of dataset row i; the files were "
                                  "renumbered or the dataset regenerated"))
        if not spec.min_length <= reference <= spec.max_length:
            add(_finding(contract, shard, "EC205", f"sequence of {reference} tokens",
                         key="training.sequence",
                         expected=f"[{spec.min_length}, {spec.max_length}]", found=reference))
    return out


def _count_hint(found: int, expected: int) -> str:
    if found == expected + 1:
        return "one slot too many: an embedding or duplicated layer in front?"
    if found + 1 == expected:
        return "one slot missing: did the capture drop a layer, or the target state?"
    return "the capture wrote another set of layers than the contract describes"


def check_values(contract: Contract, shard: Shard) -> list[Finding]:
    import torch

    spec = _spec(contract)
    sample = shard.sample
    assert sample is not None
    out: list[Finding] = []
    ids, mask = sample.input_ids, sample.loss_mask
    vocab = contract.target.vocab_size
    if ids is not None and ids.numel():
        bad = ((ids < 0) | (ids >= vocab)) if vocab else (ids < 0)
        if bool(bad.any()):
            first = int(bad.nonzero()[0, 0])
            out.append(_finding(
                contract, shard, "EC301", f"{int(bad.sum())} input ids outside the vocabulary, "
                f"first at position {first}", key="target.vocab_size",
                expected=f"[0, {vocab})" if vocab else ">= 0", found=f"{int(ids[first])} "
                f"(min {int(ids.min())}, max {int(ids.max())})",
                hint="the shard was tokenized with another tokenizer, or vocab_size is wrong"))
    if mask is not None and mask.numel():
        not_binary = (mask != 0) & (mask != 1)
        if bool(not_binary.any()):
            first = int(not_binary.nonzero()[0, 0])
            values = sorted({int(v) for v in torch.unique(mask)[:8]})
            out.append(_finding(
                contract, shard, "EC302", f"loss_mask holds {int(not_binary.sum())} values other "
                f"than 0 and 1, first at position {first}", key="training.loss_mask",
                expected="{0, 1}", found=values))
        elif not spec.allow_all_zero_loss_mask and not bool(mask.any()):
            out.append(_finding(
                contract, shard, "EC303", f"loss_mask is all zero over {mask.numel()} tokens",
                key="training.loss_mask", expected="at least one 1", found="sum 0",
                hint="the chat template lost the assistant turns; set loss_mask.allow_all_zero "
                     "if such samples are intended"))
    for slot in shard.slots:
        if slot.tensor.dim() != 2:
            continue
        stats = shard.stats(slot.index)
        if stats.nonfinite_tokens:
            out.append(_finding(
                contract, shard, "EC304", f"slot {slot.index} ({slot.source}) holds NaN or Inf in "
                f"{stats.nonfinite_tokens} of {stats.tokens} tokens, first at token "
                f"{stats.first_nonfinite}", key=f"training.slots[{slot.index}]", slot=slot.index,
                expected="finite values", found=f"{stats.nonfinite_tokens} bad tokens",
                hint="the target overflowed (fp16?) or the capture read uninitialised memory"))
    return out


def check_norms(contract: Contract, shard: Shard) -> list[Finding]:
    spec = _spec(contract)
    out: list[Finding] = []
    slots = [s for s in shard.slots if s.tensor.dim() == 2]
    measured = {s.index: shard.stats(s.index) for s in slots}
    for slot in slots:
        if slot.index >= len(spec.slots):
            continue
        slot_spec = spec.slots[slot.index]
        stats = measured[slot.index]
        if slot_spec.norm is None or math.isnan(stats.median) or stats.median in slot_spec.norm:
            continue
        others = [v for k, v in measured.items() if k != slot.index]
        out.append(_finding(
            contract, shard, "EC401", f"slot {slot.index} ({slot.source}) has median per-token "
            f"norm {stats.median:.4g}, outside the bounds for {slot_spec.layer}",
            key=f"training.slots[{slot.index}].norm", slot=slot.index,
            expected=f"{slot_spec.layer}: median in {slot_spec.norm}",
            found=f"median {stats.median:.4g} (p5 {stats.p5:.4g}, p95 {stats.p95:.4g})",
            hint=_norm_hint(slot.index, stats, spec.slots, contract.target.hidden_size, others)))
    return out


def _norm_hint(index: int, stats: NormStats, specs: tuple[SlotSpec, ...], hidden: int,
               others: list[NormStats]) -> str:
    words = guess(stats, hidden, others)
    if words == "embedding-like":
        return (f"slot {index} looks like the embedding: median norm {stats.median:.3g}, "
                "small and flat; an embedding slot in front of the fc input?")
    fits = [s for s in specs if s.index != index and s.norm and stats.median in s.norm]
    if fits:
        names = ", ".join(f"slot {s.index} ({s.layer})" for s in fits)
        return f"the value fits the bounds of {names}: slots swapped or layers shifted?"
    bounds = specs[index].norm
    assert bounds is not None
    side = "above" if stats.median > bounds.high else "below"
    return (f"the norm is {side} the bounds: the capture took a deeper or shallower layer "
            "(a one-layer shift), or the bounds need an update")


CheckFn = Callable[[Contract, Shard], list[Finding]]
SHARD_CHECKS: dict[str, CheckFn] = {
    "structure": check_structure,
    "values": check_values,
    "norms": check_norms,
}
