"""Shard records built from a contract (docs/sharpness.md).

A record is built from a :class:`Recipe` (a seed and a few numbers), so a failing example
prints as ``build(contract, Recipe(seed=..., ...))``: one line that rebuilds it. Building
needs only torch, and a record is written through its format's own writer
(:mod:`pytest_eagle_contract.shards.formats`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..checks.family import training_spec
from ..contract.model import Contract, SlotSpec
from ..findings import Finding
from ..shards.formats import FORMATS, detect

if TYPE_CHECKING:
    import torch

    from ..shards.shard import Shard

DEFAULT_NORM = (1.0, 10.0)  # median norms drawn for a slot without bounds (and the extremes)
MaskKind = Literal["all", "single", "all-but-one", "prefix", "random", "zero"]
Shape = Literal["dense", "spike", "tiny"]
_MARGIN = {"bfloat16": 2.0**-7, "float16": 2.0**-10, "float32": 1e-4}
_DTYPE_CAP = {"bool": 2, "uint8": 256, "int32": 2**31 - 1, "int64": 2**62}


class NotApplicable(Exception):
    """The format cannot hold what a mutation would write (e.g. two states in EAGLE legacy)."""


@dataclass(frozen=True)
class SlotRecipe:
    """One slot: the median per-token L2 norm, the spread (log-normal sigma) of the
    per-token norms around it, and the shape of each row."""

    norm: float
    spread: float = 0.2
    shape: Shape = "dense"  # dense: random direction; spike: one element per row holds the
    # norm; tiny: half the elements are the dtype's smallest subnormal


@dataclass(frozen=True)
class Recipe:
    """Everything a record is built from; ``build(contract, recipe)`` rebuilds it exactly."""

    seed: int
    length: int
    slots: tuple[SlotRecipe, ...]
    mask: MaskKind = "prefix"
    mask_at: int = 0
    ids: Literal["random", "extremes"] = "random"


@dataclass(frozen=True, eq=False)
class ShardRecord:
    """One sample in the contract's ``training.format`` layout: ids, mask, [T, H] slots."""

    format: str
    input_ids: torch.Tensor
    loss_mask: torch.Tensor
    slots: tuple[torch.Tensor, ...]
    origin: str = ""  # a Python expression that rebuilds this record
    seed: int = 0

    @property
    def tokens(self) -> int:
        return int(self.input_ids.shape[0])

    def to_dict(self) -> dict[str, Any]:
        """The dict the format's generator saves (see ``Format.record_dict``)."""
        data = FORMATS[self.format].record_dict(self.input_ids, self.loss_mask, self.slots)
        if data is None:
            raise NotApplicable(f"{self.format} shards cannot hold {len(self.slots)} states")
        return data

    def file_name(self, index: int = 0) -> str:
        return FORMATS[self.format].shard_name(index)

    def save(self, path: str | Path) -> Path:
        """Write the record as its format's generator would (by the file's suffix)."""
        from ..shards.writing import save

        return save(Path(path), self.to_dict())

    def shard(self, contract: Contract) -> Shard:
        """The record as the checks see its file, in memory: read as ``training.format``
        says, or as its keys say for ``auto``."""
        from ..shards.reading import Sample
        from ..shards.shard import Shard

        data = self.to_dict()
        path = Path(self.file_name())
        name = training_spec(contract).format
        fmt = (
            FORMATS[name]
            if name != "auto"
            else (detect(path.name, set(data)) or FORMATS[self.format])
        )
        return Shard(
            path,
            f"<record seed {self.seed}>",
            contract.target.hidden_size,
            sample=Sample(path, fmt, data),
        )

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # Hypothesis' and IPython's printer
        p.text(repr(self))

    def __repr__(self) -> str:
        if self.origin:
            return self.origin
        return f"ShardRecord(format={self.format!r}, tokens={self.tokens}, slots={len(self.slots)})"


def record_format(contract: Contract) -> str:
    """The format records are written in: ``training.format``; for ``auto``, speculators v1
    (one list entry per slot, each its own dtype), or EAGLE legacy for a single slot."""
    spec = training_spec(contract)
    if spec.format != "auto":
        return spec.format
    return "eagle-legacy" if len(spec.slots) == 1 else "speculators-v1"


def torch_dtype(name: str) -> torch.dtype:
    """``bfloat16`` -> ``torch.bfloat16``."""
    import torch

    dtype = getattr(torch, name)
    assert isinstance(dtype, torch.dtype)
    return dtype


def norm_range(slot: SlotSpec) -> tuple[float, float]:
    """Where a good record's median norm for ``slot`` may be put: its bounds, pulled in by
    the dtype's rounding so the stored median stays inside (a slot without bounds:
    ``DEFAULT_NORM``)."""
    bounds = slot.norm
    if bounds is None:
        return DEFAULT_NORM
    margin = _MARGIN.get(slot.dtype, 1e-4)
    low, high = bounds.low, bounds.high
    if math.isinf(high):
        high = max(low * 100.0, DEFAULT_NORM[1])
    if low <= 0.0:
        low = high / 100.0
    lo, hi = low * (1 + margin), high * (1 - margin)
    if lo > hi:
        lo = hi = math.sqrt(low * high)
    return lo, hi


def center(lo: float, hi: float) -> float:
    """The middle of [lo, hi] on a log scale (one end open or zero: a point inside)."""
    if math.isinf(hi):
        return lo * 2.0 if lo > 0 else math.sqrt(DEFAULT_NORM[0] * DEFAULT_NORM[1])
    if lo <= 0:
        return hi / 2.0
    return math.sqrt(lo * hi)


