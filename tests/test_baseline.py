"""Baselines that move on purpose: infer --update and pytest --eagle-contract-update."""

from __future__ import annotations

import shutil

import pytest
import yaml

from pytest_eagle_contract.shells import demo


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    demo.write_demo_shards(root, shards=3)
    return root


def stale_contract(path, shards_dir):
    text = demo.shipped_contract().read_text()
    text = text.replace("../eagle-demo/good", str(shards_dir / "good"))
    text = text.replace("{min: 3.24, max: 3.75}", "{min: 3.0, max: 3.3}")  # moved on purpose
    text = text.replace(
        "- {layer: final_norm, norm: {min: 7.73, max: 8.54}}", "- {layer: final_norm}"
    )
    path.write_text(text)
    return text


@pytest.mark.slow
def test_infer_update_rewrites_bounds_keeping_comments_and_order(tmp_path, shards, cli):
    contract = tmp_path / "c.yaml"
    before = stale_contract(contract, shards)
    assert cli("check", contract, "--sample", "all").returncode == 1  # the stale bound fails
    res = cli("infer", "--update", contract)
    assert res.returncode == 1, res.stdout + res.stderr  # the run that changed them fails
    assert "training.slots[1].norm: [3, 3.3] -> [" in res.stdout
    assert "training.slots[3].norm: none -> [" in res.stdout
    after = contract.read_text()
    comments = [line for line in before.splitlines() if line.lstrip().startswith("#")]
    assert comments == [line for line in after.splitlines() if line.lstrip().startswith("#")]
    assert list(yaml.safe_load(after)) == list(yaml.safe_load(before))
    assert "# the trainer concatenates these slots, in this order" in after
    assert cli("check", contract, "--sample", "all").returncode == 0
    again = cli("infer", "--update", contract)
    assert again.returncode == 0 and "no bound changed" in again.stdout


@pytest.mark.slow
def test_pytest_update_fails_the_run_that_changed_them(pytester, shards):
    (pytester.path / "contracts").mkdir()
    shutil.copytree(shards, pytester.path / "data")
    contract = pytester.path / "contracts" / "demo.yaml"
    stale_contract(contract, pytester.path / "data")
    result = pytester.runpytest(
        "--eagle-contract", "--eagle-contract-update", "--eagle-sample", "all"
    )
    result.assert_outcomes(failed=1, passed=2 + 3 * 4)
    result.stdout.fnmatch_lines(
        [
            "*demo.yaml: norm bounds re-measured and rewritten*",
            "  training.slots[[]1[]].norm: [[]3, 3.3[]] -> *",
        ]
    )
    pytester.runpytest("--eagle-contract", "--eagle-sample", "all").assert_outcomes(passed=14)
