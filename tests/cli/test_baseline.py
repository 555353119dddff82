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


@pytest.mark.slow
def test_infer_update_on_a_layout_bug_warns_as_check_and_rewrites_the_comments(
    tmp_path, shards, cli
):
    """Issue 37 item 6: the embed-in-front set given to --update. check says slot 0 looks
    like the embedding and slots 1, 2 fit their neighbours' bounds; the update says the
    same (the norms family's own findings), and the comments beside the rewritten bounds
    describe the new numbers, not the old shards'."""
    contract = tmp_path / "c.yaml"
    drafted = cli("infer", shards / "good", "-o", contract, "--num-layers", "8", "--name", "c")
    assert drafted.returncode in (0, 1) and contract.exists(), drafted.stderr
    before = contract.read_text()
    check = cli("check", contract, shards / "embed-in-front", "--sample", "all", "-v")
    assert check.returncode == 1  # -v: every finding's hint, as the update prints them
    said = [line.strip() for line in check.stdout.splitlines() if "hint:" in line]
    assert any("looks like the embedding" in h for h in said), check.stdout
    assert any("slots swapped or layers shifted" in h for h in said), check.stdout
    res = cli("infer", "--update", contract, shards / "embed-in-front", "-v")
    assert res.returncode == 1, res.stdout + res.stderr
    out = res.stdout + res.stderr
    for hint in said:  # every hint check -v gave, in the update's -v words too
        assert hint in out, (hint, out)
    assert "EC401" in out
    after = contract.read_text()
    old_slots = [line for line in before.splitlines() if "- {layer:" in line]
    new_slots = [line for line in after.splitlines() if "- {layer:" in line]
    for old, new in zip(old_slots, new_slots):
        if old.split("#")[0] != new.split("#")[0]:  # a bound that moved: its comment too
            assert old.split("#", 1)[1] not in new, (old, new)
            assert "infer --update" in new.split("#", 1)[1], new
    assert "looks like the embedding" in new_slots[0].split("#", 1)[1], new_slots[0]
