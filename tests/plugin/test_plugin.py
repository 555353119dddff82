"""The pytest plugin driven from outside with ``pytester``, as users run it."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_eagle_contract.shells import demo

CONTRACT = "contracts/demo.yaml"


@pytest.fixture(scope="module")
def demo_shards(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("demo")
    demo.write_demo_shards(root, shards=4)
    return root


@pytest.fixture
def project(pytester, demo_shards):
    """A user's repository: contracts/demo.yaml pointing at data/good, and a test."""
    shutil.copytree(demo_shards, pytester.path / "data")
    text = demo.shipped_contract().read_text().replace("../eagle-demo/good", "../data/good")
    (pytester.path / "contracts").mkdir()
    (pytester.path / CONTRACT).write_text(text)
    pytester.makepyfile(test_user="def test_unrelated():\n    assert 1 + 1 == 2\n")
    return pytester


def test_good_shards_pass(project):
    result = project.runpytest("--eagle-contract", CONTRACT, "--eagle-sample", "all", "-v")
    result.assert_outcomes(passed=18 + 1)  # the contract's items and the user's own test
    result.stdout.fnmatch_lines(
        [
            "eagle-contract: sample all, seed 0",
            "contracts/demo.yaml::layout PASSED*",
            "contracts/demo.yaml::sharpness PASSED*",
            "contracts/demo.yaml::structure[[]rows_0-2000/data_0.ckpt[]] PASSED*",
            "contracts/demo.yaml::norms[[]rows_0-2000/data_3.ckpt[]] PASSED*",
        ]
    )


def test_no_path_runs_contracts_dir_beside_users_tests(project):
    result = project.runpytest("--eagle-contract", "--eagle-sample", "2")
    result.assert_outcomes(passed=2 + 2 * 4 + 1)


def test_ini_contract_paths(project):
    (project.path / "contracts").rename(project.path / "gates")
    project.makeini("[pytest]\neagle_contract_paths = gates/demo.yaml\neagle_sample = 1\n")
    result = project.runpytest("--eagle-contract")
    result.assert_outcomes(passed=2 + 4 + 1)


def test_off_by_default(project):
    result = project.runpytest()
    result.assert_outcomes(passed=1)


def test_embedding_in_front_fails_with_a_diagnosis_not_a_traceback(project):
    """Issue 40 item 3: a failing item prints one entry per rule code by default (the count,
    the first one's place, message and hint, and its explain command); ``pytest -v`` prints
    every finding in full (where, expected, found)."""
    args = ["--eagle-contract", CONTRACT, "--eagle-sample", "all"]
    args += ["--eagle-shards", str(project.path / "data" / "embed-in-front")]
    result = project.runpytest(*args)
    result.assert_outcomes(passed=14 + 1, failed=4)
    result.stdout.fnmatch_lines(
        [
            "*_ demo-tiny-llama-eagle3::norms[[]rows_0-2000/data_0.ckpt[]] _*",
            "EC401 norm-out-of-bounds: 3 findings, slots 0, 1, 2 in 1 shard",
            "  --> contracts/demo.yaml:25, shard rows_0-2000/data_0.ckpt (the first)",
            "  slot 0 (aux_hidden_state[[]..., 0:64[]]) has median*",
            "      hint: slot 0 looks like the embedding*",
            "(pytest -v prints every finding in full: where, expected, found)",
            "FAILED contracts/demo.yaml::norms[[]rows_0-2000/data_0.ckpt[]]*",
        ]
    )
    out = result.stdout.str()
    assert "eagle-contract explain EC401" in " ".join(out.split())
    assert "  expected: residual:2" not in out and "data_0.ckpt, slot 0" not in out
    assert "Traceback" not in out and "def runtest" not in out
    full = project.runpytest(*args, "-v")
    full.assert_outcomes(passed=14 + 1, failed=4)
    full.stdout.fnmatch_lines(
        [
            "*_ demo-tiny-llama-eagle3::norms[[]rows_0-2000/data_0.ckpt[]] _*",
            "EC401 norm-out-of-bounds: slot 0 (aux_hidden_state[[]..., 0:64[]]) has median*",
            "  --> contracts/demo.yaml:25, shard rows_0-2000/data_0.ckpt, slot 0",
            "  expected: residual:2: median in [[]1.44, 1.75[]]",
            "      hint: slot 0 looks like the embedding*",
            "FAILED contracts/demo.yaml::norms[[]rows_0-2000/data_0.ckpt[]]*",
        ]
    )


def test_corrupt_shard_fails_its_items_and_the_run_goes_on(project):
    shard = project.path / "data" / "good" / "rows_0-2000" / "data_1.ckpt"
    shard.write_bytes(shard.read_bytes()[:500])
    result = project.runpytest("--eagle-contract", CONTRACT, "--eagle-sample", "all")
    result.assert_outcomes(passed=14 + 1, failed=4)
    result.stdout.fnmatch_lines(["EC002 truncated-file: *", "*shard rows_0-2000/data_1.ckpt*"])


