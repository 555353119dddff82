"""The ``values`` family: ids inside the vocabulary, a binary non-empty mask, finite states."""

from __future__ import annotations

import math
from functools import partial
from typing import TYPE_CHECKING, Any

from ..findings import Finding, codes, finding, not_run
from ..shards.reading import Array, comparable
from .family import CheckFamily, shard_input

if TYPE_CHECKING:
    import numpy as np

    from ..contract.model import Contract
    from ..shards.shard import Shard


def check_values(contract: Contract, shard: Shard) -> list[Finding]:
    return check_ids_and_mask(contract, shard) + check_finite(contract, shard)


def check_ids_and_mask(contract: Contract, shard: Shard) -> list[Finding]:
    """EC301-EC303: the ids inside the vocabulary, the loss mask binary and not empty (the
    training guard runs it on every batch, without the states' statistics)."""
    import numpy as np

    spec, sample = shard_input(contract, shard)
    out: list[Finding] = []
    at = partial(finding, contract=contract, file=shard.label)  # where every finding is
    ids, mask = _numbers(sample.ids), _numbers(sample.mask)
    vocab = contract.target.vocab_size
    if ids is not None and ids.size:
        bad = (ids < 0) | (ids >= vocab) if vocab else (ids < 0)
        if ids.dtype.kind == "f":  # NaN, Inf or a fraction is no token id either
            bad |= ~np.isfinite(ids) | (ids != np.round(ids))
        if bool(bad.any()):
            first = int(np.flatnonzero(bad)[0])
            out.append(
                at(
                    "EC301",
                    f"{int(bad.sum())} input ids outside the vocabulary, first at position {first}",
                    key="target.vocab_size",
                    expected=f"[0, {vocab})" if vocab else ">= 0",
                    found=f"{_text(ids[first])} (min {_text(ids.min())}, max {_text(ids.max())})",
                    hint="the shard was tokenized with another tokenizer, or vocab_size is wrong",
                )
            )
    fmt = sample.format
    if sample.mask is None and fmt.mask_key in fmt.optional_keys:
        reason = sample.metadata.get("unread") or (
            f"the shard holds no {fmt.mask_key} and no dataset row beside it gives one"
        )
        out.append(
            not_run(
                "values' loss-mask checks (EC302, EC303)",
                reason,
                contract=contract,
                key="training.loss_mask",
                file=shard.label,
            )
        )
    if mask is not None and mask.size:
        not_binary = (mask != 0) & (mask != 1)
        if bool(not_binary.any()):
            first = int(np.flatnonzero(not_binary)[0])
            values = [_text(v) for v in np.unique(mask)[:8]]
            out.append(
                at(
                    "EC302",
                    f"loss_mask holds {int(not_binary.sum())} values other "
                    f"than 0 and 1, first at position {first}",
                    key="training.loss_mask",
                    expected="{0, 1}",
                    found=values,
                )
            )
        elif not spec.allow_all_zero_loss_mask and not bool(mask.any()):
            out.append(
                at(
                    "EC303",
                    f"loss_mask is all zero over {mask.size} tokens",
                    key="training.loss_mask",
                    expected="at least one 1",
                    found="sum 0",
                    hint="the chat template lost the assistant turns; set loss_mask.allow_all_zero "
                    "if such samples are intended",
                )
            )
    return out


def check_finite(contract: Contract, shard: Shard) -> list[Finding]:
    """EC304: NaN or Inf in a [T, H] slot, from the slot's norm statistics (computed once
    per shard, shared with the norms family)."""
    out: list[Finding] = []
    at = partial(finding, contract=contract, file=shard.label)
    for slot in shard.slots:
        if slot.array.dim() != 2:
            continue
        stats = shard.stats(slot.index)
        if stats.nonfinite_tokens:
            out.append(
                at(
                    "EC304",
                    f"slot {slot.index} ({slot.source}) holds NaN or Inf in "
                    f"{stats.nonfinite_tokens} of {stats.tokens} tokens, first at token "
                    f"{stats.first_nonfinite}",
                    slot=slot.index,
                    expected="finite values",
                    found=f"{stats.nonfinite_tokens} bad tokens",
                    hint="the target overflowed (fp16?) or the capture read uninitialised memory",
                )
            )
    return out


def _numbers(t: Array | None) -> np.ndarray[Any, Any] | None:
    """ids or mask in a dtype every comparison takes; None when there are none or they are
    complex (the structure family's EC201 says what was found and what is expected)."""
    return None if t is None else comparable(t)


def _text(v: Any) -> int | str:
    """One value: an int when it is one, else its float text (nan, inf, 0.5)."""
    x = v.item()
    return int(x) if isinstance(x, int) or (math.isfinite(x) and x == int(x)) else str(x)


FAMILY = CheckFamily(
    "values",
    "shard",
    "ids inside the vocabulary, a binary non-empty loss mask, finite states",
    codes=codes("EC30"),
    keys=("training.slots", "target.vocab_size", "training.loss_mask"),
    on_shard=check_values,
)
