"""The ``capture`` family: each fc-input slot against what SGLang really feeds the draft,
from capture files (``--captures``) or a live server (``--sglang-url``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..findings import Finding, codes, finding
from .family import CheckFamily

if TYPE_CHECKING:
    from .unit import Resources, Unit


def _run(runner: Resources, unit: Unit) -> list[Finding]:
    from ..capture.compare import verify_against_capture, verify_live

    shard = runner.shard_of(unit)
    url, timeout = runner.settings.sglang_url, runner.settings.timeout
    if url:
        return verify_live(unit.contract, shard, url, timeout)
    index = runner.captures()
    out = [
        finding("EC707", problem, contract=unit.contract, file=unit.label)
        for problem in runner.unreported_capture_problems(index)
    ]
    return out + verify_against_capture(unit.contract, shard, index)


FAMILY = CheckFamily(
    "capture",
    "shard",
    "each fc-input slot against the state the server feeds the draft",
    codes=codes("EC70") + codes("EC71", but=("EC712", "EC713", "EC714", "EC715", "EC716")),
    keys=("training.fc_input", "serving"),
    run=_run,
    needs=frozenset({"training", "capture"}),
)
