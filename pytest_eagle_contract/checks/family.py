"""What a check family is: one object per family, declared in the family's own module.

The planner, the pytest items, the CLI and the rule table in docs/rules.md are all driven
by these objects (see :mod:`.registry`), so both shells behave the same and a new family is
one new module plus one line in the registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ..contract.model import Contract, TrainingSpec
    from ..findings import Finding, RuleCode
    from ..models.target import TargetModel
    from ..shards.reading import Sample
    from ..shards.shard import Shard
    from .unit import Resources, Unit

Scope = Literal["contract", "shard"]
"""``contract``: one unit per contract; ``shard``: one unit per sampled shard."""

Need = Literal[
    "training",
    "serving",
    "target",
    "capture",
    "floor",
    "serving-target",
    "tokenizer",
    "tokenizer-dir",
    "conversations",
    "measure",
]
"""What a family needs to run: a contract section, a target model (``--target-model`` or
``target.model``), serving captures (``--captures`` / ``--sglang-url``), or an acceptance
floor in the contract (the probe), or a running engine to measure acceptance on."""

NEED_HOW: dict[str, str] = {
    "training": "a training section in the contract",
    "serving": "a serving section in the contract",
    "target": "--target-model (or target.model in the contract)",
    "capture": "--captures DIR or --sglang-url URL",
    "floor": "serving.min_accept_length or serving.max_accept_drop in the contract",
    "serving-target": "--serving-target-model (or serving.target_model in the contract)",
    "tokenizer": "a tokenizer section in the contract, or --tokenizer DIR",
    "tokenizer-dir": "--tokenizer DIR (or tokenizer.path in the contract)",
    "conversations": "--conversations FILE (or tokenizer.conversations in the contract)",
    "measure": "a running engine with the draft loaded (measure --llama-server-url, "
    "--sglang-url or --vllm-url; pytest --eagle-measure-*-url)",
}


@dataclass(frozen=True)
class CheckFamily:
    """A family of checks: its name, what it needs and reads, the codes it owns, its run."""

    name: str
    scope: Scope
    summary: str
    codes: tuple[RuleCode, ...]
    keys: tuple[str, ...]  # contract keys it reads; the first locates its items
    run: Callable[[Resources, Unit], list[Finding]] | None = None  # with the run's resources
    on_shard: Callable[[Contract, Shard], list[Finding]] | None = None  # or a shard alone
    # what it measured, for the reports (plain JSON), from what the run already holds
    measure: Callable[[Resources, Unit], dict[str, Any]] | None = None
    needs: frozenset[Need] = frozenset({"training"})
    default: bool = True  # runs when nobody names the checks (and its needs are met)
    selectable: bool = True  # may be named in --checks

    def execute(self, runner: Resources, unit: Unit) -> list[Finding]:
        if self.run is not None:
            return self.run(runner, unit)
        assert self.on_shard is not None
        return self.on_shard(unit.contract, runner.shard_of(unit))


def training_spec(contract: Contract) -> TrainingSpec:
    """The contract's training section; shard families only run when it exists."""
    if contract.training is None:
        raise ValueError(f"{contract.path}: the contract has no 'training' section")
    return contract.training


def shard_input(contract: Contract, shard: Shard) -> tuple[TrainingSpec, Sample]:
    """What a shard family reads: the training section and the shard's sample (the planner
    gives shard families only shards that were read)."""
    spec = training_spec(contract)
    assert shard.sample is not None, shard.error
    return spec, shard.sample


def needed_target(runner: Resources, unit: Unit) -> TargetModel:
    """The target model of a family that needs one (the planner runs it only with one)."""
    target = runner.target(unit.contract)
    assert target is not None
    return target
