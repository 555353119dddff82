"""Evidence of what each slot really is, from the target's own weights and a reference run.

- ``identify``: run the target (transformers, CPU) on the shard's input_ids, collect every
  canonical layer and name, per slot, the best match and the runner-up.
- weight checks, reading only the tensors they need: the embedding rows (EC601), the final
  norm weight (EC602), lm_head (EC603).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from ..contract.model import Contract
from ..findings import Finding, RuleCode, codes, finding, not_run
from ..layers import Layer
from .family import CheckFamily, needed_target, shard_input

# The target's code (models/) and torch are imported by the functions that run it: a check
# that names no target model imports neither (the CLI's start-up, docs/audit.md).
if TYPE_CHECKING:
    import torch

    from ..models.target import TargetModel
    from ..shards.shard import Shard
    from .unit import Resources, Unit

EMBED_RTOL = 1e-2  # a slot equals the embedding rows when its relative error is below this
POST_NORM_TOL = 0.02  # |rms(y / w) - 1| below this, per token, marks a post-norm state
_NOT_THIS_TARGET = "the shard does not come from this target model"


@dataclass(frozen=True)
class Match:
    layer: Layer
    cosine: float
    rel_error: float


@dataclass(frozen=True)
class Identification:
    """The canonical layer a stored slot matches best, and its runner-up."""

    slot: int
    best: Match
    runner_up: Match
    note: str = ""  # what the best match is beyond its layer (the unscaled embedding rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            **({"note": self.note} if self.note else {}),
            "slot": self.slot,
            "layer": str(self.best.layer),
            "cosine": round(self.best.cosine, 6),
            "rel_error": round(self.best.rel_error, 6),
            "runner_up": {
                "layer": str(self.runner_up.layer),
                "cosine": round(self.runner_up.cosine, 6),
                "rel_error": round(self.runner_up.rel_error, 6),
            },
        }


def _compare(x: torch.Tensor, y: torch.Tensor) -> Match:
    import torch

    cos = torch.nn.functional.cosine_similarity(x, y, dim=-1).mean()
    rel = torch.linalg.vector_norm(x - y) / torch.linalg.vector_norm(y).clamp_min(1e-12)
    return Match(Layer(0), float(cos), float(rel))


def identify(
    slots: list[torch.Tensor], input_ids: torch.Tensor, target: TargetModel
) -> list[Identification]:
    """Name every slot by a reference capture of the target on the shard's own tokens.

    Ranked by relative L2 error (scale-aware, so a post-norm state is told from its
    pre-norm input even where they point the same way); cosine is reported beside it.
    """
    from ..errors import CodedError
    from ..models.inputs import unfit
    from ..models.reference import capture_canonical

    bad = unfit(input_ids, target, slots=slots)
    if bad is not None:  # callers check first and say so; nothing unfit reaches the model
        raise CodedError(bad.code, f"no reference capture: {bad.reason}")
    import torch

    states = capture_canonical(target.module, input_ids.long())  # on the model's device
    states = {layer: state.float() for layer, state in states.items()}
    device = next(iter(states.values())).device
    out = []
    for index, slot in enumerate(slots):
        x = slot.to(device=device, dtype=torch.float32)
        matches = []
        for layer, state in states.items():
            if state.shape != x.shape:
                continue
            m = _compare(x, state)
            matches.append(Match(layer, m.cosine, m.rel_error))
        matches.sort(key=lambda m: m.rel_error)
        note = ""
        scale = target.embedding_normalizer
        if scale != 1.0 and matches and Layer(0) in states and states[Layer(0)].shape == x.shape:
            raw = _compare(x, states[Layer(0)] / scale)  # the rows without Gemma's sqrt(H)
            if raw.rel_error < matches[0].rel_error:
                matches.insert(0, Match(Layer(0), raw.cosine, raw.rel_error))
                note = (
                    f"the embedding rows without the normalizer sqrt(hidden_size) = "
                    f"{scale:.4g} (EC624): {scale:.3g} times smaller than the embed state"
                )
        if len(matches) >= 2:
            out.append(Identification(index, matches[0], matches[1], note))
    return out


# -- weight-based checks -----------------------------------------------------------------


def check_target_config(contract: Contract, target: TargetModel) -> list[str]:
    """Differences between the contract's target section and the model's config.json."""
    t = contract.target
    out = []
    for name, declared, actual in (
        ("num_hidden_layers", t.num_hidden_layers, target.num_layers),
        ("hidden_size", t.hidden_size, target.hidden_size),
        ("vocab_size", t.vocab_size, target.vocab_size),
    ):
        if declared is not None and actual is not None and declared != actual:
            out.append(f"target.{name} is {declared}, the model's config.json says {actual}")
    return out


def embedding_error(slot: torch.Tensor, rows: torch.Tensor) -> float:
    import torch

    expected = rows.to(slot.dtype).float()
    diff = torch.linalg.vector_norm(slot.float() - expected)
    return float(diff / torch.linalg.vector_norm(expected).clamp_min(1e-12))


def post_norm_deviation(slot: torch.Tensor, weight: torch.Tensor) -> float:
    """Median over tokens of |rms(y / w) - 1|: 0 for an RMSNorm output with weight w."""
    import torch

    w = weight.float()
    keep = w.abs() > 1e-3 * float(w.abs().max())
    ratio = slot.float()[:, keep] / w[keep]
    rms = torch.sqrt((ratio * ratio).mean(dim=-1))
    return float((rms - 1).abs().median())


def teacher_agreement(
    state: torch.Tensor,
    post_norm: bool,
    target: TargetModel,
    input_ids: torch.Tensor,
    loss_mask: torch.Tensor | None,
    chunk: int = 256,
) -> tuple[int, int]:
    """(agreements, response tokens): argmax(lm_head(final_norm[t])) == input_ids[t+1]."""
    import torch

    x = state.float()
    w = target.final_norm_weight.float()
    if not post_norm:
        x = w * x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + target.eps)
    head = target.lm_head
    ids = input_ids.long()
    wanted = (
        torch.ones(len(ids) - 1, dtype=torch.bool) if loss_mask is None else loss_mask[1:].bool()
    )
    positions = wanted.nonzero().flatten()
    hits = 0
    for start in range(0, len(positions), chunk):
        pos = positions[start : start + chunk]
        logits = x[pos] @ head.float().T
        hits += int((logits.argmax(dim=-1) == ids[pos + 1]).sum())
    return hits, len(positions)


def check_evidence(
    contract: Contract, shard: Shard, target: TargetModel, reference: bool
) -> list[Finding]:
    """EC601-EC605 on one shard; EC009 (not run) for a shard the target may not run on."""
    from ..models.inputs import unfit
    from ..shards.stored import to_torch

    training, sample = shard_input(contract, shard)
    at = partial(finding, contract=contract, file=shard.label)  # where every finding is
    problems = check_target_config(contract, target)
    fix = "point target.model at the checkpoint the shards came from"
    if problems:
        return [at("EC605", p, key="target", hint=fix) for p in problems]
    slots = shard.slots
    skip = partial(not_run, "evidence", contract=contract, key="target.model", file=shard.label)
    if len(slots) != len(training.slots):
        return [skip(f"the shard holds {len(slots)} slots, the contract {len(training.slots)}")]
    bad = unfit(
        sample.ids,
        target,
        slots=[s.array for s in slots],
        mask=sample.mask,
        vocab=contract.target.vocab_size,
    )
    if bad is not None and bad.code == "EC605":
        return [at("EC605", bad.reason, key="target", hint=_NOT_THIS_TARGET)]
    if bad is not None:
        return [skip(bad)]
    broken = [s.index for s in slots if shard.stats(s.index).nonfinite_tokens]
    if broken:
        return [skip(f"slot {broken[0]} holds NaN or Inf (EC304)")]
    assert sample.ids is not None  # unfit() refuses a shard without ids
    ids = to_torch(sample.ids).long()  # uint16 and kin compare as int64
    mask = sample.loss_mask
    out: list[Finding] = []
    rows = target.embedding[ids.long()]
    for slot, spec in zip(slots, training.slots):
        for code, said, expected, found, hint in _slot_evidence(
            slot.tensor, spec.layer, rows, target
        ):
            out.append(
                at(
                    code,
                    f"slot {slot.index} is declared {spec.layer} {said}",
                    slot=slot.index,
                    expected=expected,
                    found=found,
                    hint=hint,
                )
            )
    minimum = training.teacher_agreement_min
    if minimum is not None and training.target_slot is not None:
        spec = training.slots[training.target_slot]
        hits, total = teacher_agreement(
            slots[training.target_slot].tensor, spec.layer.is_final_norm, target, ids, mask
        )
        rate = hits / total if total else 0.0
        if rate < minimum:
            out.append(
                at(
                    "EC603",
                    f"teacher agreement {rate:.1%} ({hits} of {total} response tokens)",
                    key="training.teacher_agreement",
                    slot=training.target_slot,
                    expected=f">= {minimum:.1%}",
                    found=f"{rate:.1%}",
                    hint="the target slot is not the target's final state, or the "
                    "data was not generated by this target",
                )
            )
    if reference:
        declared = [spec.layer for spec in training.slots]
        out += slot_identity(
            contract, shard.label, declared, [s.tensor for s in slots], ids, target
        )
    return out


def slot_identity(
    contract: Contract,
    label: str,
    declared: list[Layer],
    slots: list[torch.Tensor],
    ids: torch.Tensor,
    target: TargetModel,
    tokens: str = "this shard's tokens",
) -> list[Finding]:
    """EC604 for each of ``slots`` (``[T, H]``, declared ``declared``) that a reference
    capture of ``target`` on ``ids`` names another layer (:func:`identify`): the slot
    identity of the ``evidence`` family, and of the training-loop guard on one row."""
    out = []
    for ident in identify(slots, ids, target):
        layer = declared[ident.slot]
        if ident.best.layer == layer:
            continue
        out.append(
            finding(
                "EC604",
                f"slot {ident.slot} is declared {layer} but is {ident.best.layer}",
                contract=contract,
                file=label,
                slot=ident.slot,
                expected=str(layer),
                found=f"{ident.best.layer} (cosine "
                f"{ident.best.cosine:.4f}, rel. error {ident.best.rel_error:.3g})",
                hint=f"runner-up {ident.runner_up.layer} (cosine "
                f"{ident.runner_up.cosine:.4f}, rel. error "
                f"{ident.runner_up.rel_error:.3g}); reference capture of the target "
                f"on {tokens}",
            )
        )
    return out


_SlotProblem = tuple[RuleCode, str, str, str, str]  # code, message end, expected, found, hint


def _slot_evidence(
    tensor: torch.Tensor, declared: Layer, rows: torch.Tensor, target: TargetModel
) -> list[_SlotProblem]:
    """EC601 / EC602 of one slot: its declared layer against the embedding rows of its ids
    and the final norm's signature."""
    out: list[_SlotProblem] = []
    scale = target.embedding_normalizer  # sqrt(H) for Gemma: the embed state is scaled rows
    err = embedding_error(tensor, rows * scale) if scale != 1.0 else embedding_error(tensor, rows)
    raw = embedding_error(tensor, rows) if scale != 1.0 else err
    if declared.is_embed and err > EMBED_RTOL and raw <= EMBED_RTOL:
        out.append(
            (
                "EC624",
                f"but holds embed_tokens.weight[input_ids] without the architecture's "
                f"normalizer sqrt(hidden_size) = {scale:.4g}: {scale:.3g} times too small "
                "(cosine 1.0 all the same)",
                f"embed_tokens.weight[input_ids] * {scale:.4g}",
                "the unscaled rows (relative error "
                f"{raw:.2g} to them, {err:.3g} to the scaled state)",
                "capture the input of layer 0 (the engine feeds the draft the scaled "
                "state), or multiply the slot by sqrt(hidden_size)",
            )
        )
    elif declared.is_embed and err > EMBED_RTOL:
        out.append(
            (
                "EC601",
                "but differs from embed_tokens.weight[input_ids]",
                "relative error 0",
                f"relative error {err:.3g}",
                "the slot holds a deeper layer",
            )
        )
    elif not declared.is_embed and min(err, raw) <= EMBED_RTOL:
        out.append(
            (
                "EC601",
                "but equals embed_tokens.weight[input_ids]",
                str(declared),
                f"the embedding (relative error {err:.2g})",
                "an embedding slot where a residual layer belongs: the "
                "capture took index 0, or put the embedding in front",
            )
        )
    weight = target.final_norm_weight
    dev = post_norm_deviation(tensor, weight)
    looks_post = dev < POST_NORM_TOL
    if declared.is_final_norm and not looks_post:
        profile = math.sqrt(target.hidden_size) * float(weight.float().pow(2).mean().sqrt())
        out.append(
            (
                "EC602",
                "but is not the final RMSNorm's output",
                "rms(y / w) = 1 per token",
                f"median |rms(y / w) - 1| = {dev:.3g}",
                f"a pre-norm state; post-norm per-token norms sit near "
                f"sqrt(H)*rms(w) = {profile:.4g}",
            )
        )
    elif not declared.is_final_norm and looks_post:
        out.append(
            (
                "EC602",
                "(pre-norm) but is the final RMSNorm's output",
                "a pre-norm state",
                f"median |rms(y / w) - 1| = {dev:.3g}",
                "the capture took the post-norm state; a trainer that "
                "norms it again trains on the wrong target",
            )
        )
    return out


