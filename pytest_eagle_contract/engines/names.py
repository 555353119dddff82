"""The engines' and trainers' names as users write them, in ``resolve.ENGINES``'s order: the
CLI's ``--engine`` choices without loading a single engine's rules (a command that resolves
nothing, such as ``check`` of a contract without a serving section, never imports them).
``tests/release/test_resolve.py`` holds this tuple equal to ``resolve.ENGINES``."""

from __future__ import annotations

from ..methods import EAGLE3_ENGINES

ENGINE_NAMES: tuple[str, ...] = (
    *EAGLE3_ENGINES,  # the serving engines (every one serves EAGLE-3), then the trainers
    "specforge",
    "speculators-v1",
    "speculators",
    "eagle",
    "hf",
)
