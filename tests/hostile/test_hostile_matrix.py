"""The hostile-input matrix (benchmarks/hostile_matrix.py, issue 22) sweeps every check
family in every shell: its quick form's plan is checked here, without running it (the sweep
itself is ``tox -e hostile``, or ``python benchmarks/hostile_sweep.py --matrix --quick``).

A family added to plan/registry.py that no cell of the matrix runs fails this test: give
the matrix a cell (a ``--checks`` run, or the contract variant that switches it on)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

pytest.importorskip("pyarrow")  # the datasets class writes Arrow files

import hostile_matrix as matrix  # noqa: E402

from pytest_eagle_contract.plan.registry import FAMILIES  # noqa: E402


@pytest.fixture(scope="module")
def quick() -> list[matrix.Planned]:
    return matrix.plan_matrix(quick=True)


def unreachable(shell: str) -> set[str]:
    """What a shell cannot run: audit and profile (the acceptance-profile family) are CLI
    commands (on-request families run in pytest with --eagle-checks)."""
    return set() if shell == "cli" else {"audit", "acceptance-profile"}


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


def test_token_parity_runs_on_shards_named_on_the_command_line(quick):
    """Issue 37: token-parity cells whose shards come from the command line (CLI PATH,
    pytest --eagle-shards), beside a contract whose own training.shards holds no shard."""
    named = [p for p in quick if p.cell.family == "token-parity (shards named)"]
    assert {(p.klass, p.cell.shell) for p in named} == {
        (k, s) for k in ("shards", "datasets") for s in ("cli", "pytest")
    }
    world = Path("/world")
    for p in named:
        argv = p.cell.argv(Path("/case"), world)  # type: ignore[arg-type]
        assert "c-tokens-named.yaml" in argv and "token-parity" in argv
        own = "shards/hidden_states" if p.klass == "datasets" else "shards"
        flag = "--eagle-shards" if p.cell.shell == "pytest" else "c-tokens-named.yaml"
        assert argv[argv.index(flag) + 1] == own  # the shards, named on the command line
        assert {"token-parity"} <= p.cell.covers()


def test_the_sweep_fails_a_run_that_passed_having_compared_nothing(tmp_path):
    """No cell passes on zero compared items: a run of a shard-comparing family whose report
    says "ok ... on 0 shard(s)" is its own class of defect; "passed, incomplete" (EC009:
    it said so) and a run of a family that compares no shard are not."""
    import hostile_runner as runner
    from hostile_inputs import Case

    (tmp_path / "out").mkdir()
    report = tmp_path / "out" / "r.json"

    def verdict(summary: str, covers: set[str], session: bool = False) -> str:
        data = {"summary": summary}
        report.write_text(json.dumps({"reports": [data]} if session else data))
        case = Case("shards", "x", tmp_path, [], covers=frozenset(covers))
        return runner.compared_nothing(case)

    assert "zero compared" in runner.CLASSES
    assert verdict("ok: 1 checks on 0 shard(s) passed", {"token-parity"})
    assert verdict("ok: 1 checks on 0 shard(s) passed", {"token-parity"}, session=True)
    assert not verdict("ok: 1 checks on 3 shard(s) passed", {"token-parity"})
    assert not verdict(
        "passed, incomplete: 1 checks on 0 shard(s) passed; 1 check(s) did not run (EC009, "
        "the reasons above)",
        {"token-parity"},
    )
    assert not verdict("ok: 1 checks on 0 shard(s) passed", {"draft-config"})
