"""The training-loop guard (docs/online.md): :class:`Guard` holds a contract to the batches
a trainer takes; :mod:`.trainers` puts it into SpecForge and speculators."""

from __future__ import annotations

from ..errors import ContractViolation
from .core import Guard
from .trainers import GuardedCollate, GuardedLoader, specforge_collator

__all__ = ["ContractViolation", "Guard", "GuardedCollate", "GuardedLoader", "specforge_collator"]
