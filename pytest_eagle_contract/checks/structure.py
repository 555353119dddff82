"""The ``structure`` family: keys, dtypes, widths, slot count, lengths, dataset rows."""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import TYPE_CHECKING, Any

from ..findings import Finding, finding, not_run
from ..shards.reading import comparable, dtype_name
from .family import CheckFamily, shard_input

if TYPE_CHECKING:
    from ..contract.model import Contract
    from ..shards.shard import Shard


def check_structure(contract: Contract, shard: Shard) -> list[Finding]:
    spec, sample = shard_input(contract, shard)
    out: list[Finding] = []
    add = out.append
    at = partial(finding, contract=contract, file=shard.label)  # where every finding is
    fmt = sample.format
    keys = sample.keys
    for key in sorted(fmt.required_keys - fmt.optional_keys - keys):
        add(
            at(
                "EC101",
                f"key {key!r} is missing",
                key="training.format",
                expected=f"{fmt.name} keys {sorted(fmt.required_keys)}",
                found=sorted(keys),
                hint="the shard was written by another tool or version than "
                f"training.format says ({fmt.name})",
            )
        )
    allowed = fmt.required_keys | fmt.optional_keys | spec.extra_keys
    for key in sorted(keys - allowed):
        add(
            at(
                "EC102",
                f"unexpected key {key!r}",
                key="training.extra_keys",
                expected=sorted(allowed),
                found=key,
                hint="list it under training.extra_keys if the pipeline means to write it",
            )
        )
    ids, mask = sample.ids, sample.mask
    for name, tensor, want, key in (
        (fmt.ids_key, ids, spec.input_ids_dtype, "training.input_ids"),
        (fmt.mask_key or "loss_mask", mask, spec.loss_mask_dtype, "training.loss_mask"),
    ):
        if tensor is not None and dtype_name(tensor.dtype) != want:
            add(
                at(
                    "EC201",
                    f"{name} has dtype {dtype_name(tensor.dtype)}",
                    key=key,
                    expected=want,
                    found=dtype_name(tensor.dtype),
                )
            )
    for problem in shard.split_problems:
        add(
            at(
                "EC203",
                problem,
                key="target.hidden_size",
                expected=f"n_slots * hidden_size = n * {contract.target.hidden_size}",
                found=problem,
                hint="hidden_size in the contract, or the layers captured, disagree with the shard",
            )
        )
    slots = shard.slots
    hidden = contract.target.hidden_size
    for slot in slots:
        streams = _hc_streams(slot.array.shape, hidden)
        if streams:
            add(
                at(
                    "EC207",
                    f"slot {slot.index} ({slot.source}) is {slot.array.shape[-1]} wide: "
                    f"{streams} x hidden_size {hidden}, the {streams} hyper-connection "
                    "streams of a DeepSeek-V4-style target (hc_mult) before they are "
                    "collapsed into one state",
                    key="target.hidden_size",
                    slot=slot.index,
                    expected=f"[T, {hidden}]",
                    found=f"[T, {streams} * {hidden}]",
                    hint="capture the state the engine feeds the draft (hidden_size wide), "
                    "or, if the engine feeds the streams, set target.hidden_size to "
                    "hc_mult * hidden_size in the contract and the draft's target_hidden_size",
                )
            )
        elif slot.array.dim() != 2 or slot.array.shape[-1] != hidden:
            add(
                at(
                    "EC203",
                    f"slot {slot.index} ({slot.source}) has shape {list(slot.array.shape)}",
                    key="target.hidden_size",
                    slot=slot.index,
                    expected=f"[T, {hidden}]",
                    found=list(slot.array.shape),
                )
            )
    if not shard.split_problems and len(slots) != len(spec.slots):
        add(
            at(
                "EC204",
                f"the shard holds {len(slots)} slots, the contract {len(spec.slots)}",
                key="training.slots",
                expected=len(spec.slots),
                found=f"{len(slots)}: " + ", ".join(s.source for s in slots),
                hint=_count_hint(len(slots), len(spec.slots)),
            )
        )
    for slot, slot_spec in zip(slots, spec.slots):
        if slot.dtype != slot_spec.dtype:
            add(
                at(
                    "EC201",
                    f"slot {slot.index} ({slot.source}) has dtype {slot.dtype}",
                    slot=slot.index,
                    expected=slot_spec.dtype,
                    found=slot.dtype,
                    hint="the draft will be served on the target's activation dtype "
                    f"({contract.target.dtype})",
                )
            )
    lengths = {}
    if ids is not None:
        lengths[fmt.ids_key] = int(ids.shape[0])
    if mask is not None:
        lengths[fmt.mask_key or "loss_mask"] = int(mask.shape[0])
    for slot in slots:
        if slot.array.dim() >= 1:
            lengths[f"slot {slot.index} ({slot.source})"] = int(slot.array.shape[0])
    reference = lengths.get(fmt.ids_key)
    for name, length, majority, agree in _length_outliers(lengths, fmt.ids_key):
        add(
            at(
                "EC202",
                f"{name} has {length} entries beside {majority} in {', '.join(agree)}",
                key="training.sequence",
                expected=f"{majority} (as {', '.join(agree)})",
                found=length,
                hint="a generator truncated one and not the others "
                "(e.g. prompts cut to max_model_len - 1, mask left whole): "
                f"regenerate {name} with {majority} entries",
            )
        )
    unread = sample.metadata.get("unread")
    if unread:  # a dataset beside the shard that this installation cannot read
        add(
            not_run(
                "structure's match of the shard with its dataset row (EC206, EC202)",
                unread,
                contract=contract,
                key="training.format",
                file=shard.label,
                hint="install what the reason names, or the rows stay unchecked",
            )
        )
    if reference is not None:
        row = sample.dataset_row
        if row is not None and ids is not None:
            row_ids = row.get("input_ids")
            if row_ids is None or not _same(comparable(row_ids), comparable(ids)):
                add(
                    at(
                        "EC206",
                        f"token_ids differ from input_ids of row "
                        f"{row['row']} of the dataset in {row['dataset']}",
                        key="training.format",
                        expected="the same ids (the trainer skips the sample otherwise)",
                        found="no such row"
                        if row_ids is None
                        else f"{int(ids.numel())} token ids vs {int(row_ids.numel())} row ids",
                        hint="hs_{i} must be the capture of dataset row i; the files were "
                        "renumbered or the dataset regenerated",
                    )
                )
        if not spec.min_length <= reference <= spec.max_length:
            add(
                at(
                    "EC205",
                    f"sequence of {reference} tokens",
                    key="training.sequence",
                    expected=f"[{spec.min_length}, {spec.max_length}]",
                    found=reference,
                )
            )
    return out


