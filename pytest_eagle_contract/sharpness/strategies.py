"""Hypothesis strategies over a contract's records and pipeline bugs (docs/sharpness.md).

    from hypothesis import given
    from pytest_eagle_contract.contract.model import load_contract
    from pytest_eagle_contract.sharpness.strategies import check_record, shards

    contract = load_contract("contracts/run7.yaml")

    @given(shards(contract))
    def test_my_collate_keeps_the_contract(record):
        out = my_collate(record.to_dict())
        ...

The records (:mod:`.records`) and the mutations (:mod:`.mutations`) are re-exported here,
so a failing example's printed line (``build(contract, Recipe(...))``) runs with this
module's names. Hypothesis is imported by :func:`shards`, :func:`recipes` and
:func:`mutations` alone: the sharpness self-test runs without it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..checks.family import training_spec
from ..contract.model import Contract
from .mutations import KINDS, Fresh, Mutation, Source, find_mutation, mutation_list
from .records import (
    MaskKind,
    NotApplicable,
    Recipe,
    Shape,
    ShardRecord,
    SlotRecipe,
    build,
    center,
    check_record,
    norm_range,
    record_format,
    torch_dtype,
)

if TYPE_CHECKING:
    from hypothesis.strategies import DrawFn, SearchStrategy

__all__ = [
    "KINDS",
    "PROFILE",
    "Fresh",
    "Mutation",
    "NotApplicable",
    "Recipe",
    "ShardRecord",
    "SlotRecipe",
    "Source",
    "build",
    "center",
    "check_record",
    "find_mutation",
    "mutation_list",
    "mutations",
    "norm_range",
    "recipes",
    "record_format",
    "shards",
    "use_ci_profile",
]

PROFILE = "eagle-contract-ci"
MAX_TOKENS = 512  # longest sequence generated unless asked (a contract may allow 1 << 20)
MAX_ELEMENTS = 1 << 20  # tokens * hidden * slots budget of one generated record


def use_ci_profile() -> str:
    """Register the CI profile (derandomized, no example database, no deadline, failure
    blobs printed) and load it unless the user already loaded another. Returns the name of
    the profile in force."""
    from hypothesis import HealthCheck, settings
    from hypothesis.errors import InvalidArgument

    try:
        settings.get_profile(PROFILE)
    except InvalidArgument:
        settings.register_profile(
            PROFILE,
            derandomize=True,
            database=None,
            deadline=None,
            print_blob=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
    current = settings.get_current_profile_name()
    if current == "default":
        settings.load_profile(PROFILE)
        return PROFILE
    return current


def _length_bounds(contract: Contract, max_tokens: int, max_elements: int) -> tuple[int, int]:
    spec = training_spec(contract)
    width = contract.target.hidden_size * max(len(spec.slots), 1)
    cap = max(1, min(max_tokens, max_elements // width))
    lo = spec.min_length
    return lo, max(lo, min(spec.max_length, cap))


def _special_norms(contract: Contract, index: int) -> list[float]:
    """Norms worth trying first: the edges and centre of the slot's range, and the middle
    of its overlap with every other slot's range (where a swap would slip through)."""
    import torch

    spec = training_spec(contract)
    slot = spec.slots[index]
    lo, hi = norm_range(slot)
    out = [lo, hi, center(lo, hi)]
    for other in spec.slots:
        if other.index != index:
            olo, ohi = norm_range(other)
            a, b = max(lo, olo), min(hi, ohi)
            if a <= b:
                out.append(center(a, b))
    if slot.norm is None or math.isinf(slot.norm.high):
        finfo = torch.finfo(torch_dtype(slot.dtype))
        out.append(finfo.max / 4.0)  # the largest values the dtype allows
    if slot.norm is None or slot.norm.low <= 0:
        out.append(float(torch.finfo(torch_dtype(slot.dtype)).tiny))
    return sorted(set(out), key=out.index)


def recipes(
    contract: Contract, *, max_tokens: int = MAX_TOKENS, max_elements: int = MAX_ELEMENTS
) -> SearchStrategy[Recipe]:
    """Recipes of records the contract accepts. Each field has one strategy with the
    contract's constraints built in (lengths at and near the bounds, masks with one or all
    but one response token, norms at the edges, centre and overlaps of each slot's bounds):
    nothing is filtered after drawing."""
    from hypothesis import strategies as st

    spec = training_spec(contract)
    lo, hi = _length_bounds(contract, max_tokens, max_elements)
    edges = sorted({n for n in (lo, lo + 1, hi - 1, hi) if lo <= n <= hi})
    lengths = st.one_of(st.sampled_from(edges), st.integers(lo, hi))
    slot_strategies = []
    for slot in spec.slots:
        nlo, nhi = norm_range(slot)
        norms = st.one_of(
            st.sampled_from(_special_norms(contract, slot.index)),
            st.floats(nlo, nhi, allow_nan=False, allow_infinity=False),
        )
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
            seed=draw(st.integers(0, 2**32 - 1)),
            length=length,
            slots=tuple(draw(s) for s in slot_strategies),
            mask=draw(st.sampled_from(kinds)),
            mask_at=draw(st.integers(0, max(length - 1, 0))),
            ids=draw(st.sampled_from(("random", "extremes"))),
        )

    result: SearchStrategy[Recipe] = draw_recipe()
    return result


def shards(
    contract: Contract, *, max_tokens: int = MAX_TOKENS, max_elements: int = MAX_ELEMENTS
) -> SearchStrategy[ShardRecord]:
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
