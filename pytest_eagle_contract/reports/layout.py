"""The layout side by side, per engine version: the trainer's fc input (as declared) beside
what each range of engine versions feeds the draft's fc."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..contract.model import Contract


@dataclass(frozen=True)
class LayoutSpan:
    engine: str
    versions: list[str]
    training: list[str]
    serving: list[str]
    refused: str = ""

    @property
    def label(self) -> str:
        first, last = self.versions[0], self.versions[-1]
        span = first if first == last else f"{first}..{last}"
        return self.engine if span == "any" else f"{self.engine} {span}"

    @property
    def same(self) -> bool:
        return not self.refused and self.training == self.serving

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(fc pos, training, serving, ok|DIFFERS) per position."""
        out = []
        for pos in range(max(len(self.training), len(self.serving))):
            left = self.training[pos] if pos < len(self.training) else "-"
            right = self.serving[pos] if pos < len(self.serving) else "-"
            out.append((str(pos), left, right, "ok" if left == right else "DIFFERS"))
        return out

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "engine": self.engine,
            "versions": self.versions,
            "training": self.training,
            "serving": self.serving,
            "same": self.same,
        }
        if self.refused:
            data["refused"] = self.refused
        return data


def layout_spans(contract: Contract) -> list[LayoutSpan]:
    """One span per run of engine versions that resolve alike; [] without both sides or
    when the draft config cannot be read (the layout check reports that)."""
    from ..engines.resolve import engine_aux_ids, get_engine, resolve
    from ..errors import EagleContractError, Unservable

    training, serving = contract.training, contract.serving
    if training is None or serving is None:
        return []
    fc = [str(training.slots[i].layer) for i in training.fc_input]
    try:
        ids = engine_aux_ids(serving)
        versions = [v or "any" for v in get_engine(serving.engine).versions(serving.version)]
    except EagleContractError:
        return []
    arch = serving.arch or contract.target.arch
    spans: list[LayoutSpan] = []
    for version in versions:
        try:
            res = resolve(
                serving.engine,
                contract.target.num_hidden_layers,
                ids,
                arch,
                None if version == "any" else version,
            )
            served, refused = [str(x) for x in res.layers], ""
        except Unservable as exc:
            served, refused = [], str(exc)
        last = spans[-1] if spans else None
        if last is not None and (last.serving, last.refused) == (served, refused):
            last.versions.append(version)
        else:
            spans.append(LayoutSpan(serving.engine, [version], fc, served, refused))
    return spans
