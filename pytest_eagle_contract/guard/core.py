"""The training-loop guard: a contract held to every batch a trainer takes (docs/online.md).

    guard = Guard("contracts/run7.yaml", warmup=100, every=100)
    for batch in guard.wrap(loader):      # or guard.check(batch) in the loop
        ...

Each batch is split into rows (:mod:`.batch`) and checked by the shard families' own
functions: structure (keys, dtypes, widths, slot count, lengths: EC1xx, EC2xx) and ids and
mask (EC301-EC303) on every batch; finiteness (EC304) on every batch, through one cheap
screen that computes the per-token statistics only when it fails; the norm profile (EC401)
on the schedule's batches (:mod:`.profile`), keeping each slot's running profile; with a
target model, the slot identity (EC604: the ``evidence`` family's reference capture, on
the first tokens of one row) on one profiled batch in ``identify_every``. Without one, a
shift the norm bounds cannot resolve is invisible, and the guard says so when it starts.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from ..checks.norms import check_norms
from ..checks.structure import check_structure
from ..checks.values import check_finite, check_ids_and_mask
from ..contract.model import Contract, load_contract
from ..errors import ContractViolation
from ..render import format_finding
from ..shards.reading import widens
from .batch import Rows, split_batch
from .layouts import LAYOUT_NAMES, BatchLayout
from .profile import RunningProfile, Schedule

if TYPE_CHECKING:
    import torch

    from ..findings import Finding
    from ..models.target import TargetModel
    from ..shards.shard import Shard

B = TypeVar("B")
OnViolation = Literal["raise", "log", "skip"]
LOGGER = logging.getLogger("pytest_eagle_contract.guard")
_SCREENED = ("float32", "float16", "bfloat16", "float64")
IDENTIFY_TOKENS = 64
"""Tokens of one row the slot identity runs the target on: a causal model's state at a
token depends only on the tokens before it, so a prefix is identified exactly."""


class Guard:
    """Holds ``contract`` to each batch. ``on_violation``: ``raise`` a
    :class:`~..errors.ContractViolation` at the first bad batch; ``log`` it (a warning on
    the ``pytest_eagle_contract.guard`` logger) and count it; ``skip``: log, count, and
    leave the batch out of :meth:`wrap`. ``layout``: how batches are read (``auto``: by
    their keys; see :data:`.layouts.LAYOUTS`). ``start``: the index of the first batch (a
    resumed run: violations name the run's batch numbers; the warmup counts from it, as the
    running profiles start empty). ``target_model``: the target the states come from, a
    model folder or the causal LM the trainer holds (used as it is: its device, its dtype),
    for the slot identity (EC604) on one profiled batch in ``identify_every``; without one
    the guard warns when it starts that a shift the norm bounds cannot resolve is not seen."""

    def __init__(
        self,
        contract: str | Path | Contract,
        *,
        warmup: int = 100,
        every: int = 100,
        on_violation: OnViolation = "raise",
        layout: str = "auto",
        logger: logging.Logger | None = None,
        start: int = 0,
        target_model: object = None,
        identify_every: int = 20,
    ) -> None:
        self.contract = contract if isinstance(contract, Contract) else load_contract(contract)
        if self.contract.training is None:
            raise ValueError(f"{self.contract.path}: the guard needs a 'training' section")
        self.schedule = Schedule(warmup, every)
        if type(identify_every) is not int or identify_every < 1:
            raise ValueError(f"identify_every is {identify_every!r}: a whole number >= 1")
        self.identify_every = identify_every
        if on_violation not in ("raise", "log", "skip"):
            raise ValueError(f"on_violation is {on_violation!r}: raise, log or skip")
        if layout not in LAYOUT_NAMES:
            raise ValueError(f"layout is {layout!r}: one of {', '.join(LAYOUT_NAMES)}")
        if type(start) is not int or start < 0:
            raise ValueError(f"start is {start!r}: a batch index >= 0")
        self.on_violation: OnViolation = on_violation
        self.layout = layout
        self.logger = logger or LOGGER
        self.start = start
        self.next_batch = start
        self.checked = 0  # batches checked
        self.profiled = 0  # of which the norm profile was measured on
        self.identified = 0  # of which the slot identity ran on (one row each)
        self.violations = 0  # batches with a finding
        self.padding_rows = 0  # rows that held no real token (skipped)
        self.last: ContractViolation | None = None
        self.profiles: dict[int, RunningProfile] = {}
        self._lock = threading.Lock()  # a collator may run in several loader threads
        self._warned: set[str] = set()
        self.target: TargetModel | None = None
        if "EC604" in self._waived:
            return  # the contract waives slot identity: no model is run, nothing to warn of
        if target_model is None:
            self.logger.warning("%s", unresolved_shift_warning(self.contract))
        else:
            self.target = _target(target_model, self.contract)

    # -- the two ways in -------------------------------------------------------------------

    def check(self, batch: object) -> list[Finding]:
        """The findings (errors) of ``batch`` (the next batch index); raises
        :class:`~..errors.ContractViolation` on one unless ``on_violation`` says otherwise.
        A warning (a check that cannot run on such batches: EC009) is logged once per code.
        A batch that is not a dict of tensors raises TypeError or ValueError."""
        with self._lock:
            index = self.next_batch
            self.next_batch += 1
            found = [f for f in self._findings(batch, index) if f.code not in self._waived]
            self.checked += 1
            for warning in (f for f in found if f.severity != "error"):
                if warning.code not in self._warned:  # a check that cannot run: said once
                    self._warned.add(warning.code)
                    self.logger.warning("batch %d: %s", index, format_finding(warning))
            found = [f for f in found if f.severity == "error"]
            if not found:
                return found
            self.violations += 1
            self.last = violation = ContractViolation(index, found)
        if self.on_violation == "raise":
            raise violation
        self.logger.warning("%s", violation)
        return found

    def wrap(self, loader: Iterable[B]) -> Iterator[B]:
        """``loader``'s batches, each checked before it is handed on (``skip``: a bad one is
        not handed on)."""
        for batch in loader:
            if self.check(batch) and self.on_violation == "skip":
                continue
            yield batch

    def summary(self) -> str:
        """Batches checked, profiled and broken, and each slot's running profile."""
        identified = f", {self.identified} identified" if self.target is not None else ""
        lines = [
            f"{self.checked} batch(es) checked, {self.profiled} profiled{identified}, "
            f"{self.violations} with findings"
        ]
        for slot, profile in sorted(self.profiles.items()):
            lines.append(f"  slot {slot}: {profile.describe()}")
        return "\n".join(lines)

    # -- the checks ------------------------------------------------------------------------

    @property
    def _waived(self) -> dict[str, str]:
        return self.contract.waivers

    def _findings(self, batch: object, index: int) -> list[Finding]:
        profile = self.schedule.profiles(index - self.start)
        identify = self.target is not None and self.schedule.identifies(
            index - self.start, self.identify_every
        )
        rows = split_batch(batch, self.contract, index, self.layout)
        self.padding_rows += rows.padding_rows
        if rows.problems:
            return rows.problems
        contract = self._contract_for(rows)
        out: list[Finding] = []
        for shard in rows.shards:
            out += check_structure(contract, shard)
        if out:  # values and norms of a malformed batch would mislead
            return out
        for shard in rows.shards:
            if _numeric(shard):
                out += check_ids_and_mask(contract, shard)
        if not profile and _finite(rows.states):
            return out
        if not all(t.device.type == "cpu" for t in rows.states):
            rows = split_batch(batch, self.contract, index, self.layout, to_cpu=True)
        for shard in rows.shards:
            if not all(widens(slot.array.dtype) for slot in shard.slots):
                continue  # a packed dtype (float4): EC201 said so, nothing to measure
            out += check_finite(contract, shard)
            if profile:
                out += self._profile(contract, shard)
        self.profiled += profile
        if identify and rows.shards and not any(f.severity == "error" for f in out):
            out += self._identify(contract, rows)
        return out

    def _identify(self, contract: Contract, rows: Rows) -> list[Finding]:
        """EC604 on the first :data:`IDENTIFY_TOKENS` tokens of the batch's first row (of
        its first document, where the row packs several): the ``evidence`` family's slot
        identity, a reference capture of the target on those tokens. A row the target
        cannot run on, or a forward pass that fails, is a warning (EC009), not a verdict."""
        from ..checks.evidence import slot_identity
        from ..findings import not_run
        from ..models.inputs import unfit

        target, spec = self.target, contract.training
        assert target is not None and spec is not None
        shard = rows.shards[0]
        ids = shard.input_ids
        declared = [s.layer for s in spec.slots]
        if ids is None or len(shard.slots) != len(declared):
            return []  # the structure family named it
        at = {"contract": contract, "key": "target", "file": shard.label}
        first = rows.first_position(0)
        if first not in (None, 0):  # speculators' shift_batch: input_ids[1:] beside
            return [not_run("slot identity", _shifted(first), **at)]  # hidden_states[:-1]
        n = min(int(ids.shape[0]), IDENTIFY_TOKENS, rows.first_document(0) or IDENTIFY_TOKENS)
        slots = [slot.tensor[:n] for slot in shard.slots]
        bad = unfit(ids[:n], target, slots=slots, vocab=contract.target.vocab_size)
        if bad is not None:
            return [not_run("slot identity", bad, **at)]
        tokens = f"the first {n} tokens of {shard.label}"
        try:
            found = slot_identity(contract, shard.label, declared, slots, ids[:n], target, tokens)
        except Exception as exc:  # any failure of the target's own forward pass
            reason = f"the target's forward pass failed: {str(exc)[:200]}"
            return [not_run("slot identity", reason, **at)]
        self.identified += 1
        return found

    def _profile(self, contract: Contract, shard: Shard) -> list[Finding]:
        """EC401 on the row, each finding's hint with the slot's running profile so far;
        then the row's medians join the running profiles."""
        found = [
            dataclasses.replace(f, hint=f"{f.hint}; slot {f.slot} so far: {self._so_far(f)}")
            for f in check_norms(contract, shard)
        ]
        for slot in shard.slots:
            median = shard.stats(slot.index).median if slot.array.dim() == 2 else float("nan")
            if median == median:  # not NaN
                self.profiles.setdefault(slot.index, RunningProfile()).add(median)
        return found

    def _so_far(self, f: Finding) -> str:
        profile = self.profiles.get(f.slot if f.slot is not None else -1)
        return profile.describe() if profile else "not measured yet"

    def _contract_for(self, rows: Rows) -> Contract:
        """The contract as the batch's layout holds it: a trainer's batch holds the fc input
        then the target, so the contract's must be slots 0..k-1 then k; a batch whose target
        is logits is held to the fc input's slots alone."""
        spec = self.contract.training
        assert spec is not None
        if not isinstance(rows.layout, BatchLayout):
            return self.contract
        k = len(spec.fc_input)
        target = () if spec.target_slot is None else (spec.target_slot,)
        if spec.fc_input != tuple(range(k)) or target not in ((), (k,)):
            raise ValueError(
                f"{self.contract.path}: a {rows.layout.name} holds the fc input then the "
                f"target, but training.fc_input is {list(spec.fc_input)} and target_slot "
                f"{spec.target_slot}: the guard reads trainer batches for contracts whose fc "
                "input is slots 0..k-1 and target slot k"
            )
        if not rows.target_dropped:
            return self.contract
        fc_only = dataclasses.replace(spec, slots=spec.slots[:k], target_slot=None)
        return dataclasses.replace(self.contract, training=fc_only)


