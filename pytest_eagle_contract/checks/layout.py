"""The layout check: does the trainer's fc input equal what the engine will feed it?

Training side: the contract's slots picked by ``fc_input``. Serving side: the engine's
ids (from the draft config, else ``serving.aux_layer_ids``, else the engine default)
resolved per engine version to canonical layers. Compared position by position.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..contract.model import Contract, ServingSpec, TrainingSpec
from ..engines.fixes import ANY, Fixes, runs, span_label
from ..engines.resolve import Resolution, get_engine, resolve, serving_ids
from ..engines.sglang_launch import lint_sglang, served_dtype
from ..errors import EagleContractError, Unservable
from ..findings import Finding, RuleCode, Severity, finding
from ..layers import Layer
from ..models.draft import DraftConfig, DraftWeights, read_draft_config, read_draft_weights
from ..shards.formats import FORMATS
from ..stats import guess
from .family import CheckFamily

if TYPE_CHECKING:
    from ..planner import Runner, Unit


@dataclass(frozen=True)
class Span:
    """Consecutive engine versions that resolve alike."""

    versions: list[str]
    resolution: Resolution | None
    refused: str | None

    @property
    def label(self) -> str:
        return span_label(self.versions)


def _resolve_spans(
    serving: ServingSpec, arch: str | None, num_layers: int, ids: tuple[int, ...] | None
) -> list[Span]:
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


class _Report:
    def __init__(self, contract: Contract) -> None:
        self.contract = contract
        self.findings: list[Finding] = []

    def add(
        self,
        code: RuleCode,
        message: str,
        key: str,
        *,
        expected: object = "",
        found: object = "",
        hint: str = "",
        details: str = "",
        severity: Severity = "error",
    ) -> None:
        self.findings.append(
            finding(
                code,
                message,
                contract=self.contract,
                key=key,
                expected=expected,
                found=found,
                hint=hint,
                details=details,
                severity=severity,
            )
        )


def _evidence_hint(
    index: int, training: TrainingSpec, hidden: int, stats_of: Callable[[int], object] | None
) -> str:
    declared = training.slots[index].layer
    if stats_of is not None:
        from ..stats import NormStats

        measured = [stats_of(i) for i in range(len(training.slots))]
        stats = measured[index]
        if isinstance(stats, NormStats):
            others = [s for i, s in enumerate(measured) if i != index and isinstance(s, NormStats)]
            words = guess(stats, hidden, others)
            if words == "embedding-like":
                return (
                    f"slot {index} looks like the embedding: median norm "
                    f"{stats.median:.3g} (small and flat)"
                )
    if declared.is_embed:
        return f"slot {index} is declared as the embedding"
    return ""


def _table(
    training: TrainingSpec, res: Resolution, fmt: str, engine: str, fc_layers: list[Layer]
) -> str:
    fc = [training.slots[i] for i in training.fc_input]
    rows = [
        (
            "fc pos",
            f"training ({fmt})",
            f"serving ({engine}{', ' + res.arch if res.arch else ''})",
            "",
        )
    ]
    for pos in range(max(len(fc), len(res.positions))):
        left = "-"
        if pos < len(fc):
            left = f"slot {fc[pos].index} = {fc_layers[pos]}"
            if fc_layers[pos] != fc[pos].layer:
                left += f" (declared {fc[pos].layer})"
        if pos < len(res.positions):
            p = res.positions[pos]
            id_text = "default" if p.id is None else f"id {p.id}"
            right = f"{id_text} -> capture {p.capture} = {p.layer}"
        else:
            right = "-"
        same = pos < len(fc) and pos < len(res.positions) and fc_layers[pos] == res.layers[pos]
        rows.append((str(pos), left, right, "ok" if same else "DIFFERS"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(
        f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip()
        for r in rows
    )


def check_layout(
    contract: Contract,
    serving_args: str | None = None,
    stats_of: Callable[[int], object] | None = None,
    identified: dict[int, Any] | None = None,
) -> list[Finding]:
    """Findings of the training-vs-serving layout check (contract level).

    ``identified`` (slot -> evidence.Identification from a reference capture) replaces the
    declared layers on the training side; the report says which evidence it relied on.
    """
    training, serving = contract.training, contract.serving
    if serving is None:
        return []
    report = _Report(contract)
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
    ids = _serving_ids(report, serving, draft)
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
        _lint_launch(report, serving, serving_args)
        return report.findings
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
    for span in spans:
        engine = f"{serving.engine} {span.label}" if serving.engine == "sglang" else serving.engine
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
        fix = functools.partial(fixes.hint, span.versions)
        _compare(report, training, res, fc_layers, engine, fmt, H, stats_of, evidence, fix)
        _fc_width(report, contract, draft, weights, res, engine, span)
    _dtype(report, contract, serving, serving_args)
    _target_norm(report, training, fmt, L)
    _unsorted(report, training, ids, serving.engine)
    if weights is not None and weights.d2t_problem:
        report.add(
            "EC509",
            f"draft vocabulary maps: {weights.d2t_problem}",
            "serving.draft_config",
            hint="regenerate d2t/t2d from the same token frequencies, with the target's vocab_size",
        )
    _lint_launch(report, serving, serving_args)
    return report.findings


def _lint_launch(report: _Report, serving: ServingSpec, serving_args: str | None) -> None:
    command = serving_args or serving.launch
    if command and serving.engine == "sglang":
        for problem in lint_sglang(command):
            report.add(problem.code, problem.message, "serving.launch", hint=problem.hint)


def _serving_ids(
    report: _Report, serving: ServingSpec, draft: DraftConfig | None
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
    engine, engine_ids = get_engine(serving.engine), serving_ids(serving, draft)
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


def _compare(
    report: _Report,
    training: TrainingSpec,
    res: Resolution,
    fc_layers: list[Layer],
    engine: str,
    fmt: str,
    hidden: int,
    stats_of: Callable[[int], object] | None,
    evidence: str,
    fix: Callable[[], str],
) -> None:
    table = _table(training, res, fmt, engine, fc_layers) + f"\ntraining side: {evidence}"
    if len(fc_layers) != len(res.layers):
        report.add(
            "EC502",
            f"the trainer feeds the fc {len(fc_layers)} states, {engine} "
            f"feeds it {len(res.layers)}",
            "training.fc_input",
            expected=len(res.layers),
            found=len(fc_layers),
            details=table,
            hint=f"{res.source}",
        )
        return
    wrong = [i for i, (a, b) in enumerate(zip(fc_layers, res.layers)) if a != b]
    if not wrong:
        return
    hints = [
        h
        for h in (_evidence_hint(training.fc_input[i], training, hidden, stats_of) for i in wrong)
        if h
    ]
    hints += _pattern_hints(fc_layers, list(res.layers))
    causes = "".join(f"\nlikely cause: {h}" for h in hints)
    report.add(
        "EC501",
        f"the draft's fc is trained on {', '.join(map(str, fc_layers))} but "
        f"{engine} feeds it {', '.join(map(str, res.layers))}",
        "training.fc_input",
        expected=", ".join(map(str, res.layers)),
        found=", ".join(map(str, fc_layers)),
        details=table + f"\nserving source: {res.source}" + causes,
        hint=fix(),
    )


def _pattern_hints(trained: list[Layer], served: list[Layer]) -> list[str]:
    """Name the classic patterns: same layers reordered, embedding in front, a small shift."""
    out = []
    if sorted(trained) == sorted(served):
        return ["the same layers in another order: the engine concatenates ascending"]
    if trained and trained[0].is_embed and not served[0].is_embed:
        out.append("the trainer puts the embedding in front of the fc input")
    residual = [x.index for x in trained if x.index > 0]
    targets = [x.index for x in served if x.index > 0]
    if residual and targets:
        offsets = {min((s - t for s in targets), key=abs) for t in residual}
        if len(offsets) == 1 and (delta := offsets.pop()) != 0 and abs(delta) <= 2:
            pairs = ", ".join(f"residual:{t} vs residual:{t + delta}" for t in residual)
            out.append(
                f"the trainer's layers sit {abs(delta)} {'above' if delta < 0 else 'below'}"
                f" the engine's ({pairs}): 'output of layer k' vs 'input to layer k', or "
                "a +1 rule that changed between engine versions"
            )
    return out


def _fc_width(
    report: _Report,
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


def _dtype(
    report: _Report, contract: Contract, serving: ServingSpec, serving_args: str | None
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


def _target_norm(report: _Report, training: TrainingSpec, fmt: str, num_layers: int) -> None:
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


def _unsorted(
    report: _Report, training: TrainingSpec, ids: tuple[int, ...] | None, engine: str
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


def _run(runner: Runner, unit: Unit) -> list[Finding]:
    """Layout, with a sampled shard's norms (and identities, given the target's weights)
    behind the hints."""
    contract = unit.contract
    stats_of = None
    identified = None
    if unit.evidence is not None:
        shard = runner.shard(contract, unit.evidence, unit.evidence_label)
        if shard.sample is not None:

            def stats_of(i: int) -> object:
                return shard.stats(i) if i < len(shard.slots) else None

            target = runner.target(contract)
            ids = shard.sample.input_ids
            from .evidence import identify, length_problem

            if (
                target is not None
                and runner.reference(contract)
                and ids is not None
                and not length_problem(shard.slots, ids)
            ):
                found = identify([s.tensor for s in shard.slots], ids, target)
                identified = {i.slot: i for i in found}
    return check_layout(contract, runner.serving_args, stats_of, identified)


FAMILY = CheckFamily(
    "layout",
    "contract",
    "the trainer's fc input against what each engine version feeds it",
    codes=(
        "EC501",
        "EC502",
        "EC503",
        "EC504",
        "EC505",
        "EC506",
        "EC507",
        "EC508",
        "EC509",
        "EC510",
        "EC511",
        "EC512",
        "EC514",
        "EC515",
    ),
    keys=(
        "training.fc_input",
        "serving",
        "serving.aux_layer_ids",
        "serving.draft_config",
        "serving.launch",
    ),
    run=_run,
    needs=frozenset({"serving"}),
)
