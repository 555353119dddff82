"""The ``shards`` family: the shard files themselves (found, readable, safe).

The planner adds its one unit when the contract's shard location holds no shard; a shard
that cannot be read fails each of its units with EC001-EC003 (see ``Runner.run``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..findings import finding
from .family import CheckFamily

if TYPE_CHECKING:
    from ..findings import Finding
    from .unit import Resources, Unit


def _run(runner: Resources, unit: Unit) -> list[Finding]:
    return [
        finding(
            "EC513",
            unit.problem,
            contract=unit.contract,
            key="training.shards",
            hint="fix training.shards, or pass the shard location "
            "(eagle-contract check CONTRACT PATH, pytest --eagle-shards)",
        )
    ]


FAMILY = CheckFamily(
    "shards",
    "contract",
    "the shard files: found, readable, nothing unsafe",
    codes=("EC001", "EC002", "EC003", "EC009", "EC513"),
    keys=("training.shards",),
    run=_run,
    default=False,
    selectable=False,
)
