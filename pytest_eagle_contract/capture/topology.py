"""Topology parity: the captures of one prompt set on a single-GPU reference and on the
production layout (tensor, pipeline or context parallel), compared row by row.

Captures pair by their input ids (the file's ids hash). For each pair, every fc position's
state is compared token by token with the reference's, at the tolerance of EC701
(:data:`.compare.RTOL`, per token here rather than the median). What diverges is named:

- EC709: another number of states, width or rows (a state dropped on its way from an earlier
  pipeline stage to the last, where the draft runs);
- EC708: a position whose state is another one (the reference's position k, or none of them:
  a layer shifted at a pipeline stage boundary, vllm#36731), or whose rows diverge from a
  token on (a chunk or rank boundary);
- EC711: the reference's rows in another token order (ranks' shards of the sequence put back
  in the wrong order), or the same tokens sent in another order;
- EC710 (warning): a prompt captured on one side only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from ..errors import CaptureFileError
from ..findings import Finding, finding
from .compare import RTOL
from .files import Capture, CaptureIndex, read_capture

if TYPE_CHECKING:
    import torch

_ROWS = 256
_PROBE_ROWS = 32  # diverging rows looked up among all the reference's rows
_SHOWN = 5


def pp_stages(num_layers: int, pp_size: int, partition: Sequence[int] | None = None) -> list[range]:
    """The layers of each pipeline stage as vLLM splits them (``get_pp_indices``,
    ``vllm/distributed/utils.py``): even, the remainder on the stages before the last, or
    ``VLLM_PP_LAYER_PARTITION`` when given."""
    if partition is not None:
        sizes = list(partition)
    else:
        sizes = [num_layers // pp_size] * pp_size
        for i in range(2, num_layers % pp_size + 2):
            sizes[-i] += 1
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return [range(a, a + n) for a, n in zip(starts, sizes)]


@dataclass(frozen=True)
class Topology:
    """What the production side is, as far as the user says (for the hints)."""

    num_layers: int | None = None
    pp_size: int = 1
    partition: tuple[int, ...] | None = None

    def stages(self) -> list[range] | None:
        if self.num_layers is None or (self.pp_size <= 1 and self.partition is None):
            return None
        size = len(self.partition) if self.partition else self.pp_size
        return pp_stages(self.num_layers, size, self.partition)


def _hidden(cap: Capture) -> int | None:
    width = int(cap.aux.shape[-1])
    if cap.meta.hidden_size and width % cap.meta.hidden_size == 0:
        return cap.meta.hidden_size
    if cap.meta.n_aux and width % cap.meta.n_aux == 0:
        return width // cap.meta.n_aux
    return None


def _row_errors(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-token relative L2 error of ``a`` against ``b`` (inf where not finite)."""
    import torch

    out = []
    for start in range(0, int(a.shape[0]), _ROWS):
        x = a[start : start + _ROWS].to(torch.float32)
        y = b[start : start + _ROWS].to(torch.float32)
        out.append((x - y).norm(dim=-1) / y.norm(dim=-1).clamp_min(1e-12))
    err = torch.cat(out) if out else torch.zeros(0)
    return torch.where(torch.isfinite(err), err, torch.full_like(err, float("inf")))