def _numeric(shard: Shard) -> bool:
    """Whether the row's ids and mask can be read as numbers (a packed dtype cannot: EC201
    names it)."""
    sample = shard.sample
    assert sample is not None
    return all(t is None or widens(t.dtype) for t in (sample.ids, sample.mask))


def _finite(states: list[torch.Tensor]) -> bool:
    """Whether every state tensor is surely finite, from one float32 sum each (NaN and Inf
    survive a sum; an overflow only sends the batch to the exact check)."""
    import torch

    sums = []
    for t in states:
        if not t.numel():
            continue
        kind = str(t.dtype).removeprefix("torch.")
        if kind in _SCREENED:
            sums.append(t.sum(dtype=torch.float32).reshape(1))
        elif t.is_floating_point() or t.is_complex():
            return False  # float8 and the like: the exact check widens them
    return not sums or bool(torch.isfinite(torch.cat(sums)).all())


def _shifted(first: int) -> str:
    return (
        f"the row's position_ids start at {first}, not 0: its input ids are not the tokens "
        "its states were captured on from the first token (speculators' shift_batch drops "
        "each sample's first token: input_ids[1:] beside hidden_states[:-1]), so no "
        "reference capture reproduces them; check the stored files with `eagle-contract "
        "check --target-model DIR`"
    )