@pytest.mark.parametrize("edit", [("slots:", "slotz:"), ("min: 1.44", "min: one")])
def test_invalid_contract_is_one_failing_item_beside_the_users_tests(project, edit):
    path = project.path / CONTRACT
    path.write_text(path.read_text().replace(*edit))
    result = project.runpytest("--eagle-contract", CONTRACT)
    result.assert_outcomes(passed=1, failed=1)  # the user's test still runs
    result.stdout.fnmatch_lines(
        ["*contracts/demo.yaml:2[0-9]:*: training.*", "FAILED contracts/demo.yaml::contract*"]
    )
    assert "Traceback" not in result.stdout.str()


def test_missing_shards_is_a_usage_error(project):
    result = project.runpytest("--eagle-contract", CONTRACT, "--eagle-shards", "nowhere")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*shard path *nowhere does not exist*"])


def test_no_contract_anywhere_is_a_usage_error(pytester):
    pytester.makepyfile(test_x="def test_x(): pass\n")
    result = pytester.runpytest("--eagle-contract")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--eagle-contract: no contract given*"])


def test_keyword_selection(project):
    result = project.runpytest(
        "--eagle-contract", CONTRACT, "--eagle-sample", "all", "-k", "structure and data_2"
    )
    result.assert_outcomes(passed=1)


def test_junitxml(project):
    bad = str(project.path / "data" / "embed-in-front")
    result = project.runpytest(
        "--eagle-contract",
        CONTRACT,
        "--eagle-shards",
        bad,
        "--eagle-sample",
        "2",
        "--junitxml=report.xml",
    )
    result.assert_outcomes(passed=8 + 1, failed=2)
    cases = ET.parse(project.path / "report.xml").getroot().iter("testcase")
    failed = {c.get("name"): c.find("failure") for c in cases if c.find("failure") is not None}
    assert len(failed) == 2 and all(name.startswith("norms[rows_0-2000/") for name in failed)
    for failure in failed.values():
        assert "EC401" in failure.text and "looks like the embedding" in failure.text


@pytest.mark.slow
def test_xdist(project):
    result = project.runpytest("--eagle-contract", CONTRACT, "--eagle-sample", "all", "-n", "2")
    result.assert_outcomes(passed=18 + 1)


@pytest.mark.slow
def test_the_controller_keeps_one_copy_of_what_reports_share(project):
    """pytest keeps every report to the end: a passing contract item's three reports share
    their node id and location, items share equal JUnit properties, and the findings are
    kept once (not also on the report); a failing item's reports stay whole, and the JUnit
    file still gets every property."""
    bad = str(project.path / "data" / "embed-in-front")
    args = ["--eagle-contract", CONTRACT, "--eagle-sample", "all", "-n", "2"]
    result = project.runpytest(*args, "--eagle-shards", bad, "--junitxml=report.xml")
    reports = [
        r
        for r in result.reprec.getreports("pytest_runtest_logreport")  # type: ignore[attr-defined]
        if r.nodeid.startswith(CONTRACT)
    ]
    by_item: dict[str, list[pytest.TestReport]] = {}
    for r in reports:
        by_item.setdefault(r.nodeid, []).append(r)
    passing = [rs for rs in by_item.values() if all(r.passed for r in rs)]
    failing = [rs for rs in by_item.values() if any(r.failed for r in rs)]
    assert len(passing) >= 4 and failing
    for setup, call, teardown in passing:
        assert call.nodeid is setup.nodeid and teardown.location is setup.location
        assert not hasattr(call, "eagle_contract")
    shared = [rs[2].user_properties for rs in passing if "::structure[" in rs[0].nodeid]
    assert len(shared) >= 2 and all(p is shared[0] for p in shared)
    assert any(name == "eagle_contract_sha256" for name, _ in shared[0])
    for _setup, call, teardown in failing:
        assert call.failed and call.user_properties is not teardown.user_properties
    props = ET.parse(project.path / "report.xml").getroot().iter("property")
    names = {p.get("name") for p in props}
    assert {"eagle_contract", "eagle_contract_sha256", "eagle_rules"} <= names


def test_last_failed(project):
    bad = str(project.path / "data" / "embed-in-front")
    project.runpytest(
        "--eagle-contract", CONTRACT, "--eagle-shards", bad, "--eagle-sample", "all"
    ).assert_outcomes(passed=14 + 1, failed=4)
    result = project.runpytest(
        "--eagle-contract", CONTRACT, "--eagle-shards", bad, "--eagle-sample", "all", "--lf"
    )
    result.assert_outcomes(failed=4)


def test_sample_and_seed_choose_the_same_shards(project):
    args = ("--eagle-contract", CONTRACT, "--eagle-sample", "2", "--collect-only", "-q")

    def ids(seed):
        lines = project.runpytest(*args, "--eagle-seed", seed).stdout.lines
        return [line for line in lines if "demo.yaml::" in line]

    first = ids("3")
    assert len(first) == 10 and first == ids("3") and first != ids("4")


