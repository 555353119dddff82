"""The hostile-input matrix (benchmarks/hostile_matrix.py, issue 22) sweeps every check
family in every shell: its quick form's plan is checked here, without running it (the sweep
itself is ``tox -e hostile``, or ``python benchmarks/hostile_sweep.py --matrix --quick``).

A family added to plan/registry.py that no cell of the matrix runs fails this test: give
the matrix a cell (a ``--checks`` run, or the contract variant that switches it on)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

pytest.importorskip("pyarrow")  # the datasets class writes Arrow files

import hostile_matrix as matrix  # noqa: E402

from pytest_eagle_contract.plan.registry import FAMILIES  # noqa: E402


@pytest.fixture(scope="module")
def quick() -> list[matrix.Planned]:
    return matrix.plan_matrix(quick=True)


def unreachable(shell: str) -> set[str]:
    """What a shell cannot run: audit is a CLI command (on-request families run in pytest
    with --eagle-checks)."""
    return set() if shell == "cli" else {"audit"}


@pytest.mark.parametrize("shell", matrix.SHELLS)
def test_quick_sweep_runs_every_family_in_every_shell(quick, shell):
    families = {f.name for f in FAMILIES} | set(matrix.EXTRA_FAMILIES)
    covered = matrix.covered(quick)[shell]
    missing = families - covered - unreachable(shell)
    assert not missing, f"no {shell} run of the quick matrix executes {sorted(missing)}"


def test_quick_sweep_covers_every_class_and_cell(quick):
    planned = {(p.klass, p.cell.family, p.cell.shell) for p in quick}
    classes = {p.klass for p in quick}
    assert classes == set(matrix.CLASSES) - {"outputs"}  # outputs: hostile_inputs' cases
    full = matrix.plan_matrix(quick=False, n2_every=1)
    assert {(p.klass, p.cell.family, p.cell.shell) for p in full} == planned
    for klass in classes:
        assert {p.cell.shell for p in quick if p.klass == klass} == set(matrix.SHELLS), klass


def test_each_target_family_reads_every_shard_class(quick):
    """The reference capture reads each shard-holding class: evidence runs on shards and
    on speculators datasets in every shell, and so does capture."""
    for klass in ("shards", "datasets"):
        for shell in matrix.SHELLS:
            runs = [p for p in quick if p.klass == klass and p.cell.shell == shell]
            covers = set().union(*(p.cell.covers() for p in runs))
            assert {"evidence", "capture", "structure", "values", "norms"} <= covers, (
                klass,
                shell,
            )
