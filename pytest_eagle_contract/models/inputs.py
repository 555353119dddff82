"""What a shard must hold before a model runs on it.

A reference capture (the ``evidence`` and ``layout`` families, ``identify``, ``infer``), the
probe's prompts and the HTML report's target curve feed a shard's ``input_ids`` to a real
model. Whatever the file holds is checked here first, against the model's own limits:
integer ids (no bool, float, complex), at least one token and no more than the model's
positions, every id a row of its embedding, the mask and every slot as long as the ids,
every slot ``[T, hidden_size]``. A shard that fails is named with the rule code it gets
without a model (EC201, EC202, EC205, EC301) or EC605 when the problem is the model's
(ids inside the contract's vocabulary but past the model's embedding); the family that
needed the model skips that shard and says so (:func:`..findings.not_run`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..findings import RuleCode
    from .target import TargetModel

_INTEGER_KINDS = ("int", "uint")


@dataclass(frozen=True)
class Unfit:
    """Why a model may not run on a shard: the rule code of the problem and its reason."""

    code: RuleCode
    reason: str

    def __str__(self) -> str:
        return f"{self.reason} ({self.code})"


def _dtype(t: Any) -> str:
    return str(getattr(t, "dtype", type(t).__name__)).removeprefix("torch.")


def _shape(t: Any) -> tuple[int, ...]:
    return tuple(int(n) for n in getattr(t, "shape", ()))


def unfit(
    ids: Any,
    target: TargetModel,
    *,
    slots: Sequence[Any] = (),
    mask: Any = None,
    vocab: int | None = None,
) -> Unfit | None:
    """Why ``target`` may not run on these ``ids`` (and be compared with ``slots``), or None.

    ``ids`` and ``mask`` are ``[T]`` arrays as stored (torch or the mapped reader's views),
    ``slots`` the arrays a capture is compared with; ``vocab`` the contract's vocabulary
    size: an id past it is the shard's problem (EC301); an id inside it, or with no
    contract, past the model's embedding is the model's (EC605: not this target's shard).
    """
    if ids is None:
        return Unfit("EC101", "the shard has no input ids")
    kind = _dtype(ids)
    if not kind.startswith(_INTEGER_KINDS):
        return Unfit("EC201", f"input ids are {kind}, not integers")
    shape = _shape(ids)
    if len(shape) != 1:
        return Unfit("EC201", f"input ids are {list(shape)}, not [T]")
    tokens = shape[0]
    if tokens == 0:
        return Unfit("EC205", "the sequence has 0 tokens")
    positions = target.max_positions
    if positions is not None and tokens > positions:
        return Unfit(
            "EC205",
            f"the sequence has {tokens} tokens, past the target's max_position_embeddings "
            f"{positions}",
        )
    from ..shards.reading import comparable

    values = comparable(ids)
    if values is None:
        return Unfit("EC201", f"input ids are {kind}, not integers")
    low, high = int(values.min()), int(values.max())
    if kind.startswith("uint") and low < 0:  # read as int64, a value past 2**63 wraps
        return Unfit("EC301", f"input ids of {kind} hold values past 2**63")
    rows = target.embedding_rows
    if low < 0 or (vocab is not None and high >= vocab):
        return Unfit(
            "EC301",
            f"input ids span [{low}, {high}], outside the vocabulary [0, {vocab or rows})",
        )
    if high >= rows:  # inside the contract's vocabulary (or none given): another model
        return Unfit(
            "EC605",
            f"input ids span [{low}, {high}], the target model's embedding has {rows} rows",
        )
    if mask is not None and _shape(mask)[:1] != (tokens,):
        return Unfit("EC202", f"loss_mask has shape {list(_shape(mask))} beside {tokens} input ids")
    for i, slot in enumerate(slots):
        got = _shape(slot)
        if len(got) != 2 or got[0] != tokens:
            return Unfit("EC202", f"slot {i} is {list(got)} beside {tokens} input ids")
        if got[1] != target.hidden_size:
            return Unfit(
                "EC605",
                f"slot {i} is {got[1]} wide, the target model's hidden_size is "
                f"{target.hidden_size}",
            )
    return None
