"""Issue 10, "what was seen": each step of a new user's first-contract journey that broke,
driven from outside as the user runs it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import no_traceback
from serving_cases import DROPPED_LAST

from pytest_eagle_contract.shells import demo

CONTRACT = demo.shipped_contract()
CHECKOUT_CONTRACT = demo.Path(__file__).parents[2] / "contracts" / demo.CONTRACT_NAME


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    demo.write_demo_shards(root, shards=3, save_target=True)
    return root


def _one_short(demo_dir, tmp_path):
    """The good set with shard 1's input_ids one token short."""
    shards = tmp_path / "shards"
    shutil.copytree(demo_dir / "good", shards)
    path = shards / "rows_0-2000" / "data_1.ckpt"
    data = torch.load(path, weights_only=True)
    data["input_ids"] = data["input_ids"][..., :-1]
    torch.save(data, path)
    return shards, path


def test_wheel_ships_the_demo_contract_the_checkout_shows():
    """Item 4: the demo's contract is package data, the same as contracts/ in a checkout."""
    shipped = CONTRACT.read_text().splitlines()[1:]  # line 1: the editor's $schema path
    assert shipped == CHECKOUT_CONTRACT.read_text().splitlines()[1:]
    assert "site-packages" in str(CONTRACT) or "pytest_eagle_contract" in str(CONTRACT)


@pytest.mark.slow
def test_one_short_ids_with_the_target_model_is_a_finding_not_a_traceback(demo_dir, tmp_path, cli):
    """Item 5: evidence on a shard whose input_ids are one short: a finding for that shard,
    and the other shards are still reported."""
    shards, _ = _one_short(demo_dir, tmp_path)
    res = cli(
        "check",
        CONTRACT,
        shards,
        "--sample",
        "all",
        "--target-model",
        demo_dir / "target",
        "--no-sharpness",
    )
    no_traceback(res)
    assert res.returncode == 1
    assert "EC202 length-mismatch: input_ids has" in res.stdout
    assert "on 3 shard(s)" in res.stdout


@pytest.mark.slow
def test_identify_on_a_one_short_shard_exits_1_with_the_reason(demo_dir, tmp_path, cli):
    _, path = _one_short(demo_dir, tmp_path)
    res = cli("identify", path, "--target-model", demo_dir / "target")
    no_traceback(res)
    assert res.returncode == 1 and "EC202" in res.stderr and "beside" in res.stderr


def test_ec202_names_the_key_that_differs_from_the_majority(demo_dir, tmp_path, cli):
    """Item 7: the ids are the odd one out (the mask and both states agree), and the shard
    is named once, not repeated in 'also in'."""
    shards, _ = _one_short(demo_dir, tmp_path)
    res = cli("check", CONTRACT, shards, "--sample", "all", "--checks", "structure")
    assert res.returncode == 1
    found = re.search(
        r"EC202 length-mismatch: input_ids has (\d+) entries beside (\d+) in "
        r"loss_mask, slot 0",
        res.stdout,
    )
    assert found and int(found[1]) + 1 == int(found[2])
    assert "loss_mask has" not in res.stdout
    assert "also in" not in res.stdout


def test_resolve_with_a_problem_exits_1(cli):
    """Item 6: EC511 (a capture the loop never reaches) is a finding: exit 1."""
    res = cli("resolve", *DROPPED_LAST, "--source", "table")
    assert res.returncode == 1 and "EC511" in res.stdout


@pytest.mark.parametrize(
    "command", [["schema"], ["resolve", "--engine", "vllm", "--num-layers", "32", "--json"]]
)
def test_a_closed_pipe_ends_quietly(command):
    """Item 6: `eagle-contract schema | head -1` prints no BrokenPipeError."""
    exe = [sys.executable, "-m", "pytest_eagle_contract", *command]
    shell = " ".join(f"'{a}'" for a in exe) + " | head -c 1"
    res = subprocess.run(
        ["bash", "-o", "pipefail", "-c", shell], capture_output=True, text=True, timeout=120
    )
    assert res.stderr == "" and res.stdout == "{"


def test_version(cli):
    res = cli("--version")
    assert res.returncode == 0 and res.stdout.startswith("eagle-contract 0.")


@pytest.mark.slow
def test_cli_and_pytest_run_the_same_checks_sharpness_included(demo_dir, cli, pytester):
    """The two gates agree: both run sharpness by default, both leave it out on request."""
    args = (CONTRACT, demo_dir / "good", "--sample", "all")
    assert "ok: 14 checks on 3 shard(s)" in cli("check", *args).stdout  # layout, sharpness
    assert "ok: 13 checks on 3 shard(s)" in cli("check", *args, "--no-sharpness").stdout
    shards = str(demo_dir / "good")
    common = (
        "--eagle-contract",
        str(CONTRACT),
        "--eagle-shards",
        shards,
        "--eagle-sample",
        "all",
        "-p",
        "no:cacheprovider",
    )
    pytester.runpytest(*common).assert_outcomes(passed=14)
    pytester.runpytest(*common, "--eagle-no-sharpness").assert_outcomes(passed=13)


def test_fixtures_use_the_contract_named_on_the_command_line(demo_dir, pytester):
    """Item 3: two YAML files under contracts/, one named with --eagle-contract: the
    eagle_shard fixture uses it instead of refusing to choose."""
    contracts = pytester.path / "contracts"
    contracts.mkdir()
    text = CONTRACT.read_text().replace("../eagle-demo/good", str(demo_dir / "good"))
    (contracts / "a.yaml").write_text(text)
    (contracts / "b.yaml").write_text(text.replace("contract: ", "contract: b-", 1))
    pytester.makepyfile(
        test_mine="def test_ids(eagle_shard):\n    assert eagle_shard.input_ids is not None\n"
    )
    res = pytester.runpytest(
        "--eagle-contract",
        "contracts/a.yaml",
        "--eagle-no-sharpness",
        "-p",
        "no:cacheprovider",
        "--eagle-sample",
        "2",
    )
    res.assert_outcomes(passed=2 + 1 + 2 * 4)  # the user's test per shard, layout, shard items


def _pytest_help() -> str:
    """What ``pytest --help`` prints, the plugin loaded."""
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return res.stdout


@pytest.mark.slow
def test_help_shows_the_optional_path():
    assert "--eagle-contract=[PATH]" in _pytest_help()


@pytest.mark.slow
def test_docs_show_each_option_as_pytest_help_does():
    """Item 3: the docs spell every option as `pytest --help` prints it."""
    shown = re.findall(r"^\s+(--eagle-[a-z-]+(?:=\S+)?)", _pytest_help(), re.M)
    docs = (CHECKOUT_CONTRACT.parent.parent / "docs" / "pytest-plugin.md").read_text()
    docs = docs.replace("\\|", "|")  # a table cell escapes its pipes
    assert shown and [o for o in shown if f"`{o}" not in docs] == []