def _run(runner: Resources, unit: Unit) -> list[Finding]:
    target = needed_target(runner, unit)
    return check_evidence(
        unit.contract, runner.shard_of(unit), target, runner.reference(unit.contract)
    )


def measured_curve(runner: Resources, unit: Unit) -> dict[str, Any]:
    """The target's median per-token norm at every canonical layer (x = 0 embed, 1..L the
    residual stream, L+1 final_norm) on this shard's tokens, each slot placed at its
    declared layer with the median it measured: once per run and contract, where a report
    asks for it (``Settings.curve``)."""
    from ..models.inputs import unfit
    from ..models.reference import capture_canonical
    from ..shards.stats import norm_stats

    if not runner.settings.curve:
        return {}
    contract, shard = unit.contract, runner.shard_of(unit)
    target, spec, ids = runner.target(contract), contract.training, shard.input_ids
    if target is None or spec is None or ids is None or shard.split_problems:
        return {}
    if unfit(ids, target) is not None:  # the shard's own checks say why
        return {}
    if not runner.first_time(("curve", contract.path)):
        return {}
    states = capture_canonical(target.module, ids.long())
    order = [Layer(k) for k in range(target.num_layers + 1)] + [Layer(-1)]
    x_of = {layer: x for x, layer in enumerate(order)}
    placed = [
        [i, str(slot.layer), x_of[slot.layer], float(shard.stats(i).median)]
        for i, slot in enumerate(spec.slots)
        if i < len(shard.slots) and slot.layer in x_of
    ]
    return {
        "curve": {
            "shard": shard.label,
            "layers": [str(x) for x in order],
            "medians": [norm_stats(states[layer].float()).median for layer in order],
            "placed": placed,
        }
    }


FAMILY = CheckFamily(
    "evidence",
    "shard",
    "what each slot is, proven with the target's weights",
    codes=(*codes("EC60"), "EC624"),
    keys=("training.slots", "target", "target.model", "target.reference_capture"),
    run=_run,
    measure=measured_curve,
    needs=frozenset({"training", "target"}),
)
