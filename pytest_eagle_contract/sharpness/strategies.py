"""Shard records built from a contract, the pipeline bugs that break them, and Hypothesis
strategies over both (docs/sharpness.md).

    from hypothesis import given
    from pytest_eagle_contract.contract.model import load_contract
    from pytest_eagle_contract.sharpness.strategies import check_record, shards

    contract = load_contract("contracts/run7.yaml")

    @given(shards(contract))
    def test_my_collate_keeps_the_contract(record):
        out = my_collate(record.to_dict())
        ...

A record is built from a :class:`Recipe` (a seed and a few numbers), so a failing example
prints as ``build(contract, Recipe(seed=..., ...))``: one line that rebuilds it. Building
needs only torch; Hypothesis is imported by :func:`shards` and :func:`mutations` alone, so
the sharpness self-test (``sharpness.py``) runs where Hypothesis is not installed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..contract.model import Contract, NormBounds, SlotSpec, TrainingSpec
from ..findings import Finding
from ..shards.formats import FORMATS, guess_from_keys, guess_from_name

if TYPE_CHECKING:
    import torch
    from hypothesis.strategies import DrawFn, SearchStrategy

__all__ = [
    "PROFILE",
    "Fresh",
    "Mutation",
    "NotApplicable",
    "Recipe",
    "ShardRecord",
    "SlotRecipe",
    "Source",
    "build",
    "check_record",
    "find_mutation",
    "mutation_list",
    "mutations",
    "recipes",
    "record_format",
    "shards",
    "use_ci_profile",
]

PROFILE = "eagle-contract-ci"
DEFAULT_NORM = (1.0, 10.0)  # median norms drawn for a slot without bounds (and the extremes)
MAX_TOKENS = 512  # longest sequence generated unless asked (a contract may allow 1 << 20)
MAX_ELEMENTS = 1 << 20  # tokens * hidden * slots budget of one generated record
EMBED_RMS = 0.02  # per-element RMS of an embedding (HF init std), when no slot bounds it
POST_NORM_WEIGHT_RMS = 1.0  # RMSNorm weight of a post-norm twin, when no slot bounds it
DEFAULT_GROWTH = 1.5  # per-layer norm growth when the contract bounds fewer than two layers
PRE_NORM_GROWTH_CAP = 1.1  # per-layer growth used to extrapolate to residual:L
RESCALE = 4.0  # "rescale one slot": by this factor, up and down
MaskKind = Literal["all", "single", "all-but-one", "prefix", "random", "zero"]
Shape = Literal["dense", "spike", "tiny"]
_MARGIN = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10, "float32": 1e-4}
_DTYPE_CAP = {"bool": 2, "uint8": 256, "int32": 2 ** 31 - 1, "int64": 2 ** 62}


def use_ci_profile() -> str:
    """Register the CI profile (derandomized, no example database, no deadline, failure
    blobs printed) and load it unless the user already loaded another. Returns the name of
    the profile in force."""
    from hypothesis import HealthCheck, settings

    if PROFILE not in settings._profiles:
        settings.register_profile(
            PROFILE, derandomize=True, database=None, deadline=None, print_blob=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    current = settings._current_profile
    if current in (None, "default"):
        settings.load_profile(PROFILE)
        return PROFILE
    return current


# -- records ------------------------------------------------------------------------------


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
        """The dict the format's generator saves (see ``writing.shard_dict``)."""
        return _layout(self.format, self.input_ids, self.loss_mask, self.slots)

    def file_name(self, index: int = 0) -> str:
        from ..shards.writing import shard_name

        return shard_name(self.format, index)

    def save(self, path: str | Path) -> Path:
        """Write the record as its format's generator would (by the file's suffix)."""
        from ..shards.writing import save

        return save(Path(path), self.to_dict())

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # Hypothesis' and IPython's printer
        p.text(repr(self))

    def __repr__(self) -> str:
        if self.origin:
            return self.origin
        return (f"ShardRecord(format={self.format!r}, tokens={self.tokens}, "
                f"slots={len(self.slots)})")


def _layout(format: str, ids: torch.Tensor, mask: torch.Tensor,
            slots: Sequence[torch.Tensor]) -> dict[str, Any]:
    from ..shards.writing import shard_dict

    if format == "specforge" and len(slots) < 2:
        out: dict[str, Any] = {"input_ids": ids, "loss_mask": mask}
        if slots:
            out["hidden_state"] = slots[0].unsqueeze(0)
        return out
    if format == "eagle-legacy" and len(slots) != 1:
        if slots:
            raise NotApplicable("EAGLE legacy shards hold exactly one state")
        return {"input_ids": ids, "loss_mask": mask}
    if format == "speculators" and not slots:
        raise NotApplicable("speculators shards need at least one state")
    return shard_dict(format, ids, mask, slots)


