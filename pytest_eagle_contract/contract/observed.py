"""What ``infer`` and ``--eagle-contract-update`` measure on trusted shards: per slot the
per-shard median norms, and the bounds drawn from them (docs/first-contract.md)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ShardReadError, UsageError
from ..shards.reading import Sample, Slot, dtype_name, read_sample
from ..stats import norm_stats

if TYPE_CHECKING:
    from ..shards.stored import Array

MIN_MARGIN = 0.05  # bounds reach at least 5 % beyond the observed medians
GAP_SHARE = 0.45  # and at most this share of the gap to another slot's medians


@dataclass
class Observed:
    """Per slot, one median norm per shard, and what the shards hold besides."""

    format: str
    hidden_size: int
    dtypes: list[str]
    medians: list[list[float]]  # per slot, one median per shard
    lengths: list[int]
    shards: int
    metadata: dict[str, Any]
    ids_dtype: str
    mask_dtype: str
    probe: tuple[Array, list[Array]] | None = field(default=None, repr=False)  # ids, states


def observe(
    paths: Sequence[Path], format: str, hidden_size: int | None, workers: int = 1
) -> Observed:
    """What ``paths`` hold; with ``workers`` > 1 the norms are measured in worker processes
    (one file per task), the rest read here from the memory-mapped files."""
    measured = _measure_all(paths, format, hidden_size, workers)
    medians: list[list[float]] = []
    dtypes: list[str] = []
    lengths: list[int] = []
    fmt_name = ""
    hidden = hidden_size
    metadata: dict[str, Any] = {}
    ids_dtype = mask_dtype = "int64"
    probe = None
    for path in paths:
        try:
            sample = read_sample(path, format, arrays=True)
        except ShardReadError as exc:
            raise UsageError(f"{path}: {exc.code} {exc.message}: infer needs good shards") from None
        hidden, slots, problems = _split(sample, hidden)
        if problems:
            raise UsageError(f"{path}: {'; '.join(problems)}: pass --hidden-size")
        if fmt_name and (sample.format.name != fmt_name or len(slots) != len(medians)):
            raise UsageError(
                f"{path}: {sample.format.name} with {len(slots)} slots differs from "
                f"the first shard ({fmt_name}, {len(medians)} slots)"
            )
        fmt_name = sample.format.name
        metadata = metadata or sample.metadata
        if not medians:
            medians = [[] for _ in slots]
            dtypes = [s.dtype for s in slots]
            if sample.ids is not None:
                ids_dtype = dtype_name(sample.ids.dtype)
            if sample.mask is not None:
                mask_dtype = dtype_name(sample.mask.dtype)
        for slot in slots:
            medians[slot.index].append(_median(measured.get(path), hidden, slot))
        ids = sample.ids
        if ids is not None:
            lengths.append(int(ids.numel()))
            states = [s.array for s in slots]
            if probe is None and all(s.dim() == 2 and s.shape[0] == ids.numel() for s in states):
                probe = (ids, states)
    if hidden is None or not medians:
        raise UsageError("the shards hold no hidden states: infer needs at least one slot")
    return Observed(
        fmt_name,
        hidden,
        dtypes,
        medians,
        lengths,
        len(paths),
        metadata,
        ids_dtype,
        mask_dtype,
        probe,
    )


Measured = tuple[int | None, list[float]]  # the width a file's slots were split by, medians


def _measure(task: tuple[Path, str, int | None]) -> Measured | None:
    """A worker's part: one file's per-slot median norms (None when it cannot be read:
    the caller reads it again and says why)."""
    path, format, hidden = task
    try:
        sample = read_sample(path, format, arrays=True)
    except ShardReadError:
        return None
    hidden, slots, _ = _split(sample, hidden)
    return hidden, [norm_stats(s.array).median for s in slots]


def _split(sample: Sample, hidden: int | None) -> tuple[int | None, list[Slot], list[str]]:
    """``sample``'s slots split by ``hidden``, else by the last state's own width, with
    that width and why any key could not be split."""
    if hidden is None:
        first, _ = sample.slots(None)
        hidden = int(first[-1].array.shape[-1]) if first else None
    slots, problems = sample.slots(hidden)
    return hidden, slots, problems


def _measure_all(
    paths: Sequence[Path], format: str, hidden: int | None, workers: int
) -> dict[Path, Measured | None]:
    from ..pool import executor, imap, single_threaded

    if workers <= 1 or len(paths) <= 1:
        with single_threaded():  # as a worker would: torch's threads lose on small chunks
            return {p: _measure((p, format, hidden)) for p in paths}
    with executor(min(workers, len(paths))) as pool:
        done = imap(_measure, [(p, format, hidden) for p in paths], pool)
        return {task[0]: future.result() for task, future in done}


def _median(measured: Measured | None, hidden: int | None, slot: Slot) -> float:
    """The slot's median norm: from the worker when it split the file alike, else here."""
    if measured is not None and measured[0] == hidden and slot.index < len(measured[1]):
        return measured[1][slot.index]
    return norm_stats(slot.array).median


def bounds_from(values: list[float], others: Sequence[list[float]] = ()) -> tuple[float, float]:
    """Bounds on a slot's median norm from its per-shard ``values``: their range widened by
    itself on each side (at least ``MIN_MARGIN``), cut to ``GAP_SHARE`` of the gap to each
    of ``others`` (other slots' per-shard medians) whose range does not meet this one."""
    lo, hi = min(values), max(values)
    center = statistics.median(values)
    margin = max(MIN_MARGIN, (hi - lo) / center if center else MIN_MARGIN)
    low, high = lo / (1 + margin), hi * (1 + margin)
    for other in others:
        olo, ohi = min(other), max(other)
        if olo > hi:
            high = min(high, hi + GAP_SHARE * (olo - hi))
        elif ohi < lo:
            low = max(low, lo - GAP_SHARE * (lo - ohi))
    return low, high