def slot_state(
    tokens: int, hidden: int, slot: SlotRecipe, dtype: torch.dtype, g: torch.Generator
) -> torch.Tensor:
    """[tokens, hidden] in ``dtype`` whose median per-token L2 norm is ``slot.norm`` to
    within the dtype's rounding: the middle token(s) get exactly the norm, half the others
    at most it, half at least it, so the median cannot move past the rounding error."""
    import torch

    f64 = torch.float64
    finfo = torch.finfo(dtype)
    cap = finfo.max / 2.0
    magnitude = torch.randn(tokens, generator=g, dtype=f64).abs()
    order = torch.randperm(tokens, generator=g)
    middle = 1 if tokens % 2 else 2
    low = (tokens - middle) // 2
    sign = torch.zeros(tokens, dtype=f64)
    sign[order[:low]] = -1.0
    sign[order[low + middle :]] = 1.0
    norms = (min(slot.norm, cap) * torch.exp(slot.spread * sign * magnitude)).clamp(max=cap)
    if slot.shape == "spike":
        rows = torch.zeros(tokens, hidden, dtype=f64)
        where = torch.randint(0, hidden, (tokens,), generator=g)
        signs = torch.randint(0, 2, (tokens,), generator=g).to(f64) * 2 - 1
        rows[torch.arange(tokens), where] = signs
    else:
        rows = torch.randn(tokens, hidden, generator=g, dtype=f64)
    tiny = None
    if slot.shape == "tiny" and hidden > 1:
        tiny = torch.rand(tokens, hidden, generator=g) < 0.5
        tiny[:, 0] = False  # keep one element to carry the norm
        rows[tiny] = 0.0
    rows /= torch.linalg.vector_norm(rows, dim=-1, keepdim=True)
    rows *= norms.unsqueeze(-1)
    if tiny is not None:
        smallest = finfo.tiny * finfo.eps  # the smallest subnormal
        rows[tiny] = smallest * torch.sign(torch.randn(int(tiny.sum()), generator=g, dtype=f64))
    return rows.to(dtype)


SlotCache = dict[tuple[int, int, int, SlotRecipe, str], "torch.Tensor"]


def build(contract: Contract, recipe: Recipe, cache: SlotCache | None = None) -> ShardRecord:
    """The record ``recipe`` describes, in the contract's layout and dtypes. Each slot has
    its own random stream (seeded by the recipe's seed and the slot's index), so records
    that differ in one slot's recipe share the others; ``cache`` keeps built slots."""
    import torch

    spec = training_spec(contract)
    if len(recipe.slots) != len(spec.slots):
        raise ValueError(
            f"the recipe has {len(recipe.slots)} slots, the contract {len(spec.slots)}"
        )
    g = torch.Generator().manual_seed(recipe.seed)
    T, H = recipe.length, contract.target.hidden_size
    top = min(
        contract.target.vocab_size or _DTYPE_CAP["int64"],
        _DTYPE_CAP.get(spec.input_ids_dtype, _DTYPE_CAP["int64"]),
    )
    ids = torch.randint(0, top, (T,), generator=g)
    if recipe.ids == "extremes" and T:
        ids[0] = top - 1
        ids[-1] = 0
    mask = _mask(recipe, T, g)
    slots = []
    for i, slot in enumerate(recipe.slots):
        key = (recipe.seed, i, T, slot, spec.slots[i].dtype)
        state = cache.get(key) if cache is not None else None
        if state is None:
            g_slot = torch.Generator().manual_seed((recipe.seed << 8) + i + 1)
            state = slot_state(T, H, slot, torch_dtype(spec.slots[i].dtype), g_slot)
            if cache is not None:
                cache[key] = state
        slots.append(state)
    return ShardRecord(
        record_format(contract),
        ids.to(torch_dtype(spec.input_ids_dtype)),
        mask.to(torch_dtype(spec.loss_mask_dtype)),
        tuple(slots),
        origin=f"build(contract, {recipe!r})",
        seed=recipe.seed,
    )


def _mask(recipe: Recipe, tokens: int, g: torch.Generator) -> torch.Tensor:
    import torch

    at = min(max(recipe.mask_at, 0), max(tokens - 1, 0))
    kind = recipe.mask
    if kind == "zero":
        return torch.zeros(tokens, dtype=torch.long)
    if kind == "all" or tokens == 0:
        return torch.ones(tokens, dtype=torch.long)
    mask = torch.zeros(tokens, dtype=torch.long)
    if kind == "single":
        mask[at] = 1
    elif kind == "all-but-one":
        mask[:] = 1
        mask[at] = 0
    elif kind == "prefix":
        mask[at:] = 1
    else:  # random, with at least one response token
        mask = torch.randint(0, 2, (tokens,), generator=g)
        mask[at] = 1
    return mask


def _on_shard(by_name: dict[str, Any], name: str) -> Any:
    check = by_name.get(name)
    if check is None:
        raise ValueError(f"{name!r} is not a shard family (structure, values, norms)")
    return check


def check_record(
    contract: Contract,
    record: ShardRecord,
    checks: Sequence[str] = ("structure", "values", "norms"),
) -> list[Finding]:
    """The contract's shard checks on ``record``, in memory (no file written), read as the
    file would be: ``training.format``, or the format its keys say for ``auto``. Waived
    codes are left out, as in a run."""
    from ..checks import norms, structure, values

    by_name = {f.name: f.on_shard for f in (structure.FAMILY, values.FAMILY, norms.FAMILY)}
    shard = record.shard(contract)
    out = [f for check in checks for f in _on_shard(by_name, check)(contract, shard)]
    return [f for f in out if f.code not in contract.waivers]
