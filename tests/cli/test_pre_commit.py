"""The pre-commit hooks (.pre-commit-hooks.yaml) as users adopt them: `pre-commit try-repo`
of this checkout on a scratch repository, with no pip settings of ours: the validate hook's
environment is installed from the hook's own definition, and must hold no torch and no CUDA
package (the hook imports PyYAML and jsonschema only); the check hook is `language: system`,
the eagle-contract of the environment the user set up (here the suite's own), and installs
nothing. The index pip reads is the only network this needs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_eagle_contract.shells import demo

ROOT = Path(__file__).resolve().parents[2]
PRE_COMMIT = shutil.which("pre-commit")


def _installed(log: Path) -> set[str]:
    """What pip installed, by the normalized names its log's "Successfully installed" lines
    give (try-repo's environments live in a folder it removes; pip's log stays)."""
    names = set()
    for line in log.read_text().splitlines():
        if "Successfully installed " in line:
            for spec in line.split("Successfully installed ", 1)[1].split():
                name = spec.rsplit("-", 1)[0]
                names.add(re.sub(r"[-_.]+", "-", name).lower())
    return names


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
    pip_log = tmp_path / "pip.log"
    env = {
        **os.environ,
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"),
        "PIP_LOG": str(pip_log),  # every pip the hooks' installs run appends here
        # the check hook runs the eagle-contract beside this interpreter, as a user's venv
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    }
    env.pop("PIP_CONSTRAINT", None)

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
    installed = _installed(pip_log)
    assert "pytest-eagle-contract" in installed and {"pyyaml", "jsonschema"} <= installed
    heavy = {p for p in installed if p in ("torch", "triton", "numpy") or p.startswith("nvidia")}
    assert heavy == set(), f"the hook environment pulled {sorted(heavy)}"

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
