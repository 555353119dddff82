"""The serving side of the layout check: the ids the engine reads, the fc width, the served
dtype, the target slot's norm, id order and the launch line."""

from __future__ import annotations

from collections.abc import Mapping

from ..contract.model import Contract, ServingSpec, TrainingSpec
from ..engines.draft_config import DraftConfig
from ..engines.resolve import Resolution, engine_aux_ids, get_engine
from ..engines.sglang_launch import lint_sglang, served_dtype
from ..findings import Finding, RuleCode
from ..layers import Layer
from ..models.draft import DraftWeights
from ..shards.formats import FORMATS
from .layout_types import LayoutReport, Span


def lint_launch(
    report: LayoutReport,
    serving: ServingSpec,
    serving_args: str | None,
    serving_env: Mapping[str, str] | None = None,
    env_label: str = "",
) -> None:
    """SGLang's silently changed settings (EC512), and for every engine the benchmark knobs
    that fake acceptance (EC517-EC520) in the launch line and the serving environment."""
    from ..engines.knobs import launch_knobs

    command = serving_args or serving.launch
    method = report.contract.method
    problems = lint_sglang(command, method) if command and serving.engine == "sglang" else []
    problems += launch_knobs(command or "", serving_env, env_label, serving.engine)
    for problem in problems:
        report.add(
            problem.code,
            problem.message,
            "serving.launch",
            hint=problem.hint,
            severity=problem.severity,
        )


AUX_FLAG_SINCE = (0, 5, 9)
"""The first SGLang release read that honours ``eagle_config.use_aux_hidden_state``: 0.5.9's
``model_executor/model_runner.py`` and ``speculative/eagle_worker.py`` read it (default
true), as 0.5.14's and 0.5.23's (``model_runner_components/spec_aux_hidden_state.py``) do;
0.5.6 reads no such key and captures the aux states under EAGLE3 whatever the draft says."""


VLLM_AUX_FLAG_SINCE = (0, 12, 0)
"""vLLM's ``llama_eagle3.py`` reads ``eagle_config.use_aux_hidden_state`` in the release
wheels 0.12.0, 0.13.0, 0.15.0, 0.20.0, 0.26.0 and 0.33.0; 0.11.0's reads no such key."""


def aux_states_off(
    report: LayoutReport,
    contract: Contract,
    serving: ServingSpec,
    draft: DraftConfig | None,
    serving_args: str | None,
) -> None:
    """EC521: the draft's ``eagle_config.use_aux_hidden_state: false`` makes the engine run
    the EAGLE-3 draft on the last hidden state alone, with no error, where the draft was
    trained on aux states (more than one fc input)."""
    if draft is None or draft.use_aux_hidden_state is not False:
        return
    training = contract.training
    if training is not None and len(training.fc_input) <= 1:
        return  # trained on one state: the flag says what was trained
    command = serving_args or serving.launch or ""
    if serving.engine == "sglang":
        from ..engines.sglang_launch import parse_flags
        from ..engines.sglang_table import parse_version

        versions = [v for v in get_engine("sglang").versions(serving.version) if v]
        if versions and all(parse_version(v) < AUX_FLAG_SINCE for v in versions):
            return
        try:
            algorithm = parse_flags(command).get("speculative-algorithm", "").upper()
        except ValueError:
            algorithm = ""
        if algorithm and algorithm != "EAGLE3":
            return  # EAGLE captures no aux states anyway (EC512)
        reader = (
            "SGLang (0.5.9 on: model_runner.py; 0.5.23: "
            "model_runner_components/spec_aux_hidden_state.py)"
        )
    elif serving.engine == "vllm":
        from ..engines.sglang_table import parse_version

        given = serving.version
        if given and given[0].isdigit() and parse_version(given) < VLLM_AUX_FLAG_SINCE:
            return
        reader = "vLLM (0.12.0 on: model_executor/models/llama_eagle3.py builds no fc)"
    else:
        return
    trained = f"{len(training.fc_input)} aux states" if training is not None else "aux states"
    report.add(
        "EC521",
        f"{draft.path}: eagle_config.use_aux_hidden_state is false: {reader} then feeds the "
        f"EAGLE-3 draft the last hidden state alone, with no error, where it was trained on "
        f"{trained}",
        "serving.draft_config",
        expected="use_aux_hidden_state true (or absent)",
        found="use_aux_hidden_state false",
        hint="remove use_aux_hidden_state: false from the draft's eagle_config (ATOM and "
        "tpu-inference#2841 ran such drafts without their aux states)",
    )


