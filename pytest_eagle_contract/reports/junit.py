"""JUnit properties of a contract item, for dashboards to group by (``record_property``
style: pytest writes ``item.user_properties`` into the JUnit XML, also under xdist)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..contract.model import Contract
    from ..findings import Finding


_BY_CONTRACT: dict[Path, tuple[tuple[str, str], ...]] = {}  # worked out once per contract


def _contract_properties(contract: Contract) -> tuple[tuple[str, str], ...]:
    if contract.path in _BY_CONTRACT:
        return _BY_CONTRACT[contract.path]
    from .layout import layout_spans
    from .run import content_sha256

    props = [
        ("eagle_contract", contract.name),
        ("eagle_contract_sha256", content_sha256(contract.path)),
    ]
    if contract.serving is not None:
        props += [
            ("eagle_engine", contract.serving.engine),
            ("eagle_engine_version", contract.serving.version or "any"),
        ]
    if contract.training is not None:
        fc = [str(contract.training.slots[i].layer) for i in contract.training.fc_input]
        props.append(("eagle_fc_layers", ",".join(fc)))
    for span in layout_spans(contract):
        served = ",".join(span.serving) if not span.refused else "refused"
        props.append((f"eagle_served_layers[{span.label}]", served))
    _BY_CONTRACT[contract.path] = tuple(props)
    return _BY_CONTRACT[contract.path]


def properties(
    contract: Contract, findings: Sequence[Finding], measured: Sequence[dict[str, Any]] = ()
) -> list[tuple[str, str]]:
    """Contract name and content sha256, engine and version, the fc layers declared and
    served per engine version, on the layout item the fc layers a reference capture proved
    (``eagle_fc_layers_proven``, ``?`` where it proved none), the rule codes found, the
    estimated acceptance lengths where the findings carry them (:func:`.run.accept_lengths`)."""
    from .run import accept_lengths

    props = list(_contract_properties(contract))
    for m in measured:
        side = m.get("training_side")
        if isinstance(side, dict) and any(side.get("proven", ())):
            shown = [
                str(layer) if proven else "?"
                for layer, proven in zip(side["layers"], side["proven"], strict=False)
            ]
            props.append(("eagle_fc_layers_proven", ",".join(shown)))
    props.append(("eagle_rules", ",".join(sorted({f.code for f in findings}))))
    props += [
        (f"eagle_acceptance_length[{name}]", f"{value:.3f}")
        for name, value in accept_lengths(findings).items()
    ]
    return props
