"""The repository's GitHub Action (action.yml), run as users run it: its own steps, through
the local runner of tests/action_runner.py (no Actions runner here), in a fresh virtual
environment that its install step fills, on the demo contract. The good set passes; the
buggy set fails the job, with annotations, the step summary and the reports uploaded."""

from __future__ import annotations

import json
import subprocess
import venv
from pathlib import Path

import pytest
import yaml
from action_runner import run_action

from pytest_eagle_contract.shells import demo
from pytest_eagle_contract.version import REPOSITORY

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = "pytest_eagle_contract/shells/data/demo-tiny-llama-eagle3.yaml"


def test_the_action_declares_what_docs_ci_md_promises() -> None:
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    assert {"contract", "shards", "sample", "checks", "python-version", "torch"} <= set(
        action["inputs"]
    )
    assert action["inputs"]["contract"]["required"] is True
    uses = [s["uses"].split("@")[0] for s in action["runs"]["steps"] if "uses" in s]
    assert uses == ["actions/setup-python", "actions/upload-artifact"]
    for step in action["runs"]["steps"]:  # inputs reach a shell only through env
        assert "${{" not in step.get("run", ""), step.get("name")
    workflow = yaml.safe_load((ROOT / ".github/workflows/eagle-contract-action.yml").read_text())
    (job,) = workflow["jobs"].values()
    assert sum(s.get("uses") == "./" for s in job["steps"]) == 2
    # the repository by name (tests/unit/test_ci_snippets.py: every snippet names it alike)
    assert f"uses: {REPOSITORY}@" in (ROOT / "docs/ci.md").read_text()


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment with nothing installed: what actions/setup-python gives."""
    where = tmp_path_factory.mktemp("setup-python") / "venv"
    venv.create(where, with_pip=True)
    return where / "bin"


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("demo")
    demo.write_demo_shards(root, shards=3)
    return root


@pytest.mark.slow
def test_the_action_passes_the_good_set_and_fails_the_buggy_one(
    fresh_python: Path, shards: Path, tmp_path: Path
) -> None:
    runs = {}
    for name in ("good", "embed-in-front"):
        runs[name] = run_action(
            ROOT,
            {
                "contract": CONTRACT,
                "shards": str(shards / name),
                "sample": "all",
                "torch-index": "",  # pip's own configuration: this machine's CPU build
            },
            fresh_python,
            tmp_path / name,
            cwd=ROOT,
        )
    good, bad = runs["good"], runs["embed-in-front"]
    assert good.conclusion == "success", good.output[-3000:]
    assert good.outputs["exit-code"] == "0"
    where = "import pytest_eagle_contract as p; print(p.__file__)"
    python = str(fresh_python / "python")
    installed = subprocess.run(
        [python, "-c", where], capture_output=True, text=True, cwd=tmp_path
    ).stdout
    assert installed.startswith(str(fresh_python.parent)), installed  # the action installed it
    assert "eagle-contract passed" in good.summary
    assert {p.name for p in (good.artifacts / "eagle-contract-report").iterdir()} == {
        "report.html",
        "report.json",
    }

    assert bad.conclusion == "failure" and bad.outputs["exit-code"] == "1"
    assert [s.outcome for s in bad.steps] == ["success"] * 4 + ["failure"]  # uploaded, then failed
    assert "::error file=" in bad.output and "title=EC401 norm-out-of-bounds" in bad.output
    assert "## eagle-contract FAILED" in bad.summary and "| EC401 |" in bad.summary
    report = json.loads((bad.artifacts / "eagle-contract-report" / "report.json").read_text())
    assert not report["ok"] and {f["code"] for f in report["findings"]} >= {"EC401"}