def test_fixtures_and_marker_in_users_tests(project):
    project.makepyfile(
        test_collate="""
        import pytest
        import torch

        @pytest.mark.eagle_contract("contracts/demo.yaml")
        def test_my_collate(eagle_shard, eagle_contract):
            assert eagle_contract.name == "demo-tiny-llama-eagle3"
            assert eagle_shard.fc_input.shape == (eagle_shard.input_ids.shape[0], 3 * 64)
            assert eagle_shard.target.dtype == torch.bfloat16
            assert eagle_shard.loss_mask.sum() > 0
    """
    )
    result = project.runpytest("-v", "--eagle-sample", "3", "test_collate.py")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_my_collate[[]rows_0-2000/data_*.ckpt[]] PASSED*"])


def test_fixture_skips_with_reason_when_shards_are_absent(project):
    shutil.rmtree(project.path / "data")
    project.makepyfile(
        test_collate="""
        def test_my_collate(eagle_shard):
            raise AssertionError("must not run")
    """
    )
    result = project.runpytest("-rs", "test_collate.py")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*eagle_shard: *does not exist*"])


def test_plugin_can_be_disabled(project):
    result = project.runpytest("-p", "no:eagle_contract", "--eagle-contract")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_options_have_their_own_help_heading(pytester):
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        [
            "EAGLE-3 contracts (pytest-eagle-contract):",
            "  --eagle-contract*",
            "  --eagle-shards=PATH*",
            "  --eagle-sample=N|all*",
            "  --eagle-seed=S*",
        ]
    )


def test_batched_items_run_every_shard_check_on_their_shards(project):
    result = project.runpytest(
        "--eagle-contract", CONTRACT, "--eagle-sample", "all", "--eagle-batch", "2", "-v"
    )
    result.assert_outcomes(passed=2 + 2 + 1)  # layout, sharpness, two batches, the user's test
    result.stdout.fnmatch_lines(
        [
            "contracts/demo.yaml::batch[[]rows_0-2000/data_0.ckpt..rows_0-2000/data_1.ckpt[]]"
            " PASSED*",
            "contracts/demo.yaml::batch[[]rows_0-2000/data_2.ckpt..rows_0-2000/data_3.ckpt[]]"
            " PASSED*",
        ]
    )


FIRST_BATCH = "batch[[]rows_0-2000/data_0.ckpt..rows_0-2000/data_1.ckpt[]]"  # fnmatch's [


def test_a_batch_fails_with_the_findings_of_its_bad_shard(project):
    shard = project.path / "data" / "good" / "rows_0-2000" / "data_1.ckpt"
    shard.write_bytes(shard.read_bytes()[:500])
    args = ["--eagle-contract", CONTRACT, "--eagle-sample", "all", "--eagle-batch", "2"]
    result = project.runpytest(*args)
    result.assert_outcomes(passed=3 + 1, failed=1)
    result.stdout.fnmatch_lines(
        [
            f"*_ demo-tiny-llama-eagle3::{FIRST_BATCH} _*",
            "EC002 truncated-file: *",
            "*shard rows_0-2000/data_1.ckpt*",
            f"FAILED contracts/demo.yaml::{FIRST_BATCH}*",
        ]
    )
    assert "data_0.ckpt, slot" not in result.stdout.str()  # the good shard of the batch: nothing
    rerun = project.runpytest(*args, "--lf").parseoutcomes()
    assert rerun["failed"] == 1 and "passed" not in rerun


@pytest.mark.slow
def test_the_report_of_a_batched_run_holds_every_check_on_every_shard(project):
    import json

    bad = str(project.path / "data" / "embed-in-front")
    args = ["--eagle-contract", CONTRACT, "--eagle-sample", "all", "--eagle-shards", bad]
    units = {}
    for batch, report in (("1", "one.json"), ("3", "batched.json")):
        project.runpytest(*args, "--eagle-batch", batch, "-n", "2", f"--eagle-json-report={report}")
        (run,) = json.loads((project.path / report).read_text())["reports"]
        units[batch] = sorted(
            (u["check"], u["shard"], sorted(f["code"] for f in u["findings"])) for u in run["units"]
        )
    assert len(units["1"]) == 2 + 4 * 4 and units["3"] == units["1"]


def test_auto_batches_only_above_its_threshold(project, monkeypatch):
    from pytest_eagle_contract.shells import options

    args = ("--eagle-contract", CONTRACT, "--eagle-sample", "all", "--collect-only", "-q")
    assert sum("::batch[" in line for line in project.runpytest(*args).outlines) == 0
    monkeypatch.setattr(options, "AUTO_BATCH_ABOVE", 2)  # 4 shards: batches of 2
    ids = [line for line in project.runpytest(*args).outlines if "::batch[" in line]
    assert len(ids) == 2 and ids[0].endswith("data_0.ckpt..rows_0-2000/data_1.ckpt]")


@pytest.mark.parametrize("value", ["0", "-1", "two", "²"])
def test_a_bad_batch_size_is_a_usage_error(project, value):
    result = project.runpytest("--eagle-contract", CONTRACT, f"--eagle-batch={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--eagle-batch: expected a whole number >= 1 or auto*"])
