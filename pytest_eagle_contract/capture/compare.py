"""Comparing a shard's fc-input slots with the states the server feeds the draft.

``verify_against_capture`` reads them from capture files, ``verify_live`` asks the server;
both compare position by position and report EC701 / EC704 (and EC706 / EC707, EC702-EC705
for a missing capture or a server that cannot answer).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CaptureError, CaptureFileError, ServerUnreachable
from ..findings import UNREACHABLE, Finding, finding
from ..tables import table
from .files import Capture, CaptureIndex, ids_key
from .record import aux_count, resolve_layers, served_meta, token_ids

if TYPE_CHECKING:
    import torch

    from ..contract.model import Contract
    from ..shards.shard import Shard
    from .sglang_client import ServerInfo

# A shard slot "equals" a server state when the median per-token relative L2 error is at
# most this: bf16 rounding alone is ~0.3 %, another kernel or batch shape a few tenths of a
# percent more; one layer of a trained model moves the residual by far more.
RTOL = 0.03
_ROWS = 256  # rows compared at a time (float32 working set ~ 256 * H * 8 bytes)
_KEY = "training.fc_input"  # where capture findings point in the contract


def _errors(slot: torch.Tensor, state: torch.Tensor) -> tuple[float, float]:
    """(median per-token relative L2 error, mean cosine) of ``slot`` against ``state``."""
    import torch

    rel: list[torch.Tensor] = []
    cos: list[torch.Tensor] = []
    for start in range(0, int(slot.shape[0]), _ROWS):
        a = slot[start : start + _ROWS].to(torch.float32)
        b = state[start : start + _ROWS].to(torch.float32)
        ref = b.norm(dim=-1).clamp_min(1e-12)
        rel.append((a - b).norm(dim=-1) / ref)
        cos.append(torch.nn.functional.cosine_similarity(a, b, dim=-1))
    if not rel:
        return math.nan, math.nan
    err = torch.cat(rel)
    err = torch.where(torch.isfinite(err), err, torch.full_like(err, math.inf))
    return float(err.median()), float(torch.cat(cos).nan_to_num(0.0).mean())


@dataclass(frozen=True)
class Match:
    """What one fc position of a shard equals among the server's positions."""

    position: int
    slot: int
    equals: int | None  # the server position, or None
    closest: int
    error: float
    cosine: float
    table: tuple[float, ...]  # relative error against every server position


def match_positions(
    slots: Sequence[torch.Tensor],
    states: Sequence[torch.Tensor],
    fc_input: Sequence[int],
    rtol: float = RTOL,
) -> list[Match]:
    """For each fc position, the server position its slot equals (within ``rtol``), if any."""
    out = []
    for pos, (slot_index, slot) in enumerate(zip(fc_input, slots)):
        scores = [_errors(slot, state) for state in states]
        errors = tuple(e for e, _ in scores)
        closest = min(range(len(errors)), key=lambda j: errors[j])
        err, cosine = scores[closest]
        out.append(
            Match(pos, slot_index, closest if err <= rtol else None, closest, err, cosine, errors)
        )
    return out


def verify_against_capture(
    contract: Contract, shard: Shard, index: CaptureIndex, rtol: float = RTOL
) -> list[Finding]:
    """Compare each fc-input slot of ``shard`` with the server's state at that position.

    Findings: EC701 per position whose slot is not the server's state there (naming the
    server position it does equal, if any), EC704 when the capture holds another number
    of states, EC706 (warning) when no capture has the shard's input_ids, EC707 when the
    capture file is broken. A shard that cannot be read or split gives no findings here
    (the structure check reports it).
    """
    spec = contract.training
    sample = shard.sample
    if spec is None or sample is None or sample.input_ids is None or shard.split_problems:
        return []
    ids = sample.input_ids
    at = partial(finding, contract=contract, key=_KEY, file=shard.label)
    try:
        cap = index.find(ids)
    except CaptureFileError as exc:
        return [at("EC707", str(exc))]
    if cap is None:
        where = f" in {index.root}" if index.root else ""
        return [
            at(
                "EC706",
                f"no capture of this shard's {ids.shape[0]} input ids{where}",
                severity="warning",
                found=f"ids sha256 {ids_key(ids)[:16]}",
                hint="record one: eagle-contract record CONTRACT SHARD --sglang-url URL "
                f"-o {index.root or 'DIR'}",
            )
        ]
    return compare(contract, shard, cap, rtol)


_INFO: dict[str, ServerInfo] = {}  # server_info per URL, asked once per process


def verify_live(
    contract: Contract, shard: Shard, url: str, timeout: float = 60.0, rtol: float = RTOL
) -> list[Finding]:
    """As :func:`verify_against_capture`, asking the server at ``url`` now.

    A server that cannot answer gives one finding with its code (EC702-EC705), located at
    the contract's ``serving`` key; a server found unreachable is not asked again in this
    process, so its later shards get EC705 at once. A bad URL or timeout raises
    :class:`~pytest_eagle_contract.errors.UsageError`.
    """
    from .sglang_client import capture, server_info, use_server

    url = use_server(url, timeout)
    raw = shard.sample.input_ids if shard.sample is not None else None
    ids = token_ids(raw)
    if contract.training is None or raw is None or ids is None:
        return []
    try:
        if url not in _INFO:
            _INFO[url] = server_info(url, timeout=min(timeout, 10.0))
        info = _INFO[url]
        aux = capture(url, ids, aux_count(contract), contract.target.hidden_size, timeout)
    except CaptureError as exc:
        return [
            finding(
                exc.code,
                exc.message,
                contract=contract,
                key="serving",
                file=shard.label,
                hint=exc.hint,
                extra={UNREACHABLE: True} if isinstance(exc, ServerUnreachable) else None,
            )
        ]
    live = Capture(Path(), served_meta(contract, info), raw, aux, label=f"live from {info.url}")
    return compare(contract, shard, live, rtol)


