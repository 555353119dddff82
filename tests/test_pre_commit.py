"""The pre-commit hooks (.pre-commit-hooks.yaml) as users adopt them: `pre-commit try-repo`
of this checkout on a scratch repository, which installs the package into pre-commit's own
environment and runs the hooks on the contracts. The hook environment's torch is pinned to
the CPU build with PIP_CONSTRAINT (docs/ci.md says so for users too)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_eagle_contract.shells import demo

ROOT = Path(__file__).resolve().parent.parent
PRE_COMMIT = shutil.which("pre-commit")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


@pytest.mark.slow
@pytest.mark.skipif(PRE_COMMIT is None, reason="pre-commit is in the test extra")
def test_try_repo_validates_and_checks_the_changed_contracts(tmp_path: Path) -> None:
    repo = tmp_path / "scratch"
    (repo / "contracts").mkdir(parents=True)
    demo.write_demo_shards(repo / "data", shards=3)
    text = demo.shipped_contract().read_text()
    (repo / "contracts" / "good.yaml").write_text(text.replace("../eagle-demo", "../data"))
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "a contract and its shards")
    constraint = tmp_path / "torch-cpu.txt"
    constraint.write_text("torch==2.13.0\n")
    env = {
        **os.environ,
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"),
        "PIP_CONSTRAINT": str(constraint),
    }

    def try_repo() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(PRE_COMMIT), "try-repo", str(ROOT), "--all-files"],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )

    green = try_repo()
    assert green.returncode == 0, green.stdout[-3000:] + green.stderr[-2000:]
    assert "eagle-contract validate" in green.stdout and "eagle-contract check" in green.stdout
    assert green.stdout.count("Passed") == 2

    (repo / "contracts" / "typo.yaml").write_text(
        "contract: x\nversion: 1\ntarget: {num_hidden_layers: eight}\n"
    )
    (repo / "contracts" / "buggy.yaml").write_text(
        text.replace("../eagle-demo/good", "../data/embed-in-front")
    )
    _git(repo, "add", "-A")  # staged, as pre-commit sees a commit's files
    red = try_repo()
    assert red.returncode == 1, red.stdout[-3000:]
    out = red.stdout
    assert out.count("Failed") == 2
    assert "contracts/typo.yaml:3:10: target.num_hidden_layers: 'eight' is not of type" in out
    assert "contracts/good.yaml: valid" in out
    assert "EC401 norm-out-of-bounds" in out  # the check hook, on the buggy set's shards
