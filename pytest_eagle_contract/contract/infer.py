"""``eagle-contract infer``: draft a contract from shards the user trusts."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ShardReadError, UsageError
from ..layers import Layer
from ..shards.discovery import Sampling, choose, discover
from ..shards.formats import FORMATS
from ..shards.reading import dtype_name, read_sample
from ..stats import norm_stats
from .model import schema_path

MIN_MARGIN = 0.05  # bounds reach at least 5 % beyond the observed medians


def default_layers(
    format: str, num_layers: int, metadata: dict[str, Any], arch: str | None = None
) -> list[Layer]:
    """The layers each trainer's own defaults capture, by format (docs/layers.md)."""
    return FORMATS[format].default_layers(num_layers, metadata, arch)


@dataclass(frozen=True)
class _Observed:
    format: str
    hidden_size: int
    dtypes: list[str]
    medians: list[list[float]]  # per slot, one median per shard
    lengths: list[int]
    shards: int
    metadata: dict[str, Any]
    ids_dtype: str
    mask_dtype: str


def observe(paths: Sequence[Path], format: str, hidden_size: int | None) -> _Observed:
    medians: list[list[float]] = []
    dtypes: list[str] = []
    lengths: list[int] = []
    fmt_name = ""
    hidden = hidden_size
    metadata: dict[str, Any] = {}
    ids_dtype = mask_dtype = "int64"
    for path in paths:
        try:
            sample = read_sample(path, format)
        except ShardReadError as exc:
            raise UsageError(f"{path}: {exc.code} {exc.message}: infer needs good shards") from None
        if hidden is None:
            probe, _ = sample.slots(None)
            hidden = int(probe[-1].tensor.shape[-1]) if probe else None
        slots, problems = sample.slots(hidden)
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
            if sample.input_ids is not None:
                ids_dtype = dtype_name(sample.input_ids.dtype)
            if sample.loss_mask is not None:
                mask_dtype = dtype_name(sample.loss_mask.dtype)
        for slot in slots:
            medians[slot.index].append(norm_stats(slot.tensor).median)
        if sample.input_ids is not None:
            lengths.append(int(sample.input_ids.numel()))
    assert hidden is not None
    return _Observed(
        fmt_name, hidden, dtypes, medians, lengths, len(paths), metadata, ids_dtype, mask_dtype
    )


def bounds_from(values: list[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    center = statistics.median(values)
    margin = max(MIN_MARGIN, (hi - lo) / center if center else MIN_MARGIN)
    return lo / (1 + margin), hi * (1 + margin)


def infer_contract(
    paths: Sequence[Path],
    *,
    name: str,
    format: str = "auto",
    layers: Sequence[str] | None = None,
    num_layers: int | None = None,
    hidden_size: int | None = None,
    vocab_size: int | None = None,
    arch: str | None = None,
    sample: Sampling = None,
    seed: int = 0,
    shards_ref: str | None = None,
    schema_ref: str | None = None,
) -> str:
    """The text of a drafted contract (YAML with comments)."""
    files = [f for p in paths for f in discover(Path(p), format)]
    if not files:
        raise UsageError("no shard files found under " + ", ".join(map(str, paths)))
    files = choose(files, sample, seed)
    obs = observe(files, format, hidden_size)
    n = len(obs.medians)
    if layers:
        try:
            named = [Layer.parse(x) for x in layers]
        except ValueError as exc:
            raise UsageError(f"--layers: {exc}") from None
    elif obs.metadata.get("hidden_states", {}).get("layer_ids") or num_layers:
        named = default_layers(obs.format, num_layers or 0, obs.metadata, arch)
    else:
        raise UsageError(
            "cannot name the slots' layers: pass --layers (one per slot, e.g. "
            "residual:2 residual:16 residual:29 final_norm) or --num-layers for "
            f"the {obs.format} defaults"
        )
    if len(named) != n:
        raise UsageError(
            f"the shards hold {n} slots but {len(named)} layers were named: "
            + " ".join(map(str, named))
        )
    L = num_layers or max((ly.index for ly in named), default=1) or 1
    target_slot = n - 1 if n > 1 else None
    out = [
        f"# yaml-language-server: $schema={schema_ref or schema_path()}",
        f"# Drafted by `eagle-contract infer` from {obs.shards} shard(s). Review every line:",
        "# the layer names are what you told infer (or the trainer's defaults); the bounds",
        "# are measured.",
        f"contract: {name}",
        "version: 1",
        "target:",
    ]
    if arch:
        out.append(f"  arch: {arch}")
    out += [
        f"  num_hidden_layers: {L}" + ("" if num_layers else "  # TODO: set from config.json"),
        f"  hidden_size: {obs.hidden_size}",
    ]
    if vocab_size:
        out.append(f"  vocab_size: {vocab_size}")
    else:
        out.append("  # vocab_size: ...   # set it to check input ids against the vocabulary")
    out += [f"  dtype: {obs.dtypes[0]}", "training:", f"  format: {obs.format}"]
    if shards_ref:
        out.append(f"  shards: {shards_ref}")
    out.append("  slots:  # stored order; norm = bounds on the median per-token L2 norm")
    for i, (layer, dtype, values) in enumerate(zip(named, obs.dtypes, obs.medians)):
        lo, hi = bounds_from(values)
        dtype_part = "" if dtype == obs.dtypes[0] else f", dtype: {dtype}"
        out.append(
            f"    - {{layer: {layer}{dtype_part}, norm: {{min: {lo:.6g}, max: {hi:.6g}}}}}"
            f"  # slot {i}: medians {min(values):.6g}..{max(values):.6g}"
        )
    if target_slot is not None:
        fc = [i for i in range(n) if i != target_slot]
        out += [
            f"  fc_input: [{', '.join(map(str, fc))}]  # slots the trainer concatenates",
            f"  target_slot: {target_slot}",
        ]
    if obs.ids_dtype != "int64" or obs.mask_dtype != "int64":
        out += [
            f"  input_ids: {{dtype: {obs.ids_dtype}}}",
            f"  loss_mask: {{dtype: {obs.mask_dtype}}}",
        ]
    overlaps = _overlaps([bounds_from(v) for v in obs.medians])
    for a, b in overlaps:
        out.append(
            f"# WARNING: the norm bounds of slots {a} and {b} overlap: a swap of these two "
            "would pass; add evidence (issue: serving layout) or tighten them."
        )
    return "\n".join(out) + "\n"


def _overlaps(bounds: list[tuple[float, float]]) -> list[tuple[int, int]]:
    return [
        (i, j)
        for i in range(len(bounds))
        for j in range(i + 1, len(bounds))
        if bounds[i][0] <= bounds[j][1] and bounds[j][0] <= bounds[i][1]
    ]
