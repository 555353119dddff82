"""The layout side by side, per engine version: the trainer's fc input (each layer proven
by a reference capture where one identified its slot, else as declared) beside what each
range of engine versions feeds the draft's fc. Every view (the HTML table, the step
summary, the JSON report) is made from :func:`layout_spans`, so they agree with EC501."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..contract.model import Contract
    from ..engines.dflash_draft import DFlashDraft
    from .run import CheckRun


@dataclass(frozen=True)
class TrainingSide:
    """The draft's fc input per position: the layer (proven, or as declared), the declared
    layer, whether a reference capture proved it, and which capture."""

    layers: list[str]
    declared: list[str]
    proven: list[bool]
    evidence: str = ""

    @classmethod
    def declared_in(cls, contract: Contract) -> TrainingSide | None:
        training = contract.training
        if training is None:
            return None
        fc = [str(training.slots[i].layer) for i in training.fc_input]
        return cls(fc, fc, [False] * len(fc))

    @classmethod
    def of(cls, run: CheckRun) -> TrainingSide | None:
        """What the run's layout family measured, else the contract's declared layers."""
        for unit in run.units:
            side = unit.measured.get("training_side") if unit.check == "layout" else None
            if isinstance(side, dict) and len(side.get("layers", ())) == len(
                side.get("declared", ())
            ):
                return cls(
                    [str(x) for x in side["layers"]],
                    [str(x) for x in side["declared"]],
                    [bool(x) for x in side.get("proven", [])],
                    str(side.get("evidence", "")),
                )
        return cls.declared_in(run.contract)

    def label(self, pos: int) -> str:
        """``embed (proven; declared residual:2)``, ``residual:4 (proven)``,
        ``residual:5 (declared, unproven)``."""
        layer, declared = self.layers[pos], self.declared[pos]
        if pos >= len(self.proven) or not self.proven[pos]:
            return f"{layer} (declared, unproven)"
        if layer == declared:
            return f"{layer} (proven)"
        return f"{layer} (proven; declared {declared})"


@dataclass(frozen=True)
class LayoutSpan:
    engine: str
    versions: list[str]
    training: list[str]  # proven where a reference capture identified the slot, else declared
    serving: list[str]
    refused: str = ""
    side: TrainingSide | None = field(default=None, compare=False)

    @property
    def label(self) -> str:
        first, last = self.versions[0], self.versions[-1]
        span = first if first == last else f"{first}..{last}"
        return self.engine if span == "any" else f"{self.engine} {span}"

    @property
    def same(self) -> bool:
        return not self.refused and self.training == self.serving

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(fc pos, training (marked proven or declared), serving, ok|DIFFERS) per position."""
        out = []
        for pos in range(max(len(self.training), len(self.serving))):
            left = self.training[pos] if pos < len(self.training) else "-"
            right = self.serving[pos] if pos < len(self.serving) else "-"
            shown = self.side.label(pos) if self.side and pos < len(self.training) else left
            out.append((str(pos), shown, right, "ok" if left == right else "DIFFERS"))
        return out

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "engine": self.engine,
            "versions": self.versions,
            "training": self.training,
            "serving": self.serving,
            "same": self.same,
        }
        if self.side is not None:
            data["declared"] = self.side.declared
            data["proven"] = self.side.proven
            if self.side.evidence:
                data["evidence"] = self.side.evidence
        if self.refused:
            data["refused"] = self.refused
        return data


def layout_spans(contract: Contract, side: TrainingSide | None = None) -> list[LayoutSpan]:
    """One span per run of engine versions that resolve alike; [] without both sides or
    when the draft config cannot be read (the layout check reports that). ``side``: the
    training side as the run proved it (:meth:`TrainingSide.of`), else as declared."""
    from ..engines.resolve import engine_aux_ids, get_engine, resolve
    from ..errors import EagleContractError, Unservable

    training, serving = contract.training, contract.serving
    if training is None or serving is None:
        return []
    side = side or TrainingSide.declared_in(contract)
    assert side is not None
    fc = side.layers
    try:
        ids = engine_aux_ids(serving) if contract.method != "dflash" else None
        versions = [v or "any" for v in get_engine(serving.engine).versions(serving.version)]
        draft = _dflash_draft(contract)
    except EagleContractError:
        return []
    arch = serving.arch or contract.target.arch
    spans: list[LayoutSpan] = []
    for version in versions:
        try:
            asked = None if version == "any" else version
            L = contract.target.num_hidden_layers
            if draft is not None:
                from ..engines.dflash import resolve_dflash

                res = resolve_dflash(serving.engine, L, draft, arch, asked)
            else:
                res = resolve(serving.engine, L, ids, arch, asked)
            served, refused = [str(x) for x in res.layers], ""
        except Unservable as exc:
            served, refused = [], str(exc)
        last = spans[-1] if spans else None
        if last is not None and (last.serving, last.refused) == (served, refused):
            last.versions.append(version)
        else:
            spans.append(LayoutSpan(serving.engine, [version], fc, served, refused, side))
    return spans


def _dflash_draft(contract: Contract) -> DFlashDraft | None:
    """A DFlash contract's draft taps (its draft config, else its aux_layer_ids as taps);
    None for another method. Raises EagleContractError."""
    serving = contract.serving
    if contract.method != "dflash" or serving is None:
        return None
    from ..engines.dflash import read_dflash_draft
    from ..engines.dflash_draft import TAP_KEYS, DFlashDraft

    if serving.draft_config is not None:
        return read_dflash_draft(serving.draft_config)
    ids = serving.aux_layer_ids
    return DFlashDraft(None, {TAP_KEYS[0]: ids} if ids else {})
