"""The layout check: does the trainer's fc input equal what the engine will feed it?

Training side: the contract's slots picked by ``fc_input``. Serving side: the engine's
ids (from the draft config, else ``serving.aux_layer_ids``, else the engine default)
resolved per engine version to canonical layers. Compared position by position.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..findings import Finding, codes, not_run
from ..methods import METHOD_ENGINES
from .family import CheckFamily
from .layout_types import LayoutReport, Span

# The engines' rules and the draft's files are imported by the functions that read them: a
# contract without a serving section never loads them (the CLI's start-up, docs/audit.md).
if TYPE_CHECKING:
    from ..contract.model import Contract, ServingSpec
    from ..engines.draft_config import DraftConfig
    from ..engines.resolve import Resolution
    from .unit import Resources, Unit


def _resolve_spans(
    serving: ServingSpec, arch: str | None, num_layers: int, ids: tuple[int, ...] | None
) -> list[Span]:
    from ..engines.fixes import ANY, runs
    from ..engines.resolve import get_engine, resolve
    from ..errors import Unservable

    versions = [v or ANY for v in get_engine(serving.engine).versions(serving.version)]
    found: dict[str, tuple[Resolution | None, str | None]] = {}
    for version in versions:
        try:
            asked = None if version == ANY else version
            found[version] = (resolve(serving.engine, num_layers, ids, arch, asked), None)
        except Unservable as exc:
            found[version] = (None, str(exc))

    def key(version: str) -> object:
        res, refused = found[version]
        return None if res is None else (res.layers, res.problems, res.source), refused

    return [Span(run, *found[run[0]]) for run in runs(versions, key)]


def _method_engine(
    contract: Contract,
    report: LayoutReport,
    serving_args: str | None,
    serving_env: Mapping[str, str] | None,
    env_label: str,
) -> list[Finding]:
    """The layout check of a contract served by a method engine (``methods.METHOD_ENGINES``:
    onnxruntime-genai, lmdeploy's DFlash, the engines read from source): its taps by that
    engine's rules, as the other engines' are."""
    from ..engines import method_engines

    serving = contract.serving
    assert serving is not None
    if contract.method == "mtp":
        from .layout_mtp import check_mtp

        return check_mtp(contract, report)
    from .layout_dflash import check_dflash

    found = method_engines.resolver_for(contract.method, serving, report)
    if found is None:
        return report.findings
    title = method_engines.TITLES[contract.method]
    return check_dflash(contract, report, serving_args, serving_env, env_label, found, title)


def check_layout(
    contract: Contract,
    serving_args: str | None = None,
    stats_of: Callable[[int], object] | None = None,
    identified: dict[int, Any] | None = None,
    *,
    explain: bool = True,
    serving_env: Mapping[str, str] | None = None,
    env_label: str = "",
) -> list[Finding]:
    """Findings of the training-vs-serving layout check (contract level).

    ``identified`` (slot -> evidence.Identification from a reference capture) replaces the
    declared layers on the training side; the report says which evidence it relied on.
    ``serving_env`` (a ``--serving-env`` listing, named ``env_label``) is searched for the
    benchmark knobs that fake acceptance, as the launch line is.
    ``explain=False`` leaves out EC501's fix search and every-engine table (the self-test
    asks only which codes a mutation raises; the search tries thousands of id lists).
    """
    from ..engines.draft_config import read_draft_config
    from ..engines.fixes import Fixes
    from ..engines.matrix import listing, summary
    from ..engines.matrix import matrix as serving_matrix
    from ..engines.resolve import engine_aux_ids, get_engine
    from ..errors import EagleContractError
    from ..methods import get_method
    from ..models.draft import read_draft_weights
    from .layout_compare import compare
    from .layout_serving import (
        aux_states_off,
        drafter_kind,
        fc_width,
        id_order,
        lint_launch,
        placed_at_ids,
        read_ids,
        served_dtype_check,
        target_norm,
    )

    training, serving = contract.training, contract.serving
    if serving is None:
        return []
    report = LayoutReport(contract)
    if contract.method in METHOD_ENGINES.get(serving.engine, ()):  # engines/method_engines.py
        return _method_engine(contract, report, serving_args, serving_env, env_label)
    if contract.method == "dflash":  # the taps by DFlash's rules (engines/dflash.py)
        from .layout_dflash import check_dflash

        return check_dflash(contract, report, serving_args, serving_env, env_label)
    if contract.method in ("dflash2", "dspark"):  # engines/dflash_family.py's rules
        from ..engines.dflash_family import resolver_for
        from .layout_dflash import check_dflash

        found = resolver_for(contract.method, serving, report)
        if found is None:
            return report.findings
        return check_dflash(
            contract, report, serving_args, serving_env, env_label, found[0], found[1]
        )
    if contract.method == "mtp":  # one state, no tap list (engines/mtp.py)
        from .layout_mtp import check_mtp

        return check_mtp(contract, report)
    if not get_method(contract.method).engines:  # PARD: no target state read
        lint_launch(report, serving, serving_args, serving_env, env_label)
        return report.findings
    target = contract.target
    L, H = target.num_hidden_layers, target.hidden_size
    arch = serving.arch or target.arch
    fmt = training.format if training is not None else "auto"

    draft: DraftConfig | None = None
    if serving.draft_config is not None:
        try:
            draft = read_draft_config(serving.draft_config)
        except EagleContractError as exc:
            report.add("EC510", str(exc), "serving.draft_config")
            return report.findings
    ids = read_ids(report, serving, draft)
    aux_states_off(report, contract, serving, draft, serving_args)
    drafter_kind(report, contract, serving, draft, serving_args, serving_env)
    weights = (
        read_draft_weights(draft.path.parent, target.vocab_size, draft.draft_vocab_size)
        if draft is not None and draft.path.parent.is_dir()
        else None
    )

    spans = _resolve_spans(serving, arch, L, ids)
    if training is None:  # serving side alone: what the engine would do, and the launch line
        for span in spans:
            engine = f"{serving.engine} {span.label}"
            if span.resolution is None:
                report.add("EC510", f"{engine} would not serve this: {span.refused}", "serving")
                continue
            for p in span.resolution.problems:
                report.add(p.code, f"{engine}: {p.message}", "serving")
        lint_launch(report, serving, serving_args, serving_env, env_label)
        return placed_at_ids(report.findings, contract, serving, draft)
    fc_layers = [training.slots[i].layer for i in training.fc_input]
    evidence = "declared in the contract" + (
        ", norm profile of a sampled shard" if stats_of else ""
    )
    if identified:
        fc_layers = [
            identified[i].best.layer if i in identified else layer
            for i, layer in zip(training.fc_input, fc_layers)
        ]
        evidence = (
            "reference capture of the target on a sampled shard ("
            + ", ".join(
                f"slot {i}: {identified[i].best.layer} cos {identified[i].best.cosine:.4f}"
                for i in training.fc_input
                if i in identified
            )
            + ")"
        )
    fixes = Fixes(
        get_engine(serving.engine),
        [v for span in spans for v in span.versions],
        fc_layers,
        L,
        arch,
        serving.version,
        serving.aux_layer_ids is not None,
    )
    every = functools.partial(
        serving_matrix,
        fc_layers,
        L,
        arch,
        lambda e: engine_aux_ids(serving, draft, e.name),
        (serving.engine, [v for span in spans for v in span.versions]),
    )
    rows = functools.cache(every)  # the text and the data read the same rows
    matrix = functools.cache(lambda: summary(rows()) if explain else "")
    listed = functools.cache(lambda: listing(rows()) if explain else [])
    for span in spans:
        versioned = serving.engine == "sglang" or serving.version
        engine = f"{serving.engine} {span.label}" if versioned else serving.engine
        if span.resolution is None:
            report.add(
                "EC510",
                f"{engine} would not serve this: {span.refused}",
                "serving.version" if serving.version else "serving",
                hint="pick an engine version and architecture the engine supports",
            )
            continue
        res = span.resolution
        for p in res.problems:
            report.add(p.code, f"{engine}: {p.message}", "serving")
        fix = functools.partial(fixes.hint, span.versions) if explain else str
        both = (matrix, listed)
        compare(report, training, res, fc_layers, engine, fmt, H, stats_of, evidence, fix, *both)
        fc_width(report, contract, draft, weights, res, engine, span)
    served_dtype_check(report, contract, serving, serving_args)
    target_norm(report, training, fmt, L)
    id_order(report, training, ids, serving.engine)
    if weights is not None and weights.d2t_problem:
        report.add(
            "EC509",
            f"draft vocabulary maps: {weights.d2t_problem}",
            "serving.draft_config",
            hint="regenerate d2t/t2d from the same token frequencies, with the target's vocab_size",
        )
    lint_launch(report, serving, serving_args, serving_env, env_label)
    return placed_at_ids(report.findings, contract, serving, draft)


def _run(runner: Resources, unit: Unit) -> list[Finding]:
    """Layout, with a sampled shard's norms (and identities, given the target's weights)
    behind the hints."""
    stats_of, identified, notes = _evidence(runner, unit)
    settings = runner.settings
    found = check_layout(
        unit.contract,
        settings.serving_args,
        stats_of,
        identified,
        serving_env=dict(settings.serving_env),
        env_label=settings.serving_env_label,
    )
    return [*notes, *found]


Evidence = tuple[Callable[[int], object] | None, dict[int, Any] | None, list[Finding]]


def _evidence(runner: Resources, unit: Unit) -> Evidence:
    """The sampled shard's norms, and each slot's identity from a reference capture (once
    per run: the check and the reports' measure share it), with why a capture did not run."""
    key = ("layout evidence", unit.contract.path, unit.evidence)
    return runner.once(key, lambda: _gather(runner, unit))


def _gather(runner: Resources, unit: Unit) -> Evidence:
    contract = unit.contract
    stats_of = None
    identified = None
    notes: list[Finding] = []
    if unit.evidence is not None:
        shard = runner.shard(contract, unit.evidence, unit.evidence_label)
        if shard.sample is not None:

            def stats_of(i: int) -> object:
                return shard.stats(i) if i < len(shard.slots) else None

            target = runner.target(contract)
            if target is not None and runner.reference(contract):
                from ..models.inputs import unfit
                from .evidence import identify

                slots = [s.array for s in shard.slots]
                sample = shard.sample
                bad = unfit(sample.ids, target, slots=slots, mask=sample.mask)
                if bad is None and sample.input_ids is not None:
                    found = identify([s.tensor for s in shard.slots], sample.input_ids, target)
                    identified = {i.slot: i for i in found}
                else:
                    notes.append(
                        not_run(
                            "layout's reference capture",
                            f"{bad} in {shard.label}; the layout is judged by the declared layers",
                            contract=contract,
                            key="target.model",
                            file=shard.label,
                        )
                    )
    return stats_of, identified, notes


def training_side(runner: Resources, unit: Unit) -> dict[str, Any]:
    """For the reports: the layer at each fc position, proven where the reference capture
    identified its slot (:class:`..reports.layout.TrainingSide`), else declared."""
    training = unit.contract.training
    if training is None:
        return {}
    _, identified, _ = _evidence(runner, unit)
    declared = [str(training.slots[i].layer) for i in training.fc_input]
    found = identified or {}
    return {
        "training_side": {
            "declared": declared,
            "layers": [
                str(found[i].best.layer) if i in found else d
                for i, d in zip(training.fc_input, declared, strict=True)
            ],
            "proven": [i in found for i in training.fc_input],
            "evidence": f"reference capture of the target on {unit.evidence_label}"
            if found
            else "",
        }
    }


FAMILY = CheckFamily(
    "layout",
    "contract",
    "the trainer's fc input against what each engine version feeds it",
    codes=codes("EC5", but=("EC513",)),  # EC513 (no shards) is the files family's
    keys=(
        "training.fc_input",
        "serving",
        "serving.aux_layer_ids",
        "serving.draft_config",
        "serving.launch",
    ),
    run=_run,
    needs=frozenset({"serving"}),
    measure=training_side,
)
