"""A trainer's batch as the shard families read it: one :class:`~..shards.shard.Shard` per
row (the batch dimension split off, padding cut away), named ``batch I`` (``row R``).

What is not a batch of tensors is a usage error (``TypeError`` or ``ValueError`` with the key
and what was found), never a finding: a batch that is not a dict, a key that is not a name,
a value that is not a torch tensor where the layout reads one, a sparse, nested, quantized
or meta tensor, or a view that declares more elements than its storage holds. Disagreeing
batch dimensions and an empty batch are findings (EC202, EC205), as in a shard.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..findings import finding
from ..shards.reading import Sample
from ..shards.shard import Shard
from .layouts import LAYOUTS, SPECFORGE_BATCH, SPECFORGE_LOGITS_BATCH, detect_layout

if TYPE_CHECKING:
    import torch

    from ..contract.model import Contract
    from ..findings import Finding
    from ..shards.formats import Format

LOGITS = ("logits", "pruned_logits")  # SpecForge target_repr values that are not a state
MAX_ROWS = 1024  # samples in one batch; beyond this a "batch" is garbage, not a batch


@dataclass
class Rows:
    """A batch split for the checks: its layout, one shard per row, the batch-level findings
    (then there are no rows), and its state tensors as given (for the finiteness screen)."""

    layout: Format
    shards: list[Shard]
    problems: list[Finding] = field(default_factory=list)
    states: list[torch.Tensor] = field(default_factory=list)
    target_dropped: bool = False  # a SpecForge batch whose target is logits, not a state
    padding_rows: int = 0  # rows whose valid-token marks mark none: nothing to check
    source: Mapping[str, Any] = field(default_factory=dict, repr=False)  # the batch's tensors
    row_of: list[int | None] = field(default_factory=list)  # per shard: its row (None: all)

    def first_document(self, i: int) -> int | None:
        """How many of shard ``i``'s tokens belong to its first document, where its row
        packs more than one (``document_ids``: a reference capture runs on one); else None."""
        if getattr(self.layout, "valid", "") != "document_ids":
            return None
        doc = _row_values(self.source, "document_ids", self.row_of[i])
        if doc is None:
            return None
        kept = doc[doc >= 0]  # the tokens the shard kept, in order
        if not kept.numel():
            return None
        other = (kept != kept[0]).nonzero()
        return int(other[0, 0]) if other.numel() else None

    def first_position(self, i: int) -> int | None:
        """The ``position_ids`` entry of shard ``i``'s first token (0 where its states were
        captured from its first token on), or None where the batch gives none."""
        pos = _row_values(self.source, "position_ids", self.row_of[i])
        if pos is None or pos.is_floating_point() or pos.is_complex() or not pos.numel():
            return None
        valid_key = getattr(self.layout, "valid", "")
        marks = _row_values(self.source, valid_key, self.row_of[i]) if valid_key else None
        if marks is not None and marks.shape == pos.shape:
            pos = pos[_marks(marks, valid_key).to(pos.device)]
        return int(pos[0]) if pos.numel() else None


def batch_tensors(batch: object) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """The batch's dict of tensors and its metadata: a SpecForge ``TrainBatch`` (or any
    object with a ``tensors`` dict) or a dict; keys starting with ``__`` are metadata (the
    speculators collator's recovery record)."""
    tensors = getattr(batch, "tensors", batch)
    metadata = getattr(batch, "metadata", {})
    if not isinstance(tensors, Mapping):
        raise TypeError(
            f"a batch is a dict of tensors (or a SpecForge TrainBatch), not a "
            f"{type(batch).__name__}"
        )
    bad = next((k for k in tensors if not isinstance(k, str)), None)
    if bad is not None:
        raise TypeError(f"batch key {bad!r} is a {type(bad).__name__}, not a name")
    if not isinstance(metadata, Mapping):
        metadata = {}
    return {k: v for k, v in tensors.items() if not k.startswith("__")}, metadata


def split_batch(
    batch: object, contract: Contract, index: int, layout: str = "auto", to_cpu: bool = False
) -> Rows:
    """``batch`` (batch number ``index``) split into rows as ``layout`` reads it ("auto":
    by its keys, see :func:`.layouts.detect_layout`). With ``to_cpu`` the states are copied
    to the host (for the norm statistics); ids and masks always are."""
    tensors, metadata = batch_tensors(batch)
    dropped = metadata.get("target_repr") in LOGITS and "target" in tensors
    if dropped:  # the teacher's logits: no state to hold to a slot
        tensors = {k: v for k, v in tensors.items() if k != "target"}
    fmt = LAYOUTS[layout] if layout != "auto" else _detect(tensors, contract, dropped)
    if dropped and fmt is SPECFORGE_BATCH:
        fmt = SPECFORGE_LOGITS_BATCH
    states = _checked(tensors, fmt)
    hidden = contract.target.hidden_size
    ids = tensors.get(fmt.ids_key)
    if ids is None or ids.dim() == 1:  # one sample without a batch dimension
        row = _row(tensors, fmt, None, to_cpu)
        shards = [] if row is None else [_shard(f"batch {index}", hidden, fmt, row)]
        return Rows(
            fmt,
            shards,
            states=states,
            target_dropped=dropped,
            padding_rows=int(row is None),
            source=tensors,
            row_of=[None] * len(shards),
        )
    if ids.dim() != 2:
        raise ValueError(
            f"batch[{fmt.ids_key!r}] has shape {list(ids.shape)}: expected [B, T] or [T]"
        )
    size = int(ids.shape[0])
    if size > MAX_ROWS:
        raise ValueError(
            f"batch[{fmt.ids_key!r}] has {size} rows: the guard checks batches of up to "
            f"{MAX_ROWS} samples"
        )
    at = partial(finding, contract=contract, file=f"batch {index}")
    for key, value in _known(tensors, fmt):
        for tensor in value if isinstance(value, (list, tuple)) else [value]:
            if tensor.dim() < 2 or int(tensor.shape[0]) != size:
                found = list(tensor.shape)
                problem = at(
                    "EC202",
                    f"{key} has shape {found} beside {fmt.ids_key} of {size} rows",
                    key="training.sequence",
                    expected=f"[{size}, T, ...] (a row per sample, as {fmt.ids_key})",
                    found=found,
                    hint="the collator stacked one key and not the others",
                )
                return Rows(fmt, [], [problem], states, dropped)
    if size == 0:
        problem = at(
            "EC205",
            "the batch holds no samples",
            key="training.sequence",
            expected="at least one sample",
            found=f"{fmt.ids_key} of shape {list(ids.shape)}",
        )
        return Rows(fmt, [], [problem], states, dropped)
    shards, padding = [], 0
    row_of: list[int | None] = []  # each shard's row
    for r in range(size):
        label = f"batch {index}" if size == 1 else f"batch {index} row {r}"
        row = _row(tensors, fmt, r, to_cpu)
        if row is None:  # padding only (speculators' batch after a failed generation)
            padding += 1
            continue
        shards.append(_shard(label, hidden, fmt, row))
        row_of.append(r)
    return Rows(
        fmt,
        shards,
        states=states,
        target_dropped=dropped,
        padding_rows=padding,
        source=tensors,
        row_of=row_of,
    )


def _detect(tensors: Mapping[str, Any], contract: Contract, dropped: bool) -> Format:
    fmt_name = contract.training.format if contract.training else "auto"
    keys = set(tensors) | ({"target"} if dropped else set())
    return detect_layout(keys, fmt_name)


def _row_values(tensors: Mapping[str, Any], key: str, r: int | None) -> torch.Tensor | None:
    """Row ``r`` of the batch's ``key`` as a 1-D tensor (the whole of a 1-D one when ``r``
    is None), or None where the batch holds no such tensor."""
    import torch

    value = tensors.get(key)
    if not isinstance(value, torch.Tensor) or _unusable(value):
        return None
    if r is not None and value.dim() == 2 and r < int(value.shape[0]):
        value = value[r]
    return value.detach() if value.dim() == 1 else None


def _known(tensors: Mapping[str, Any], fmt: Format) -> list[tuple[str, Any]]:
    """The keys the layout reads (ids, mask, valid tokens, states) that the batch holds."""
    names = [fmt.ids_key, fmt.mask_key, getattr(fmt, "valid", ""), *(k for k, _ in fmt.states)]
    return [(k, tensors[k]) for k in dict.fromkeys(names) if k and k in tensors]


def _checked(tensors: Mapping[str, Any], fmt: Format) -> list[torch.Tensor]:
    """Every value the layout reads is a dense torch tensor over real storage (a list of
    them for a ``list`` key); the state tensors, for the screen."""
    import torch

    packing = dict(fmt.states)
    states = []
    for key, value in _known(tensors, fmt):
        items = value if packing.get(key) == "list" and isinstance(value, (list, tuple)) else None
        for j, tensor in enumerate(items if items is not None else [value]):
            name = f"batch[{key!r}]" + (f"[{j}]" if items is not None else "")
            if not isinstance(tensor, torch.Tensor):
                what = "a list of tensors" if packing.get(key) == "list" else "a torch.Tensor"
                raise TypeError(f"{name} is a {type(tensor).__name__}, not {what}")
            kind = _unusable(tensor)
            if kind:
                raise TypeError(f"{name} is {kind} tensor: the guard reads dense tensors")
            held = tensor.untyped_storage().nbytes() - tensor.storage_offset() * tensor.itemsize
            declared = _extent(tensor) * tensor.itemsize
            if tensor.numel() and declared > held:
                raise ValueError(
                    f"{name} of shape {list(tensor.shape)} reaches {declared} bytes past its "
                    f"start in a storage of {held}: not a tensor a trainer holds"
                )
            if key in packing:
                states.append(tensor)
    return states


def _unusable(t: torch.Tensor) -> str:
    import torch

    if t.is_nested:
        return "a nested"
    if t.layout != torch.strided:
        return "a sparse"
    if t.is_quantized:
        return "a quantized"
    if t.is_meta:
        return "a meta"
    return ""


def _extent(t: torch.Tensor) -> int:
    """How many elements from its first the tensor's last element lies, plus one."""
    return 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if n > 0)