def _spans(tokens: Sequence[int]) -> str:
    """Token indices as ranges: ``3-7, 12``."""
    out: list[str] = []
    for t in tokens:
        if out and out[-1].split("-")[-1] == str(t - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{t}"
        else:
            out.append(str(t))
    text = ", ".join(out[:8])
    return text + (f" and {len(out) - 8} more spans" if len(out) > 8 else "")


def _layer(cap: Capture, position: int) -> str:
    return cap.layer_of(position)


def _layer_index(cap: Capture, position: int) -> int | None:
    layers = cap.meta.layers
    if layers is None or position >= len(layers):
        return None
    name = str(layers[position])
    if name == "embed":
        return 0
    if name.startswith("residual:"):
        return int(name.split(":")[1])
    return None


def _stage_hint(ref: Capture, position: int, topo: Topology) -> str:
    stages = topo.stages()
    k = _layer_index(ref, position)
    if stages is None or k is None or topo.num_layers is None:
        return (
            "the production layout feeds another state here: on pipeline parallel, a stage "
            "that numbers its layers from 0 captures the wrong layer (vllm#36731); give "
            "--pp-size and --num-layers to see where the stage boundaries fall"
        )
    stage = next((s for s, r in enumerate(stages) if k in r), len(stages) - 1)
    first = stages[stage].start
    if stage == 0:
        return (
            f"layer {k} is on the first pipeline stage (layers {stages[0].start}-"
            f"{stages[0].stop - 1}): not a stage-boundary shift; another kernel, dtype or "
            "weights on this layout"
        )
    ids = [_layer_index(ref, p) for p in range(len(ref.meta.layers or ()))]
    wrong = sorted(first + j for j in ids if j is not None and j < len(stages[stage]))
    return (
        f"layer {k} is on pipeline stage {stage} of {len(stages)} (layers {first}-"
        f"{stages[stage].stop - 1}), past a stage boundary: a stage that numbers its layers "
        f"from 0 (vllm#36731) captures layers {wrong} there instead; or the state was not "
        "carried from its stage to the last (vllm#45985)"
    )


@dataclass(frozen=True)
class Pair:
    ref: Capture
    prod: Capture


def compare_pair(pair: Pair, topo: Topology, rtol: float = RTOL) -> list[Finding]:
    """The findings of one prompt's production capture against its reference."""
    ref, prod = pair.ref, pair.prod
    at = partial(finding, file=str(prod.path))
    h_ref, h_prod = _hidden(ref), _hidden(prod)
    rows_ref, rows_prod = int(ref.aux.shape[0]), int(prod.aux.shape[0])
    if rows_ref != rows_prod or h_ref is None or h_ref != h_prod:
        return [
            at(
                "EC709",
                "the production capture is not shaped like the reference's",
                expected=f"{rows_ref} rows of {ref.aux.shape[-1]} ({ref.name}, H={h_ref})",
                found=f"{rows_prod} rows of {prod.aux.shape[-1]} (H={h_prod})",
                hint="another model, or rows cut (chunked prefill, a prefix cache) on one side",
            )
        ]
    refs, prods = ref.states(h_ref), prod.states(h_ref)
    if len(refs) != len(prods):
        return [_count_mismatch(at, ref, refs, prods, topo, rtol)]
    out: list[Finding] = []
    for j, (r, p) in enumerate(zip(refs, prods)):
        err = _row_errors(p, r)
        bad = (err > rtol).nonzero().flatten().tolist()
        if bad:
            out.append(_diverges(at, ref, refs, p, j, err, bad, topo, rtol))
    return out


def _equals(
    state: torch.Tensor, refs: Sequence[torch.Tensor], rtol: float, but: int = -1
) -> int | None:
    """The reference position (other than ``but``) whose state ``state`` equals, if any."""
    for k, r in enumerate(refs):
        if k != but and float(_row_errors(state, r).median()) <= rtol:
            return k
    return None


def _count_mismatch(
    at: partial[Finding],
    ref: Capture,
    refs: Sequence[torch.Tensor],
    prods: Sequence[torch.Tensor],
    topo: Topology,
    rtol: float,
) -> Finding:
    held = [_equals(p, refs, rtol) for p in prods]
    missing = [k for k in range(len(refs)) if k not in held]
    named = ", ".join(f"{k} ({_layer(ref, k)})" for k in missing) or "none"
    hint = "states captured on pipeline stages before the last were dropped (vllm#45985)"
    if missing:
        hint = f"{_stage_hint(ref, missing[0], topo)}; {hint}"
    return at(
        "EC709",
        f"the production capture holds {len(prods)} states, the reference {len(refs)}",
        expected=f"{len(refs)} states: {', '.join(_layer(ref, k) for k in range(len(refs)))}",
        found=f"{len(prods)} states, equal to reference positions {held}; missing {named}",
        hint=hint,
    )


def _diverges(
    at: partial[Finding],
    ref: Capture,
    refs: Sequence[torch.Tensor],
    state: torch.Tensor,
    j: int,
    err: torch.Tensor,
    bad: list[int],
    topo: Topology,
    rtol: float,
) -> Finding:
    tokens = int(err.shape[0])
    first = bad[0]
    where = f"token {first} (rel. error {float(err[first]):.3g} > {rtol:g})"
    details = f"diverging tokens: {_spans(bad)} of {tokens}"
    other = _equals(state, refs, rtol, but=j)
    if other is not None:
        return at(
            "EC708",
            f"position {j} of the production capture is the reference's position {other}",
            slot=j,
            expected=f"position {j} = {_layer(ref, j)}",
            found=f"position {j} equals reference position {other} = {_layer(ref, other)}",
            hint="the production layout concatenates the states in another order, or "
            f"shifted by a layer; {_stage_hint(ref, j, topo)}",
            details=details,
            extra={"position": j, "equals": other, "tokens": bad[:64]},
        )
    moved = _moved_rows(state, refs[j], bad, rtol)
    if moved is not None:
        pairs = ", ".join(f"{t} -> {s}" for t, s in moved[:_SHOWN])
        return at(
            "EC711",
            f"position {j}: the production rows are the reference's in another token order",
            slot=j,
            expected=f"row t = the reference's row t ({_layer(ref, j)})",
            found=f"{len(bad)} of {tokens} rows hold other tokens' states, first "
            f"production row -> reference row: {pairs}",
            hint="the ranks' slices of the sequence were put back in the wrong order (context "
            "parallel), or the tokens were sent in another order",
            details=details,
            extra={"position": j, "moved": moved[:64]},
        )
    every = len(bad) == tokens
    hint = (
        _stage_hint(ref, j, topo)
        if every
        else f"the rows diverge from token {first} on: a chunk or rank boundary of this "
        "layout (chunked prefill, context parallel) computes them differently"
    )
    return at(
        "EC708",
        f"position {j} ({_layer(ref, j)}) differs from the reference at {len(bad)} of "
        f"{tokens} tokens",
        slot=j,
        expected=f"every token within {rtol:g} of the reference ({ref.name})",
        found=f"first at {where}; median {float(err.median()):.3g}",
        hint=hint,
        details=details,
        extra={"position": j, "tokens": bad[:64], "median": float(err.median())},
    )


def _moved_rows(
    state: torch.Tensor, ref: torch.Tensor, bad: list[int], rtol: float
) -> list[tuple[int, int]] | None:
    """For the first diverging rows, the reference row each equals; None when any equals
    none (then it is not a reordering)."""
    import torch

    ref32 = ref.to(torch.float32)
    norms = ref32.norm(dim=-1).clamp_min(1e-12)
    moved = []
    for t in bad[:_PROBE_ROWS]:
        row = state[t].to(torch.float32)
        err = (ref32 - row).norm(dim=-1) / norms
        err = torch.where(torch.isfinite(err), err, torch.full_like(err, float("inf")))
        s = int(err.argmin())
        if float(err[s]) > rtol or s == t:
            return None
        moved.append((t, s))
    return moved


@dataclass
class Parity:
    findings: list[Finding]
    pairs: int
    unpaired: int


def compare_sets(
    ref: CaptureIndex, prod: CaptureIndex, topo: Topology, rtol: float = RTOL
) -> Parity:
    """Every production capture against the reference capture of the same ids; a prompt
    captured on one side only is EC710 (a warning), or EC711 when its ids are another
    capture's in another order."""
    out = [finding("EC707", p) for p in (*ref.problems, *prod.problems)]
    pairs = unpaired = 0
    for key, paths in sorted(prod.by_key.items()):
        try:
            p = read_capture(max(paths, key=lambda x: x.stat().st_mtime))
            r = ref.find(p.input_ids) if key in ref.by_key else None
        except (CaptureFileError, OSError) as exc:
            out.append(finding("EC707", str(exc)))
            continue
        if r is None:
            unpaired += 1
            out.append(_unpaired(p, ref))
            continue
        pairs += 1
        out += compare_pair(Pair(r, p), topo, rtol)
    for key, paths in sorted(ref.by_key.items()):
        if key not in prod.by_key:
            unpaired += 1
            out.append(
                finding(
                    "EC710",
                    "a reference capture has no production capture of the same ids",
                    file=str(paths[0]),
                    severity="warning",
                    hint="record the same prompts on both layouts",
                )
            )
    return Parity(out, pairs, unpaired)


def _unpaired(prod: Capture, ref: CaptureIndex) -> Finding:
    """EC711 when a reference capture holds the same ids in another order, else EC710."""
    import torch

    ids = prod.input_ids.to(torch.int64)
    wanted = torch.sort(ids).values
    for paths in ref.by_key.values():
        try:
            r = read_capture(paths[0])
        except CaptureFileError:
            continue
        if r.input_ids.shape == ids.shape and torch.equal(
            torch.sort(r.input_ids.to(torch.int64)).values, wanted
        ):
            differ = (r.input_ids.to(torch.int64) != ids).nonzero().flatten().tolist()
            return finding(
                "EC711",
                "the production capture holds the reference's tokens in another order",
                file=str(prod.path),
                expected=f"the ids of {r.name}",
                found=f"the same {int(ids.shape[0])} ids, {len(differ)} in other places, "
                f"tokens {_spans(differ)}",
                hint="the sequence was split across ranks and put back in the wrong order "
                "before the capture (context parallel), or the prompts were built another way",
            )
    return finding(
        "EC710",
        "a production capture has no reference capture of the same ids",
        file=str(prod.path),
        severity="warning",
        hint="record the same prompts on both layouts (same tokenizer and chat template)",
    )