def record_format(contract: Contract) -> str:
    """The format records are written in: ``training.format``; for ``auto``, speculators v1
    (one list entry per slot, each its own dtype), or EAGLE legacy for a single slot."""
    spec = _training(contract)
    if spec.format != "auto":
        return spec.format
    return "eagle-legacy" if len(spec.slots) == 1 else "speculators-v1"


def _training(contract: Contract) -> TrainingSpec:
    if contract.training is None:
        raise ValueError(f"{contract.path}: the contract has no 'training' section")
    return contract.training


def _torch_dtype(name: str) -> torch.dtype:
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


def _center(lo: float, hi: float) -> float:
    if math.isinf(hi):
        return lo * 2.0 if lo > 0 else math.sqrt(DEFAULT_NORM[0] * DEFAULT_NORM[1])
    if lo <= 0:
        return hi / 2.0
    return math.sqrt(lo * hi)


def _slot_state(tokens: int, hidden: int, slot: SlotRecipe, dtype: torch.dtype,
                g: torch.Generator) -> torch.Tensor:
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
    sign[order[low + middle:]] = 1.0
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
        rows[tiny] = smallest * torch.sign(torch.randn(int(tiny.sum()), generator=g,
                                                       dtype=f64))
    return rows.to(dtype)


SlotCache = dict[tuple[int, int, int, SlotRecipe, str], "torch.Tensor"]


def build(contract: Contract, recipe: Recipe, cache: SlotCache | None = None) -> ShardRecord:
    """The record ``recipe`` describes, in the contract's layout and dtypes. Each slot has
    its own random stream (seeded by the recipe's seed and the slot's index), so records
    that differ in one slot's recipe share the others; ``cache`` keeps built slots."""
    import torch

    spec = _training(contract)
    if len(recipe.slots) != len(spec.slots):
        raise ValueError(f"the recipe has {len(recipe.slots)} slots, the contract "
                         f"{len(spec.slots)}")
    g = torch.Generator().manual_seed(recipe.seed)
    T, H = recipe.length, contract.target.hidden_size
    top = min(contract.target.vocab_size or _DTYPE_CAP["int64"],
              _DTYPE_CAP.get(spec.input_ids_dtype, _DTYPE_CAP["int64"]))
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
            state = _slot_state(T, H, slot, _torch_dtype(spec.slots[i].dtype), g_slot)
            if cache is not None:
                cache[key] = state
        slots.append(state)
    return ShardRecord(record_format(contract), ids.to(_torch_dtype(spec.input_ids_dtype)),
                       mask.to(_torch_dtype(spec.loss_mask_dtype)), tuple(slots),
                       origin=f"build(contract, {recipe!r})", seed=recipe.seed)


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


def check_record(contract: Contract, record: ShardRecord,
                 checks: Sequence[str] = ("structure", "values", "norms")) -> list[Finding]:
    """The contract's shard checks on ``record``, in memory (no file written), read as the
    file would be: ``training.format``, or the format its keys say for ``auto``. Waived
    codes are left out, as in a run."""
    from ..checks.shard_checks import SHARD_CHECKS, Shard
    from ..shards.reading import Sample

    spec = _training(contract)
    data = record.to_dict()
    name = record.file_name()
    fmt = spec.format if spec.format != "auto" else (
        guess_from_keys(guess_from_name(Path(name).name), set(data)) or record.format)
    path = Path(name)
    shard = Shard(path, f"<record seed {record.seed}>", contract.target.hidden_size,
                  sample=Sample(path, FORMATS[fmt], data))
    out = [f for check in checks for f in SHARD_CHECKS[check](contract, shard)]
    return [f for f in out if f.code not in contract.waivers]


# -- strategies ---------------------------------------------------------------------------


