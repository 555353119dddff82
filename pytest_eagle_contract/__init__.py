"""pytest-eagle-contract: contracts between EAGLE-3 training shards and the serving engine.

The public API is re-exported here lazily, so ``import pytest_eagle_contract`` (which the
pytest plugin's import runs first) loads nothing heavy.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .version import __version__ as __version__

_EXPORTS = {
    "Contract": "contract.model",
    "load_contract": "contract.model",
    "ContractError": "errors",
    "ContractViolation": "errors",
    "Guard": "guard.core",
    "GuardedLoader": "guard.trainers",
    "specforge_collator": "guard.trainers",
    "EagleContractError": "errors",
    "UsageError": "errors",
    "Finding": "findings",
    "RULES": "findings",
    "Layer": "layers",
    "Sample": "shards.reading",
    "read_sample": "shards.reading",
    "EagleShard": "shards.shard",
    "plan": "plan.planner",
    "run_units": "plan.planner",
    "inspect_shard": "shards.inspection",
    "infer_contract": "authoring.infer",
    "resolve": "engines.resolve",
    "Resolution": "engines.resolve",
    "check_layout": "checks.layout",
    "identify": "checks.evidence",
    "TargetModel": "models.target",
}

__all__ = [
    "RULES",
    "Contract",
    "ContractError",
    "ContractViolation",
    "EagleContractError",
    "EagleShard",
    "Finding",
    "Guard",
    "GuardedLoader",
    "Layer",
    "Resolution",
    "Sample",
    "TargetModel",
    "UsageError",
    "check_layout",
    "identify",
    "infer_contract",
    "inspect_shard",
    "load_contract",
    "plan",
    "read_sample",
    "resolve",
    "run_units",
    "specforge_collator",
]

if TYPE_CHECKING:
    from .authoring.infer import infer_contract
    from .checks.evidence import identify
    from .checks.layout import check_layout
    from .contract.model import Contract, load_contract
    from .engines.resolve import Resolution, resolve
    from .errors import ContractError, ContractViolation, EagleContractError, UsageError
    from .findings import RULES, Finding
    from .guard.core import Guard
    from .guard.trainers import GuardedLoader, specforge_collator
    from .layers import Layer
    from .models.target import TargetModel
    from .plan.planner import plan, run_units
    from .shards.inspection import inspect_shard
    from .shards.reading import Sample, read_sample
    from .shards.shard import EagleShard


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
