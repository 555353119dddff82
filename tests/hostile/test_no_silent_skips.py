"""Issue 22, item 4: where a check cannot run, the verdict says which and why (EC009) in the
text, the JSON report and pytest; "ok" means every check that applies ran.

Current speculators files keep input_ids and loss_mask in an Arrow dataset beside
``hidden_states/``: without pyarrow (hidden here by a stand-in module on PYTHONPATH that
refuses to import, as on a machine without the ``arrow`` extra), or with no dataset and no
mask in the files, the mask and dataset-row checks cannot run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import speculators_contract, speculators_states

pytest.importorskip("pyarrow")

from pytest_eagle_contract.shards.writing import write_speculators_dataset

CLI = (sys.executable, "-m", "pytest_eagle_contract")
PYTEST = (sys.executable, "-m", "pytest", "-p", "no:cacheprovider")
H, T = 32, 30
CONTRACT = speculators_contract(
    H,
    [
        "{layer: residual:2, norm: {min: 0.5, max: 1.5}}",
        "{layer: residual:4, norm: {min: 1.5, max: 2.5}}",
        "{layer: residual:5, norm: {min: 2.5, max: 3.5}}",
        "{layer: residual:8, norm: {min: 3.5, max: 4.5}}",
    ],
)


def _project(tmp_path: Path, dataset: bool) -> Path:
    ids = speculators_states(tmp_path / "data", 2, T, H, torch.Generator().manual_seed(0))
    rows = [(i, torch.ones(T, dtype=torch.long)) for i in ids]
    if dataset:
        write_speculators_dataset(tmp_path / "data", rows)
    (tmp_path / "c.yaml").write_text(CONTRACT)
    return tmp_path / "c.yaml"


def _without_pyarrow(tmp_path: Path) -> dict[str, str]:
    shim = tmp_path / "no-pyarrow" / "pyarrow"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('pyarrow hidden by the test')\n")
    path = os.pathsep.join([str(shim.parent), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "PYTHONWARNINGS": "ignore"}


def _check(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], list]:
    report = tmp_path / "r.json"
    res = subprocess.run(
        [*CLI, "check", "c.yaml", "--no-sharpness", "--json", str(report)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert "Traceback" not in res.stdout + res.stderr, res.stderr
    data = json.loads(report.read_text())
    assert data["complete"] == (not data["not_run"])  # the report's own verdict of gaps
    assert data["complete"] == all(f["code"] != "EC009" for f in data["findings"])
    return res, data["findings"]


def test_without_pyarrow_the_dataset_checks_say_they_did_not_run(tmp_path):
    _project(tmp_path, dataset=True)
    res, findings = _check(tmp_path, _without_pyarrow(tmp_path))
    assert res.returncode == 0, res.stdout
    gaps = [f for f in findings if f["code"] == "EC009"]
    assert {f["severity"] for f in gaps} == {"warning"}
    messages = " ".join(f["message"] for f in gaps)
    assert "dataset row (EC206" in messages and "loss-mask checks" in messages
    assert "needs pyarrow" in messages
    last = res.stdout.strip().splitlines()[0]  # the verdict, first
    assert last.startswith("passed, incomplete") and "did not run (EC009" in last, last


@pytest.mark.slow
def test_with_pyarrow_every_check_runs_and_the_verdict_is_ok(tmp_path):
    _project(tmp_path, dataset=True)
    res, findings = _check(tmp_path, {**os.environ, "PYTHONWARNINGS": "ignore"})
    assert res.returncode == 0 and findings == [], res.stdout
    assert res.stdout.strip().splitlines()[0].startswith("ok:")


def test_no_mask_anywhere_says_the_mask_checks_did_not_run(tmp_path):
    _project(tmp_path, dataset=False)
    res, findings = _check(tmp_path, {**os.environ, "PYTHONWARNINGS": "ignore"})
    gaps = [f["message"] for f in findings if f["code"] == "EC009"]
    assert gaps and all("no loss_mask" in m for m in gaps), gaps
    assert not res.stdout.strip().splitlines()[0].startswith("ok")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """Made before any test's pytester fixture: what pytester's sys.modules snapshot sees
    imported (safetensors, pyarrow) stays imported."""
    return _project(tmp_path_factory.mktemp("project"), dataset=True)


@pytest.mark.slow
def test_pytest_shows_the_check_that_did_not_run_as_a_skip(project, tmp_path):
    contract = project
    env = _without_pyarrow(tmp_path)
    res = subprocess.run(
        [*PYTEST, "-rs", "--eagle-contract", str(contract), "--eagle-no-sharpness"],
        cwd=project.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = res.stdout + res.stderr
    assert "Traceback" not in out and "INTERNALERROR" not in out, out
    assert res.returncode == 0, out
    assert "SKIPPED" in out and "EC009" in out and "needs pyarrow" in out, out