def _same(a: Any, b: Any) -> bool:
    import numpy as np

    return a is not None and b is not None and bool(np.array_equal(a, b))


def _length_outliers(
    lengths: dict[str, int], ids_key: str
) -> list[tuple[str, int, int, list[str]]]:
    """Each key whose length differs from the majority's (ties go to the ids' length), with
    that majority length and the keys that hold it."""
    if not lengths:
        return []
    counts = Counter(lengths.values())
    top = max(counts.values())
    tied = [n for n, c in counts.items() if c == top]
    majority = lengths[ids_key] if lengths.get(ids_key) in tied else tied[0]
    agree = [k for k, n in lengths.items() if n == majority]
    return [(k, n, majority, agree) for k, n in lengths.items() if n != majority]


HC_MULT_RANGE = range(2, 17)  # DeepSeek-V4 ships hc_mult 4


def _hc_streams(shape: tuple[int, ...], hidden: int) -> int | None:
    """``m`` when a [T, W] slot is ``m * hidden`` wide for a plausible ``hc_mult`` m."""
    if len(shape) != 2 or hidden <= 0 or shape[-1] % hidden:
        return None
    m = shape[-1] // hidden
    return m if m in HC_MULT_RANGE else None


def _count_hint(found: int, expected: int) -> str:
    if found == expected + 1:
        return "one slot too many: an embedding or duplicated layer in front?"
    if found + 1 == expected:
        return "one slot missing: did the capture drop a layer, or the target state?"
    if expected and found % expected == 0 and found // expected in HC_MULT_RANGE:
        return (
            f"{found // expected} times the contract's: states {found // expected} x "
            "hidden_size wide (hyper-connection streams, hc_mult) split as slots?"
        )
    return "the capture wrote another set of layers than the contract describes"


FAMILY = CheckFamily(
    "structure",
    "shard",
    "keys, dtypes, widths, slot count, lengths and dataset rows",
    codes=("EC101", "EC102", "EC201", "EC202", "EC203", "EC204", "EC205", "EC206", "EC207"),
    keys=(
        "training.slots",
        "training.format",
        "training.extra_keys",
        "training.input_ids",
        "training.loss_mask",
        "training.sequence",
        "target.hidden_size",
    ),
    on_shard=check_structure,
)