def _length_bounds(contract: Contract, max_tokens: int, max_elements: int) -> tuple[int, int]:
    spec = _training(contract)
    width = contract.target.hidden_size * max(len(spec.slots), 1)
    cap = max(1, min(max_tokens, max_elements // width))
    lo = spec.min_length
    return lo, max(lo, min(spec.max_length, cap))


def _special_norms(contract: Contract, index: int) -> list[float]:
    """Norms worth trying first: the edges and centre of the slot's range, and the middle
    of its overlap with every other slot's range (where a swap would slip through)."""
    import torch

    spec = _training(contract)
    slot = spec.slots[index]
    lo, hi = norm_range(slot)
    out = [lo, hi, _center(lo, hi)]
    for other in spec.slots:
        if other.index != index:
            olo, ohi = norm_range(other)
            a, b = max(lo, olo), min(hi, ohi)
            if a <= b:
                out.append(_center(a, b))
    if slot.norm is None or math.isinf(slot.norm.high):
        finfo = torch.finfo(_torch_dtype(slot.dtype))
        out.append(finfo.max / 4.0)  # the largest values the dtype allows
    if slot.norm is None or slot.norm.low <= 0:
        out.append(float(torch.finfo(_torch_dtype(slot.dtype)).tiny))
    return sorted(set(out), key=out.index)


def recipes(contract: Contract, *, max_tokens: int = MAX_TOKENS,
            max_elements: int = MAX_ELEMENTS) -> SearchStrategy[Recipe]:
    """Recipes of records the contract accepts. Each field has one strategy with the
    contract's constraints built in (lengths at and near the bounds, masks with one or all
    but one response token, norms at the edges, centre and overlaps of each slot's bounds):
    nothing is filtered after drawing."""
    from hypothesis import strategies as st

    spec = _training(contract)
    lo, hi = _length_bounds(contract, max_tokens, max_elements)
    edges = sorted({n for n in (lo, lo + 1, hi - 1, hi) if lo <= n <= hi})
    lengths = st.one_of(st.sampled_from(edges), st.integers(lo, hi))
    slot_strategies = []
    for slot in spec.slots:
        nlo, nhi = norm_range(slot)
        norms = st.one_of(st.sampled_from(_special_norms(contract, slot.index)),
                          st.floats(nlo, nhi, allow_nan=False, allow_infinity=False))
        spreads = st.one_of(st.just(0.2), st.just(0.0), st.floats(0.0, 0.5))
        shapes: SearchStrategy[Shape] = st.sampled_from(("dense", "spike", "tiny"))
        slot_strategies.append(st.builds(SlotRecipe, norms, spreads, shapes))
    zero: tuple[MaskKind, ...] = ("zero",) if spec.allow_all_zero_loss_mask else ()
    long_masks: tuple[MaskKind, ...] = ("prefix", "single", "all-but-one", "all", "random")
    short_masks: tuple[MaskKind, ...] = ("all",)

    @st.composite
    def draw_recipe(draw: DrawFn) -> Recipe:
        length = draw(lengths)
        kinds = (long_masks if length >= 2 else short_masks) + zero
        return Recipe(
            seed=draw(st.integers(0, 2 ** 32 - 1)),
            length=length,
            slots=tuple(draw(s) for s in slot_strategies),
            mask=draw(st.sampled_from(kinds)),
            mask_at=draw(st.integers(0, max(length - 1, 0))),
            ids=draw(st.sampled_from(("random", "extremes"))),
        )

    result: SearchStrategy[Recipe] = draw_recipe()
    return result


def shards(contract: Contract, *, max_tokens: int = MAX_TOKENS,
           max_elements: int = MAX_ELEMENTS) -> SearchStrategy[ShardRecord]:
    """Records that satisfy ``contract`` (``check_record`` finds nothing). Sequences are at
    most ``max_tokens`` long and ``max_elements`` big, unless ``training.sequence``
    requires more. Loads the CI settings profile unless another is loaded."""
    from hypothesis import strategies as st

    use_ci_profile()
    drawn = recipes(contract, max_tokens=max_tokens, max_elements=max_elements)

    @st.composite
    def record(draw: DrawFn) -> ShardRecord:  # prints as build(contract, Recipe(...))
        return build(contract, draw(drawn))

    result: SearchStrategy[ShardRecord] = record()
    return result


def mutations(contract: Contract) -> SearchStrategy[Mutation]:
    """One of the contract's pipeline mutations (:func:`mutation_list`). Apply it with
    ``m.apply(record)`` and ``m.apply_contract(contract)``; it must raise ``m.expected``."""
    from hypothesis import strategies as st

    use_ci_profile()
    return st.sampled_from(mutation_list(contract))


# -- mutations ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """A mutated slot that holds stored slot ``slot``, multiplied by ``factor``."""

    slot: int
    factor: float = 1.0


@dataclass(frozen=True)
class Fresh:
    """A mutated slot that holds a state that was not in the record: an embedding, a
    target's twin. ``norm`` is its modelled median per-token norm."""

    norm: float
    spread: float
    what: str


SlotMap = tuple[Source | Fresh, ...]
Op = Literal["slots", "cast", "mask-length", "truncate-ids", "non-finite", "unsort-ids"]


@dataclass(frozen=True)
class Mutation:
    """One real pipeline bug (CONVENTIONS.md), as a change to a record or to the contract.

    ``kind`` is its class (``swap-slots``), ``case`` the instance (``slots 1 and 2``),
    ``expected`` the rule code that must catch it. Slot mutations carry ``slot_map``: for
    every slot of the mutated record, where it comes from.
    """

    kind: str
    case: str
    expected: str
    op: Op
    slot_map: SlotMap = ()
    arg: str = ""
    level: Literal["record", "contract"] = "record"
    contract_edit: Callable[[Contract], Contract] | None = field(
        default=None, repr=False, compare=False)

    @property
    def id(self) -> str:
        return f"{self.kind}[{self.case}]"

    def __repr__(self) -> str:
        return f"find_mutation(contract, {self.id!r})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(repr(self))

    def apply(self, record: ShardRecord) -> ShardRecord:
        """The record with the bug in it (unchanged for a contract-level mutation)."""
        import torch

        if self.level == "contract":
            return record
        slots = list(record.slots)
        ids, mask = record.input_ids, record.loss_mask
        if self.op == "slots":
            slots = [self._slot(record, entry, k) for k, entry in enumerate(self.slot_map)]
        elif self.op == "cast":
            slots = [s.to(_torch_dtype(self.arg)) for s in slots]
        elif self.op == "mask-length":
            if self.arg == "longer":
                mask = torch.cat([mask, mask[-1:] if mask.numel() else mask.new_ones(1)])
            else:
                mask = mask[:-1]
        elif self.op == "truncate-ids":
            ids = ids[:-1]
        elif self.op == "non-finite":
            what, _, where = self.arg.partition(":")
            index = int(where)
            value = float("nan") if what == "nan" else float("inf")
            state = slots[index].clone()
            state[state.shape[0] // 2, 0] = value
            slots[index] = state
        out = ShardRecord(record.format, ids, mask, tuple(slots),
                          origin=f"{self!r}.apply({record!r})", seed=record.seed)
        out.to_dict()  # raises NotApplicable when the format cannot hold it
        return out

    def _slot(self, record: ShardRecord, entry: Source | Fresh, k: int) -> torch.Tensor:
        import torch

        if isinstance(entry, Source):
            state = record.slots[entry.slot]
            if entry.factor == 1.0:
                return state
            return (state.float() * entry.factor).to(state.dtype)
        like = record.slots[min(k, len(record.slots) - 1)]
        g = torch.Generator().manual_seed(record.seed + 7919 * (k + 1))
        return _slot_state(like.shape[0], like.shape[1], SlotRecipe(entry.norm, entry.spread),
                           like.dtype, g)

    def apply_contract(self, contract: Contract) -> Contract:
        """The contract with the bug in it (unchanged for a record-level mutation)."""
        if self.contract_edit is None:
            return contract
        return self.contract_edit(contract)


def find_mutation(contract: Contract, id: str) -> Mutation:
    """The mutation of ``contract`` whose ``id`` is ``id`` (``swap-slots[slots 1 and 2]``)."""
    for m in mutation_list(contract):
        if m.id == id:
            return m
    raise KeyError(f"{contract.path}: no mutation {id!r}")


KINDS: dict[str, tuple[str, str]] = {
    "drop-slot": ("EC204", "a layer dropped from the capture"),
    "duplicate-slot": ("EC204", "one layer captured twice"),
    "swap-slots": ("EC401", "two slots stored in each other's place"),
    "shift-layers": ("EC401", "every layer one deeper or shallower: 'output of k' vs "
                              "'input to k', or an engine version's +1 rule"),
    "embed-in-front": ("EC401", "the embedding in front of the fc input (the Kimi-K2.5 bug)"),
    "target-twin": ("EC401", "the target's post-norm twin where pre-norm is expected, or the "
                             "reverse"),
    "cast-dtype": ("EC201", "states cast to another dtype than the served one"),
    "loss-mask-length": ("EC202", "loss_mask longer or shorter than input_ids"),
    "truncate-ids": ("EC202", "input_ids truncated (max_model_len - 1), the rest not"),
    "non-finite": ("EC304", "NaN or Inf in a state (fp16 overflow, uninitialised memory)"),
    "rescale-slot": ("EC401", f"one slot scaled by {RESCALE:g} or 1/{RESCALE:g}"),
    "unsort-ids": ("EC506", "aux ids not ascending, the trainer concatenating in list order"),
}
"""Every mutation class: the rule code that must catch it, and the pipeline bug it is."""


def _centers(contract: Contract) -> dict[int, float]:
    """Layer index -> centre of the bounds of the residual (or embed) slot at that layer."""
    out: dict[int, float] = {}
    for slot in _training(contract).slots:
        if slot.norm is not None and not slot.layer.is_final_norm:
            out[slot.layer.index] = _center(*_finite(slot.norm))
    return out


def _finite(bounds: NormBounds) -> tuple[float, float]:
    return max(bounds.low, 0.0), bounds.high


def growth(contract: Contract, layer: int, step: int) -> float:
    """Modelled factor of the median norm from residual:``layer`` to ``layer + step``: the
    per-layer growth between the bounded layers around it (geometric interpolation of the
    contract's bound centres), ``DEFAULT_GROWTH`` when fewer than two layers are bounded."""
    centers = _centers(contract)
    known = sorted(k for k, c in centers.items() if c > 0)
    if len(known) < 2:
        per_layer = DEFAULT_GROWTH
    else:
        if step > 0:
            upper = [k for k in known if k > layer]
            a, b = (known[-2], known[-1]) if not upper else (
                max([k for k in known if k <= layer], default=known[0]), upper[0])
        else:
            lower = [k for k in known if k < layer]
            a, b = (known[0], known[1]) if not lower else (
                lower[-1], min([k for k in known if k >= layer], default=known[-1]))
        if a == b:
            a, b = known[0], known[1]
        per_layer = (centers[b] / centers[a]) ** (1.0 / (b - a))
    return float(per_layer ** step)


def embed_norm(contract: Contract) -> float:
    """The embedding's modelled median norm: the contract's embed slot, else
    ``EMBED_RMS * sqrt(H)``."""
    for slot in _training(contract).slots:
        if slot.layer.is_embed and slot.norm is not None:
            return _center(*_finite(slot.norm))
    return EMBED_RMS * math.sqrt(contract.target.hidden_size)


def post_norm(contract: Contract) -> float:
    """A post-norm state's modelled norm: the contract's final_norm slot, else
    ``sqrt(H) * POST_NORM_WEIGHT_RMS``."""
    for slot in _training(contract).slots:
        if slot.layer.is_final_norm and slot.norm is not None:
            return _center(*_finite(slot.norm))
    return math.sqrt(contract.target.hidden_size) * POST_NORM_WEIGHT_RMS


def pre_norm(contract: Contract) -> float:
    """residual:L's modelled norm: the deepest bounded residual slot, carried to layer L at
    its per-layer growth (clamped to ``PRE_NORM_GROWTH_CAP``); else 2 * the post-norm."""
    L = contract.target.num_hidden_layers
    centers = {k: c for k, c in _centers(contract).items() if k > 0}
    if not centers:
        return 2.0 * post_norm(contract)
    deepest = max(centers)
    per_layer = growth(contract, deepest, 1)
    per_layer = min(max(per_layer, 1 / PRE_NORM_GROWTH_CAP), PRE_NORM_GROWTH_CAP)
    return centers[deepest] * per_layer ** (L - deepest)


def _expressible(format: str, n: int) -> bool:
    return n >= 1 if format != "eagle-legacy" else n <= 1


def mutation_list(contract: Contract) -> list[Mutation]:
    """Every mutation that applies to ``contract``, in ``KINDS`` order."""
    spec = _training(contract)
    fmt = record_format(contract)
    n = len(spec.slots)
    L = contract.target.num_hidden_layers
    keep = [Source(i) for i in range(n)]
    out: list[Mutation] = []

    def slots(kind: str, case: str, slot_map: Sequence[Source | Fresh]) -> None:
        if _expressible(fmt, len(slot_map)):
            out.append(Mutation(kind, case, KINDS[kind][0], "slots", tuple(slot_map)))

    for i in range(n):
        slots("drop-slot", f"slot {i}", keep[:i] + keep[i + 1:])
    for i in range(n):
        slots("duplicate-slot", f"slot {i}", keep[:i + 1] + keep[i:])
    for i in range(n):
        for j in range(i + 1, n):
            swapped = list(keep)
            swapped[i], swapped[j] = keep[j], keep[i]
            slots("swap-slots", f"slots {i} and {j}", swapped)
    for step, name in ((1, "one deeper"), (-1, "one shallower")):
        shifted = []
        for s in spec.slots:
            k = s.layer.index
            movable = not s.layer.is_final_norm and 0 <= k + step <= L and k != L
            shifted.append(Source(s.index, growth(contract, k, step) if movable else 1.0))
        if any(x.factor != 1.0 for x in shifted):
            slots("shift-layers", name, shifted)
    fc = list(spec.fc_input)
    if fc:
        front: list[Source | Fresh] = list(keep)
        front[fc[0]] = Fresh(embed_norm(contract), 0.03, "the embedding")
        for p in range(1, len(fc)):
            front[fc[p]] = keep[fc[p - 1]]
        slots("embed-in-front", "fc input shifted, last state pushed out", front)
    prepended = Mutation("embed-in-front", "prepended", "EC204", "slots",
                         (Fresh(embed_norm(contract), 0.03, "the embedding"), *keep))
    if _expressible(fmt, n + 1):
        out.append(prepended)
    t = spec.target_slot
    if t is None and n == 1 and (spec.slots[0].layer.is_final_norm or
                                 spec.slots[0].layer.index == L):
        t = 0
    if t is not None:
        twin: list[Source | Fresh] = list(keep)
        if spec.slots[t].layer.is_final_norm:
            twin[t] = Fresh(pre_norm(contract), 0.4, f"the pre-norm residual:{L}")
            slots("target-twin", f"slot {t}: pre-norm residual:{L} for final_norm", twin)
        else:
            twin[t] = Fresh(post_norm(contract), 0.005, "the post-norm final_norm")
            slots("target-twin", f"slot {t}: post-norm final_norm for {spec.slots[t].layer}",
                  twin)
    for dtype in ("bfloat16", "float16", "float32"):
        if any(s.dtype != dtype for s in spec.slots):
            out.append(Mutation("cast-dtype", f"to {dtype}", "EC201", "cast", arg=dtype))
    for how in ("longer", "shorter"):
        out.append(Mutation("loss-mask-length", how, "EC202", "mask-length", arg=how))
    out.append(Mutation("truncate-ids", "last id dropped", "EC202", "truncate-ids"))
    out.append(Mutation("non-finite", "NaN in slot 0", "EC304", "non-finite", arg="nan:0"))
    out.append(Mutation("non-finite", f"Inf in slot {n - 1}", "EC304", "non-finite",
                        arg=f"inf:{n - 1}"))
    for i in range(n):
        for factor in (RESCALE, 1 / RESCALE):
            scaled = list(keep)
            scaled[i] = Source(i, factor)
            slots("rescale-slot", f"slot {i} x{factor:g}", scaled)
    unsort = _unsort_ids(contract)
    if unsort is not None:
        out.append(unsort)
    return out


def _serving_ids(contract: Contract) -> tuple[int, ...] | None:
    serving = contract.serving
    if serving is None:
        return None
    if serving.draft_config is not None:
        from ..errors import EagleContractError
        from ..models.draft import read_draft_config

        try:
            return read_draft_config(serving.draft_config).ids_for(serving.engine)
        except EagleContractError:
            return None
    return serving.aux_layer_ids


def _unsort_ids(contract: Contract) -> Mutation | None:
    """The first two aux ids swapped, and the trainer's fc input in that list order."""
    spec = _training(contract)
    ids = _serving_ids(contract)
    if contract.serving is None or ids is None or len(ids) < 2 or len(spec.fc_input) < 2:
        return None
    if list(ids) != sorted(ids) or ids[0] == ids[1]:
        return None
    new_ids = (ids[1], ids[0], *ids[2:])
    fc = (spec.fc_input[1], spec.fc_input[0], *spec.fc_input[2:])

    def edit(c: Contract) -> Contract:
        assert c.serving is not None and c.training is not None
        return replace(c, serving=replace(c.serving, aux_layer_ids=new_ids, draft_config=None),
                       training=replace(c.training, fc_input=fc))

    return Mutation("unsort-ids", f"aux ids {list(new_ids)}", "EC506", "unsort-ids",
                    level="contract", contract_edit=edit)
