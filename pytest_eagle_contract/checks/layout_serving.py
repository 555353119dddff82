"""The serving side of the layout check: the ids the engine reads, the fc width, the served
dtype, the target slot's norm, id order and the launch line."""

from __future__ import annotations

from ..contract.model import Contract, ServingSpec, TrainingSpec
from ..engines.draft_config import DraftConfig
from ..engines.resolve import Resolution, engine_aux_ids, get_engine
from ..engines.sglang_launch import lint_sglang, served_dtype
from ..findings import Finding
from ..layers import Layer
from ..models.draft import DraftWeights
from ..shards.formats import FORMATS
from .layout_types import LayoutReport, Span


def lint_launch(report: LayoutReport, serving: ServingSpec, serving_args: str | None) -> None:
    command = serving_args or serving.launch
    if command and serving.engine == "sglang":
        for problem in lint_sglang(command):
            report.add(problem.code, problem.message, "serving.launch", hint=problem.hint)


IDS_CODES = frozenset({"EC501", "EC502", "EC506", "EC514"})
"""Findings the served aux ids cause: each is placed where a user changes those ids
(:func:`ids_place`), in every renderer alike (terminal, JSON, GitHub, HTML)."""


def ids_place(
    contract: Contract, serving: ServingSpec, draft: DraftConfig | None
) -> tuple[str, int] | None:
    """Where the ids the engine reads are written: the draft config's line of the key the
    engine reads; else, with a draft config, the contract's ``serving.draft_config`` (the
    file to add them to); else the contract's ``serving.aux_layer_ids``; else None."""
    from ..engines.draft_config import key_line

    if draft is not None:
        for key in get_engine(serving.engine).id_keys:
            line = key_line(draft.path, key) if key in draft.aux_ids else None
            if line is not None:
                return str(draft.path), line
        return str(contract.path), contract.line_of("serving.draft_config")
    if serving.aux_layer_ids is not None:
        return str(contract.path), contract.line_of("serving.aux_layer_ids")
    return None


def placed_at_ids(
    findings: list[Finding], contract: Contract, serving: ServingSpec, draft: DraftConfig | None
) -> list[Finding]:
    """``findings`` with each of :data:`IDS_CODES` moved to :func:`ids_place`."""
    import dataclasses

    place = ids_place(contract, serving, draft)
    if place is None:
        return findings
    return [
        dataclasses.replace(f, contract=place[0], line=place[1]) if f.code in IDS_CODES else f
        for f in findings
    ]


def read_ids(
    report: LayoutReport, serving: ServingSpec, draft: DraftConfig | None
) -> tuple[int, ...] | None:
    ids = serving.aux_layer_ids
    if draft is None:
        if ids is None:
            report.add(
                "EC507",
                f"no aux ids given: {serving.engine} will use its default",
                "serving",
                severity="warning",
                hint="set serving.draft_config (or aux_layer_ids) to the draft's ids",
            )
        return ids
    engine, engine_ids = get_engine(serving.engine), engine_aux_ids(serving, draft)
    if not engine.id_keys:  # the ids come from the engine's launch config, not the draft's
        for key, unread in draft.aux_ids.items():
            report.add(
                "EC508",
                f"{draft.path}: {key} {list(unread)} is not read by {engine.title}, which "
                "takes its ids from its launch config",
                "serving.draft_config",
                severity="warning",
                hint=f"set the ids in {engine.title}'s launch config and in serving.aux_layer_ids",
            )
        return ids
    for key, unread in draft.aux_ids.items():
        if key not in engine.id_keys:
            where = key if "." in key else f"a top-level {key}"
            report.add(
                "EC508",
                f"{draft.path}: {where} {list(unread)} is ignored by {engine.title} for capture",
                "serving.draft_config",
                severity="warning" if engine_ids else "error",
                hint=f"put the ids under {engine.id_keys[0]}",
            )
    if engine_ids is None:
        report.add(
            "EC507",
            f"{draft.path} has no eagle_config.eagle_aux_hidden_state_layer_ids:"
            f" {serving.engine} silently uses its default layers",
            "serving.draft_config",
            severity="warning",
            hint="SpecForge's exporter never writes them; add them to the draft's "
            "config.json so serving cannot drift",
        )
    if ids is not None and engine_ids is not None and tuple(ids) != engine_ids:
        report.add(
            "EC515",
            f"the contract says aux_layer_ids {list(ids)}, the draft config {list(engine_ids)}",
            "serving.aux_layer_ids",
            expected=list(ids),
            found=list(engine_ids),
            hint="the draft config is what the engine reads",
        )
    return engine_ids


