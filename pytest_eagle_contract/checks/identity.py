"""The ``target-identity`` family: the serving checkpoint (``--serving-target-model`` or
``serving.target_model``) against the training target (``--target-model`` or
``target.model``), run on the first sampled shard's tokens (fixed tokens when there is
none) and compared at the contract's slot layers (models/identity.py: EC620-EC623)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..findings import Finding, finding
from .family import CheckFamily, needed_target

if TYPE_CHECKING:
    from .unit import Resources, Unit


def check_identity(runner: Resources, unit: Unit) -> list[Finding]:
    from ..errors import EagleContractError
    from ..models.identity import as_ids, check_target_identity

    contract = unit.contract
    training = needed_target(runner, unit).path
    serving = runner.serving_target(contract)
    assert serving is not None  # the planner runs the family only with one
    spec = contract.training
    layers = sorted({str(s.layer) for s in spec.slots}) if spec else None
    tokens = None
    if unit.evidence is not None and spec is not None:
        shard = runner.shard(contract, unit.evidence, unit.evidence_label)
        ids = None if shard.sample is None else shard.sample.ids
        tokens = as_ids(ids) if ids is not None else None
    try:
        found = check_target_identity(training, serving, layers=layers, tokens=tokens or None)
    except EagleContractError as exc:  # a layer or token the models cannot take
        return [
            finding(
                "EC620",
                f"the serving target {serving} could not be compared: {exc}",
                contract=contract,
                key="serving.target_model",
                file=str(serving),
                hint="check target.num_hidden_layers and the shard's ids against both models",
            )
        ]
    line = contract.line_of("serving.target_model") if contract.serving else None
    return [f if f.line is not None else _located(f, str(contract.path), line) for f in found]


def _located(f: Finding, path: str, line: int | None) -> Finding:
    import dataclasses

    return dataclasses.replace(f, contract=path, line=line)


FAMILY = CheckFamily(
    "target-identity",
    "contract",
    "the serving checkpoint's aux layers against the training target's (cosine, error)",
    codes=("EC620", "EC621", "EC622", "EC623"),
    keys=("serving",),
    run=check_identity,
    needs=frozenset({"target", "serving-target"}),
)
