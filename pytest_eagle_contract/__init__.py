"""pytest-eagle-contract: contracts between EAGLE-3 training shards and the serving engine.

The public API is re-exported here lazily, so ``import pytest_eagle_contract`` (which the
pytest plugin's import runs first) loads nothing heavy.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Contract": "contract",
    "load_contract": "contract",
    "ContractError": "errors",
    "EagleContractError": "errors",
    "UsageError": "errors",
    "Finding": "findings",
    "RULES": "findings",
    "Layer": "layers",
    "Sample": "reading",
    "read_sample": "reading",
    "EagleShard": "shard",
    "plan": "planner",
    "run_units": "planner",
    "inspect_shard": "inspection",
    "infer_contract": "infer",
    "resolve": "resolve",
    "Resolution": "resolve",
    "check_layout": "layout",
    "identify": "evidence",
    "TargetModel": "target_model",
}

__all__ = [
    "RULES",
    "Contract",
    "ContractError",
    "EagleContractError",
    "EagleShard",
    "Finding",
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
]

if TYPE_CHECKING:
    from .contract import Contract, load_contract
    from .errors import ContractError, EagleContractError, UsageError
    from .evidence import identify
    from .findings import RULES, Finding
    from .infer import infer_contract
    from .inspection import inspect_shard
    from .layers import Layer
    from .layout import check_layout
    from .planner import plan, run_units
    from .reading import Sample, read_sample
    from .resolve import Resolution, resolve
    from .shard import EagleShard
    from .target_model import TargetModel


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