def compare(contract: Contract, shard: Shard, cap: Capture, rtol: float = RTOL) -> list[Finding]:
    """EC701 / EC704 findings of ``shard``'s fc input against one capture of its ids."""
    spec = contract.training
    if spec is None or shard.sample is None or shard.split_problems:
        return []
    cap = _with_layers(contract, cap)
    hidden = contract.target.hidden_size
    slots = shard.slots
    if any(i >= len(slots) for i in spec.fc_input):
        return []
    fc = [slots[i].tensor for i in spec.fc_input]
    if any(t.dim() != 2 or t.shape[-1] != hidden or t.shape[0] != cap.aux.shape[0] for t in fc):
        return []
    states = cap.states(hidden)
    at = partial(finding, contract=contract, key=_KEY, file=shard.label)
    problems: list[Finding] = []
    if cap.aux.shape[-1] % hidden or len(states) != len(fc) or not states:
        problems.append(
            at(
                "EC704",
                f"the capture holds {cap.aux.shape[-1] / hidden:g} states of H={hidden}, "
                f"the contract's fc input {len(fc)}",
                expected=f"{len(fc)} * {hidden} = {len(fc) * hidden}",
                found=f"{cap.aux.shape[-1]} ({cap.name})",
                hint="the server was launched with another number of aux layer ids than the "
                "draft's fc takes",
            )
        )
        if cap.aux.shape[-1] % hidden or not states:
            return problems
    matches = match_positions(fc, [s for s in states if s.shape[-1] == hidden], spec.fc_input, rtol)
    details = _error_table(matches, cap)  # shown once per shard, on its first mismatch
    for m in matches:
        if m.equals == m.position:
            continue
        problems.append(_mismatch(at, contract, m, cap, details, rtol))
        details = ""
    return problems


def _with_layers(contract: Contract, cap: Capture) -> Capture:
    """Fill in the canonical layers of a capture that names its ids but not its layers."""
    if cap.meta.layers is not None or cap.meta.layer_ids is None or cap.meta.engine != "sglang":
        return cap  # a vLLM capture names its layers when it is written (vllm_files.py)
    layers, _ = resolve_layers(contract, cap.meta.arch, cap.meta.version, cap.meta.layer_ids)
    return replace(cap, meta=replace(cap.meta, layers=layers))


def _mismatch(
    at: partial[Finding], contract: Contract, m: Match, cap: Capture, details: str, rtol: float
) -> Finding:
    assert contract.training is not None
    declared = contract.training.slots[m.slot].layer
    there = (
        f"server position {m.position} = {cap.layer_of(m.position)}"
        if m.position < len(cap.states(contract.target.hidden_size))
        else f"no server position {m.position}"
    )
    if m.equals is not None:
        found = (
            f"slot {m.slot} equals server position {m.equals} = {cap.layer_of(m.equals)} "
            f"(rel. error {m.error:.2g}, cosine {m.cosine:.4f})"
        )
        hint = (
            f"the shard's slot {m.slot} holds what the server feeds at position "
            f"{m.equals} ({cap.layer_of(m.equals)}): slots swapped or layers shifted "
            "between the capture that wrote the shards and this server"
        )
    else:
        found = (
            f"slot {m.slot} equals no server position (closest: position {m.closest} = "
            f"{cap.layer_of(m.closest)}, rel. error {m.error:.2g} > {rtol:g})"
        )
        hint = (
            f"slot {m.slot} was captured from a layer this server does not feed the draft "
            "(a one-layer shift between conventions or versions?), or in another dtype or "
            "model"
        )
    return at(
        "EC701",
        f"fc position {m.position} (slot {m.slot}, declared {declared}) is not what "
        "the server feeds the draft there",
        slot=m.slot,
        expected=there,
        found=found,
        hint=hint,
        details=details,
        extra={
            "capture": cap.label or str(cap.path),
            "equals": m.equals,
            "closest": m.closest,
            "error": m.error,
            "errors": list(m.table),
        },
    )


def _error_table(matches: Sequence[Match], cap: Capture) -> str:
    if not matches:
        return ""
    n = len(matches[0].table)
    head = ["fc pos / slot"] + [f"server {j} ({cap.layer_of(j)})" for j in range(n)]
    rows = [[f"{m.position} / slot {m.slot}"] + [f"{e:.3g}" for e in m.table] for m in matches]
    return (
        "median relative error, shard slot vs server state "
        f"({cap.name}, {cap.meta.engine} {cap.meta.version or '?'}):\n" + table(head, rows)
    )
