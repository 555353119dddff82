"""The suite's folders: one per kind of test, the kind being its marker (``-m cli``).

A test module lives in the folder of its kind; the shared helpers (``shardgen``,
``sglang_standin``, ``conftest``...) stay in ``tests/``. Every folder is on ``sys.path``
(pyproject's ``pythonpath`` for pytest; :func:`folders` for a benchmark that reuses a test's
cases), so a module is imported by its bare name from any folder: names stay unique.
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent

KINDS: dict[str, str] = {
    "unit": "the core's functions on real files, in process",
    "cli": "the eagle-contract command, as a subprocess",
    "plugin": "pytest --eagle-contract, through pytester",
    "hostile": "hostile input of every class, and the run under load or interrupted",
    "release": "layer truth per engine release: each engine's rules and its released code",
    "live": "a real engine runs (SGLang, llama.cpp); skipped unless its environment is set up",
}
"""Each kind (its folder and its marker) and what its tests drive."""


def folders() -> list[str]:
    """``tests/`` and each kind's folder, as ``sys.path`` entries."""
    return [str(TESTS), *(str(TESTS / kind) for kind in KINDS)]
