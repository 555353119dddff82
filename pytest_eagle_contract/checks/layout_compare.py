"""Position by position: the trainer's fc input against what one engine version feeds it,
with the side-by-side table and the likely cause."""

from __future__ import annotations

from collections.abc import Callable

from ..contract.model import TrainingSpec
from ..engines.resolve import Resolution
from ..layers import Layer
from .layout_types import LayoutReport
from .norms import embedding_like


def compare(
    report: LayoutReport,
    training: TrainingSpec,
    res: Resolution,
    fc_layers: list[Layer],
    engine: str,
    fmt: str,
    hidden: int,
    stats_of: Callable[[int], object] | None,
    evidence: str,
    fix: Callable[[], str],
    matrix: Callable[[], str],
    listed: Callable[[], list[dict[str, object]]] = list,
) -> None:
    """EC502 or EC501 when the two sides differ; ``fix`` gives EC501's hint, ``matrix`` the
    every-engine table appended to its details, ``listed`` its rows as data (EC501's
    ``extra["matrix"]``: the terminal's short view picks the rows that differ from it)."""
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
        details=table + f"\nserving source: {res.source}" + causes + "\n" + matrix(),
        hint=fix(),
        extra={"matrix": listed()} if listed() else None,
    )


def _evidence_hint(
    index: int, training: TrainingSpec, hidden: int, stats_of: Callable[[int], object] | None
) -> str:
    declared = training.slots[index].layer
    if stats_of is not None:
        from ..shards.stats import NormStats

        measured = [stats_of(i) for i in range(len(training.slots))]
        stats = measured[index]
        if isinstance(stats, NormStats):
            others = [s for i, s in enumerate(measured) if i != index and isinstance(s, NormStats)]
            looks = embedding_like(index, stats, hidden, others)
            if looks:
                return f"{looks} (small and flat)"
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