def _target(model: object, contract: Contract) -> TargetModel:
    """``model`` (a folder, a :class:`~..models.target.TargetModel` or a loaded causal LM)
    as the target, loaded now and checked against the contract's target section: a model
    that is not the contract's target is a ``ValueError`` that says how."""
    from ..checks.evidence import check_target_config
    from ..errors import UsageError
    from ..models.target import TargetModel

    try:
        if isinstance(model, TargetModel):
            target = model
        elif isinstance(model, (str, Path)):
            target = TargetModel.open(model)
        else:
            target = TargetModel.live(model)
        target.module  # noqa: B018 -- loaded (and checked) before the first batch
        target.embedding  # noqa: B018
    except UsageError as exc:
        raise ValueError(f"target_model: {exc}") from None
    problems = check_target_config(contract, target)
    if problems:
        raise ValueError(
            f"target_model {target.path} is not the target of {contract.path}: "
            + "; ".join(problems)
        )
    return target


def unresolved_shift_warning(contract: Contract) -> str:
    """What the norm profile cannot see without a target model: a layer whose median norm
    falls inside a slot's bounds (the narrowest bounds say how close that is)."""
    spec = contract.training
    assert spec is not None
    spans = [
        ((s.norm.high - s.norm.low) / (s.norm.high + s.norm.low), s.index, s.layer, s.norm)
        for s in spec.slots
        if s.norm is not None and 0 < s.norm.low <= s.norm.high < float("inf")
    ]
    if spans:
        half, index, layer, norm = min(spans, key=lambda t: t[0])
        bounds = (
            f"the narrowest, slot {index} ({layer}), accepts medians in {norm}, "
            f"+-{half:.0%} of their centre"
        )
    else:
        bounds = "no slot has finite norm bounds"
    return (
        f"{contract.path}: no target model, so the guard holds each slot to its norm bounds "
        f"alone (EC401): {bounds}; a one-layer shift to a layer whose median norm lies inside "
        "a slot's bounds cannot be seen. Pass Guard(..., target_model=DIR) or "
        "target_model=<the target's nn.Module the trainer holds>: a reference capture names "
        "each slot (EC604)"
    )