def _row(
    tensors: Mapping[str, Any], fmt: Format, r: int | None, to_cpu: bool
) -> dict[str, Any] | None:
    """Row ``r`` of every tensor the layout reads (all of a tensor when ``r`` is None), cut
    to the valid tokens; other keys as they are (EC102 names an unexpected one). None when
    the valid-token marks mark no token (a row of padding, which trains nothing)."""
    known = dict(_known(tensors, fmt))
    states = {k for k, _ in fmt.states}
    out: dict[str, Any] = {}
    for key, value in tensors.items():
        if key not in known:
            out[key] = value
            continue
        host = to_cpu or key not in states

        def take(t: torch.Tensor, host: bool = host) -> torch.Tensor:
            t = (t if r is None else t[r]).detach()
            return t.cpu() if host else t

        out[key] = [take(t) for t in value] if isinstance(value, (list, tuple)) else take(value)
    valid_key = getattr(fmt, "valid", "")
    valid = out.pop(valid_key, None) if valid_key else None
    if valid is not None and valid.dim() == 1:
        if valid.numel() and not bool(_marks(valid, valid_key).any()):
            return None
        out = _cut(out, valid, valid_key, set(known) - {valid_key})
    return out


def _cut(out: dict[str, Any], valid: torch.Tensor, key: str, cut: set[str]) -> dict[str, Any]:
    """The tensors in ``cut`` of ``valid``'s length kept to the tokens it marks."""
    marks = _marks(valid, key)
    n = int(marks.sum())
    prefix = bool(marks[:n].all())
    length = int(valid.shape[0])

    def keep(t: torch.Tensor) -> torch.Tensor:
        if t.dim() == 0 or int(t.shape[0]) != length:
            return t  # another length: the structure family says so (EC202)
        return t[:n] if prefix else t[marks.to(t.device)]

    for k in cut & set(out):
        v = out[k]
        out[k] = [keep(t) for t in v] if isinstance(v, list) else keep(v)
    return out


def _marks(valid: torch.Tensor, key: str) -> torch.Tensor:
    """The real tokens: ``document_ids`` not -1, an ``attention_mask`` not 0."""
    return valid >= 0 if key == "document_ids" else valid != 0


def _shard(label: str, hidden: int, fmt: Format, tensors: dict[str, Any]) -> Shard:
    return Shard(Path(label), label, hidden, sample=Sample(Path(label), fmt, tensors, {}))