def drafter_kind(
    report: LayoutReport,
    contract: Contract,
    serving: ServingSpec,
    draft: DraftConfig | None,
    serving_args: str | None,
    serving_env: Mapping[str, str] | None = None,
) -> None:
    """EC523: mlx-vlm runs the EAGLE-3 draft as another drafter kind (no ``--draft-kind``
    and a config type it does not know: ``dflash``; a ``--draft-kind eagle3`` overridden by
    the type's own kind); EC524: it then drops the drafter and decodes token by token. Read
    from the launch line (``mlx_vlm.server`` / ``mlx_vlm.generate`` with ``--draft-model``)
    per mlx-vlm release (engines/mlx_drafters.py)."""
    from ..engines import mlx_drafters
    from ..engines.draft_config import read_draft_json
    from ..engines.knobs import launch_env
    from ..errors import EagleContractError

    if serving.engine != "mlx" or draft is None or contract.method not in ("eagle3", "eagle3.1"):
        return
    command = serving_args or serving.launch or ""
    env = {**launch_env(command), **(serving_env or {})}
    runs, asked = mlx_drafters.launched(command, env)
    if not runs:
        return
    try:
        config = read_draft_json(draft.path)
    except EagleContractError:
        return  # the draft config's own check reports it
    known = mlx_drafters.releases()
    versions = [v for v in get_engine("mlx").versions(serving.version) if v in known or v is None]
    results = [
        mlx_drafters.served(v or known[-1], config, asked, contract.target.hidden_size)
        for v in versions
    ]
    said = f"--draft-kind {asked}" if asked else "no --draft-kind"
    code: RuleCode
    for code, bad in (
        ("EC523", [r for r in results if r.kind != "eagle3"]),
        ("EC524", [r for r in results if r.dropped]),
    ):
        if not bad:
            continue
        first = bad[0]
        span = first.version if len(bad) == 1 else f"{bad[0].version} to {bad[-1].version}"
        mt = f"model_type {first.model_type!r}" if first.model_type else "no model_type"
        if code == "EC524":
            message = (
                f"mlx-vlm {span} refuses the drafter ({first.dropped}) and, with no error, "
                "falls back to autoregressive generation: nothing is drafted, the accept "
                "length is 1.0"
            )
            hint = (
                "serve a drafter made for this target (its hidden size is the target's), "
                "as an EAGLE-3 draft whose config says model_type eagle3"
            )
            expected, found = "the drafter kept", "decoding without the drafter"
        else:
            if asked is None and first.required is None:
                why = f"the draft config's {mt} names no kind, so it runs as the default"
                hint = (
                    'write the draft config as mlx-vlm\'s EAGLE-3 drafter reads it ("model_type": '
                    '"eagle3", or speculators\' "speculators_model_type": "eagle3"): mlx-vlm '
                    "loads that drafter and picks its kind by it; then pass --draft-kind eagle3"
                )
            elif asked is not None and first.required not in (None, asked):
                why = f"its {mt} requires {first.required!r}, which overrides {said}"
                hint = (
                    "point --draft-model at the EAGLE-3 draft (model_type eagle3): this folder "
                    f"holds a {first.required} drafter"
                )
            else:
                why = f"the launch asks for it ({said})"
                hint = "pass --draft-kind eagle3 (or leave it out for a model_type eagle3 draft)"
            message = (
                f"mlx-vlm {span} runs the draft {draft.path.parent.name or draft.path!s} as a "
                f"{first.kind!r} drafter, not EAGLE-3: {why} (logged, no error)"
            )
            expected, found = "drafter kind eagle3", f"drafter kind {first.kind}"
        report.add(
            code,
            message,
            "serving.launch" if serving.launch and not serving_args else "serving.draft_config",
            expected=expected,
            found=found,
            hint=hint,
        )


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
