"""What the layout check's modules share: a run of engine versions that resolve alike
(:class:`Span`) and the findings placed at contract keys (:class:`LayoutReport`).

The imports run one way: ``layout`` (the family) uses ``layout_serving`` and
``layout_compare``; all three use this module, which uses none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Unpack

from ..findings import Finding, Parts, RuleCode, finding

if TYPE_CHECKING:
    from ..contract.model import Contract
    from ..engines.resolve import Resolution


@dataclass(frozen=True)
class Span:
    """Consecutive engine versions that resolve alike."""

    versions: list[str]
    resolution: Resolution | None
    refused: str | None

    @property
    def label(self) -> str:
        # The engines' rules load with a serving section only (docs/audit.md, "The read path").
        from ..engines.fixes import span_label

        return span_label(self.versions)


class LayoutReport:
    """The layout check's findings, each placed at a contract key."""

    def __init__(self, contract: Contract) -> None:
        self.contract = contract
        self.findings: list[Finding] = []

    def add(
        self, code: RuleCode, message: str, key: str, hint: str = "", **parts: Unpack[Parts]
    ) -> None:
        """One finding at contract ``key``; ``parts`` as :func:`finding` takes them."""
        self.findings.append(
            finding(code, message, contract=self.contract, key=key, hint=hint, **parts)
        )