def fc_width(
    report: LayoutReport,
    contract: Contract,
    draft: DraftConfig | None,
    weights: DraftWeights | None,
    res: Resolution,
    engine: str,
    span: Span,
) -> None:
    training = contract.training
    assert training is not None
    H = contract.target.hidden_size
    widths = {
        "contract (fc_input x hidden_size)": len(training.fc_input) * H,
        f"{engine} capture": len(res.layers) * H,
    }
    if draft is not None:
        n_aux = get_engine(res.engine).n_aux(draft, span.versions[0])
        hidden = draft.fc_in_hidden or H
        widths[f"{engine} draft fc (n_aux {n_aux} x {hidden})"] = n_aux * hidden
        if draft.target_hidden_size is not None and draft.target_hidden_size != H:
            widths["draft config target_hidden_size x n_aux"] = draft.target_hidden_size * n_aux
        if weights is not None and weights.fc_shape is not None:
            widths[f"fc.weight {list(weights.fc_shape)}"] = weights.fc_shape[-1]
    if len(set(widths.values())) > 1:
        report.add(
            "EC503",
            "the fc input width disagrees",
            "target.hidden_size",
            details="\n".join(f"{v:>8}  {k}" for k, v in widths.items()),
            hint="n_aux x target hidden size must agree everywhere; older SGLang "
            "(< 0.5.12) and vLLM hard-code 3 aux states",
        )


def served_dtype_check(
    report: LayoutReport, contract: Contract, serving: ServingSpec, serving_args: str | None
) -> None:
    training = contract.training
    assert training is not None
    command = serving_args or serving.launch
    served = (served_dtype(command) if command else None) or serving.dtype or contract.target.dtype
    for i in training.fc_input:
        slot = training.slots[i]
        if slot.dtype != served:
            report.add(
                "EC504",
                f"slot {i} ({slot.layer}) is stored as {slot.dtype}, the engine serves {served}",
                f"training.slots[{i}]",
                expected=served,
                found=slot.dtype,
                hint="train on states captured in the serving dtype",
            )


def target_norm(report: LayoutReport, training: TrainingSpec, fmt: str, num_layers: int) -> None:
    if training.target_slot is None or fmt not in FORMATS:
        return
    layer = training.slots[training.target_slot].layer
    wants_post = FORMATS[fmt].target_post_norm
    if wants_post and not layer.is_final_norm:
        report.add(
            "EC505",
            f"the target slot is {layer}, but {fmt} trains on a post-norm target (final_norm)",
            f"training.slots[{training.target_slot}]",
            expected="final_norm",
            found=layer,
            hint="capture the final-norm output as the target",
        )
    elif not wants_post and layer != Layer(num_layers):
        report.add(
            "EC505",
            f"the target slot is {layer}, but {fmt} applies the verifier norm "
            f"itself and expects the pre-norm residual:{num_layers}",
            f"training.slots[{training.target_slot}]",
            expected=f"residual:{num_layers}",
            found=layer,
            hint="a post-norm target gets normed twice in training",
        )


def id_order(
    report: LayoutReport, training: TrainingSpec, ids: tuple[int, ...] | None, engine: str
) -> None:
    if ids is None or list(ids) == sorted(ids):
        return
    fc_layers = [training.slots[i].layer for i in training.fc_input]
    trained_unsorted = [x.index for x in fc_layers] != sorted(x.index for x in fc_layers)
    report.add(
        "EC506",
        f"the aux ids {list(ids)} are not ascending; {engine} concatenates in "
        "ascending layer order",
        "serving",
        severity="error" if trained_unsorted else "warning",
        hint="sort the ids in the draft config and in the capture "
        "script" + ("; the trainer concatenated in list order" if trained_unsorted else ""),
    )
