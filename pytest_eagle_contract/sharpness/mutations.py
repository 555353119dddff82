"""The pipeline bugs that break a record (CONVENTIONS.md), as mutations of a record or of
the contract, each with the rule code that must catch it (docs/sharpness.md).

A record has no other layers in it, so the states a bug brings in (the next layer, the
embedding, the target's twin) are modelled from the contract's bounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from ..checks.family import training_spec
from ..contract.model import Contract, NormBounds
from ..shards.formats import FORMATS
from .records import ShardRecord, SlotRecipe, center, record_format, slot_state, torch_dtype

if TYPE_CHECKING:
    import torch

EMBED_RMS = 0.02  # per-element RMS of an embedding (HF init std), when no slot bounds it
POST_NORM_WEIGHT_RMS = 1.0  # RMSNorm weight of a post-norm twin, when no slot bounds it
DEFAULT_GROWTH = 1.5  # per-layer norm growth when the contract bounds fewer than two layers
PRE_NORM_GROWTH_CAP = 1.1  # per-layer growth used to extrapolate to residual:L
RESCALE = 4.0  # "rescale one slot": by this factor, up and down


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
        default=None, repr=False, compare=False
    )

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
            slots = [s.to(torch_dtype(self.arg)) for s in slots]
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
        out = ShardRecord(
            record.format,
            ids,
            mask,
            tuple(slots),
            origin=f"{self!r}.apply({record!r})",
            seed=record.seed,
        )
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
        return slot_state(
            like.shape[0], like.shape[1], SlotRecipe(entry.norm, entry.spread), like.dtype, g
        )

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
    "shift-layers": (
        "EC401",
        "every layer one deeper or shallower: 'output of k' vs "
        "'input to k', or an engine version's +1 rule",
    ),
    "embed-in-front": ("EC401", "the embedding in front of the fc input (the Kimi-K2.5 bug)"),
    "target-twin": (
        "EC401",
        "the target's post-norm twin where pre-norm is expected, or the reverse",
    ),
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
    for slot in training_spec(contract).slots:
        if slot.norm is not None and not slot.layer.is_final_norm:
            out[slot.layer.index] = center(*_finite(slot.norm))
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
            a, b = (
                (known[-2], known[-1])
                if not upper
                else (max([k for k in known if k <= layer], default=known[0]), upper[0])
            )
        else:
            lower = [k for k in known if k < layer]
            a, b = (
                (known[0], known[1])
                if not lower
                else (lower[-1], min([k for k in known if k >= layer], default=known[-1]))
            )
        if a == b:
            a, b = known[0], known[1]
        per_layer = (centers[b] / centers[a]) ** (1.0 / (b - a))
    return float(per_layer**step)


def embed_norm(contract: Contract) -> float:
    """The embedding's modelled median norm: the contract's embed slot, else
    ``EMBED_RMS * sqrt(H)``."""
    for slot in training_spec(contract).slots:
        if slot.layer.is_embed and slot.norm is not None:
            return center(*_finite(slot.norm))
    return EMBED_RMS * math.sqrt(contract.target.hidden_size)


def post_norm(contract: Contract) -> float:
    """A post-norm state's modelled norm: the contract's final_norm slot, else
    ``sqrt(H) * POST_NORM_WEIGHT_RMS``."""
    for slot in training_spec(contract).slots:
        if slot.layer.is_final_norm and slot.norm is not None:
            return center(*_finite(slot.norm))
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


def mutation_list(contract: Contract) -> list[Mutation]:
    """Every mutation that applies to ``contract``, in ``KINDS`` order."""
    spec = training_spec(contract)
    fmt = FORMATS[record_format(contract)]
    n = len(spec.slots)
    L = contract.target.num_hidden_layers
    keep = [Source(i) for i in range(n)]
    out: list[Mutation] = []

    def slots(kind: str, case: str, slot_map: Sequence[Source | Fresh]) -> None:
        if fmt.can_hold(len(slot_map)):
            out.append(Mutation(kind, case, KINDS[kind][0], "slots", tuple(slot_map)))

    for i in range(n):
        slots("drop-slot", f"slot {i}", keep[:i] + keep[i + 1 :])
    for i in range(n):
        slots("duplicate-slot", f"slot {i}", keep[: i + 1] + keep[i:])
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
    prepended = Mutation(
        "embed-in-front",
        "prepended",
        "EC204",
        "slots",
        (Fresh(embed_norm(contract), 0.03, "the embedding"), *keep),
    )
    if fmt.can_hold(n + 1):
        out.append(prepended)
    t = spec.target_slot
    if (
        t is None
        and n == 1
        and (spec.slots[0].layer.is_final_norm or spec.slots[0].layer.index == L)
    ):
        t = 0
    if t is not None:
        twin: list[Source | Fresh] = list(keep)
        if spec.slots[t].layer.is_final_norm:
            twin[t] = Fresh(pre_norm(contract), 0.4, f"the pre-norm residual:{L}")
            slots("target-twin", f"slot {t}: pre-norm residual:{L} for final_norm", twin)
        else:
            twin[t] = Fresh(post_norm(contract), 0.005, "the post-norm final_norm")
            slots("target-twin", f"slot {t}: post-norm final_norm for {spec.slots[t].layer}", twin)
    for dtype in ("bfloat16", "float16", "float32"):
        if any(s.dtype != dtype for s in spec.slots):
            out.append(Mutation("cast-dtype", f"to {dtype}", "EC201", "cast", arg=dtype))
    for how in ("longer", "shorter") if fmt.mask_key else ():  # TensorRT-LLM saves no mask
        out.append(Mutation("loss-mask-length", how, "EC202", "mask-length", arg=how))
    out.append(Mutation("truncate-ids", "last id dropped", "EC202", "truncate-ids"))
    out.append(Mutation("non-finite", "NaN in slot 0", "EC304", "non-finite", arg="nan:0"))
    out.append(
        Mutation("non-finite", f"Inf in slot {n - 1}", "EC304", "non-finite", arg=f"inf:{n - 1}")
    )
    for i in range(n):
        for factor in (RESCALE, 1 / RESCALE):
            scaled = list(keep)
            scaled[i] = Source(i, factor)
            slots("rescale-slot", f"slot {i} x{factor:g}", scaled)
    unsort = _unsort_ids(contract)
    if unsort is not None:
        out.append(unsort)
    return out


def _engine_aux_ids(contract: Contract) -> tuple[int, ...] | None:
    from ..engines.resolve import engine_aux_ids_or_none

    return engine_aux_ids_or_none(contract.serving)


def _unsort_ids(contract: Contract) -> Mutation | None:
    """The first two aux ids swapped, and the trainer's fc input in that list order."""
    spec = training_spec(contract)
    ids = _engine_aux_ids(contract)
    if contract.serving is None or ids is None or len(ids) < 2 or len(spec.fc_input) < 2:
        return None
    if list(ids) != sorted(ids) or ids[0] == ids[1]:
        return None
    new_ids = (ids[1], ids[0], *ids[2:])
    fc = (spec.fc_input[1], spec.fc_input[0], *spec.fc_input[2:])

    def edit(c: Contract) -> Contract:
        assert c.serving is not None and c.training is not None
        return replace(
            c,
            serving=replace(c.serving, aux_layer_ids=new_ids, draft_config=None),
            training=replace(c.training, fc_input=fc),
        )

    return Mutation(
        "unsort-ids",
        f"aux ids {list(new_ids)}",
        "EC506",
        "unsort-ids",
        level="contract",
        contract_edit=edit,
    )
