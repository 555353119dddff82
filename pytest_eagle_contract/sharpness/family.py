"""The ``sharpness`` family: does the contract catch every class of pipeline bug it can see?

Runs the mutation self-test of :mod:`pytest_eagle_contract.sharpness` once per contract,
and not again while its verdict is kept (:mod:`..sharpness.cache`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..checks.family import CheckFamily

if TYPE_CHECKING:
    from ..checks.unit import Resources, Unit
    from ..contract.model import Contract
    from ..findings import Finding


def _run(runner: Resources, unit: Unit) -> list[Finding]:
    from .cache import cached_verdict

    return cached_verdict(unit.contract, _self_test)


def _self_test(contract: Contract) -> list[Finding]:
    """The self-test, imported only when no verdict is kept (its witnesses and mutations
    are a tenth of the CLI's start-up)."""
    from .selftest import check_sharpness

    return check_sharpness(contract)


FAMILY = CheckFamily(
    "sharpness",
    "contract",
    "every class of pipeline bug the contract can see is caught",
    codes=("EC801", "EC802"),
    keys=("training.slots",),
    run=_run,
)
