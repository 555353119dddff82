"""Issue 40 item 3, docs CLI-STYLE.md sections 2 and 3: every command that reports findings
prints its verdict on its first line, then a short view (one entry per rule code, ending with
``eagle-contract explain CODE``); ``-v`` prints every finding in full. Each command here is
run as a user runs it, in a process of its own, on real files. Wrapped prose is matched with
its whitespace folded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import no_traceback
from test_acceptance_profiles import TRAINED, profile_of
from test_baseline import stale_contract
from test_compare_captures import IDS, _sets, prompts  # noqa: F401 (a fixture)
from test_doctor import CAPPED, draft, targets  # noqa: F401 (a fixture)

from pytest_eagle_contract.layers import Layer
from pytest_eagle_contract.shells import demo

ROOT = Path(__file__).resolve().parents[2]
KIMI = ROOT / "contracts" / "kimi-k2.5-eagle3.yaml"


def folded(text: str) -> str:
    return " ".join(text.split())


def first(res) -> str:
    no_traceback(res)
    return res.stdout.splitlines()[0]


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("verdict-demo")
    demo.write_demo_shards(root, shards=3)
    return root


@pytest.fixture
def contract(tmp_path, shards) -> Path:
    path = tmp_path / "demo.yaml"
    text = demo.shipped_contract().read_text().replace("../eagle-demo/good", str(shards / "good"))
    path.write_text(text)
    return path


def test_check_prints_its_verdict_first_then_one_entry_per_code(cli, contract, shards):
    good = cli("check", contract, "--sample", "all")
    assert good.returncode == 0 and first(good).startswith("ok: "), good.stdout
    bad = cli("check", contract, shards / "embed-in-front", "--sample", "all")
    assert bad.returncode == 1
    assert first(bad).startswith("FAILED: 9 finding(s) [EC401] in "), bad.stdout
    out = folded(bad.stdout)
    assert "EC401 norm-out-of-bounds: 9 findings, slots 0, 1, 2 in 3 shards" in out
    assert "hint: slot 0 looks like the embedding" in out
    assert "eagle-contract explain EC401" in out
    assert "expected:" not in out and "(-v prints every finding in full" in out
    full = cli("check", contract, shards / "embed-in-front", "--sample", "all", "-v")
    assert full.returncode == 1 and first(full) == bad.stdout.splitlines()[0]
    assert "expected: residual:2: median in" in full.stdout  # in full, grouped by place
    assert "also in: 2 other shard(s)" in full.stdout
    assert "eagle-contract explain" not in full.stdout


def test_check_sharpness_prints_its_verdict_first(cli, contract):
    res = cli("check", "--sharpness", contract)
    assert res.returncode == 0 and first(res).startswith("sharp: "), res.stdout
    assert "drop-slot" in res.stdout  # the table follows


def test_audit_prints_its_verdict_first(cli, contract, shards, tmp_path):
    args = ["audit", contract, shards / "embed-in-front", "--cache", tmp_path / "cache"]
    res = cli(*args)
    assert res.returncode == 1 and first(res).startswith("FAILED: audit of 3 shard(s)")
    out = folded(res.stdout)
    assert "eagle-contract explain EC401" in out and "expected:" not in out
    assert "per-shard median norm, per slot:" in res.stdout
    full = cli(*args, "-v")
    assert first(full).startswith("FAILED: audit of 3 shard(s)")
    assert "expected: residual:2: median in" in full.stdout


def test_profile_prints_its_verdict_first(cli, tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps(profile_of(TRAINED, 3, mean_accept_length=2.52)))
    res = cli("profile", bad)
    assert res.returncode == 1 and first(res).startswith("FAILED: 2 finding(s) [EC721, EC723]")
    assert "eagle-contract explain EC721" in folded(res.stdout)
    full = cli("profile", bad, "-v")
    assert first(full) == first(res)
    assert "expected:" in full.stdout and "eagle-contract explain" not in full.stdout


@pytest.mark.slow
def test_compare_captures_prints_its_verdict_first(cli, tmp_path, prompts):  # noqa: F811
    ref, prod = _sets(tmp_path, prompts, lambda s: [s[Layer(2)], s[Layer(6)], s[Layer(5)]])
    args = ["compare-captures", ref, prod, "--num-layers", 8, "--pp-size", 2]
    res = cli(*args)
    assert res.returncode == 1 and first(res).startswith("FAILED: 2 prompt(s) compared")
    assert "EC708 topology-mismatch" in res.stdout
    assert "eagle-contract explain EC708" in folded(res.stdout)
    full = cli(*args, "-v")
    assert first(full).startswith("FAILED: 2 prompt(s) compared")
    assert "also in: 1 other shard(s)" in full.stdout and "expected:" in full.stdout
    assert len(IDS) == 3


@pytest.mark.slow
def test_doctor_prints_its_verdict_first_and_the_skipped_seams_needs_under_v(
    cli,
    tmp_path,
    targets,  # noqa: F811
):
    unsorted = draft(tmp_path, eagle_config={"eagle_aux_hidden_state_layer_ids": [5, 1, 3]})
    args = ["doctor", "--draft", unsorted, "--target-model", targets["training"]]
    args += ["--engine", "sglang", "--serving-args", CAPPED]
    res = cli(*args)
    assert res.returncode == 1
    assert first(res).startswith("doctor: FAILED ("), res.stdout
    out = folded(res.stdout)
    assert "== serving-args: fail ==" in res.stdout and "eagle-contract explain EC512" in out
    assert "to run it:" not in out and "(what each needs: -v)" in out
    full = cli(*args, "-v")
    assert first(full) == first(res)
    assert "to run it:" in full.stdout and "== skipped ==" in full.stdout
    assert "eagle-contract explain" not in full.stdout


@pytest.mark.slow
def test_infer_update_prints_its_verdict_first(cli, tmp_path, shards):
    path = tmp_path / "c.yaml"
    stale_contract(path, shards)
    res = cli("infer", "--update", path)
    assert res.returncode == 1
    assert first(res).startswith("changed: 4 bound(s) re-measured and rewritten in "), res.stdout
    assert "training.slots[1].norm: [3, 3.3] -> [" in res.stdout
    again = cli("infer", "--update", path)
    assert again.returncode == 0 and first(again) == "no bound changed: nothing written"
    moved = tmp_path / "moved.yaml"
    shutil.copy(path, moved)
    bug = cli("infer", "--update", moved, shards / "embed-in-front")
    assert bug.returncode == 1
    assert first(bug).startswith("FAILED: check finds the layout of slot(s) 0"), bug.stdout
    assert "eagle-contract explain EC401" in folded(bug.stdout)
    assert "expected:" not in bug.stdout
    shutil.copy(path, moved)
    full = cli("infer", "--update", moved, shards / "embed-in-front", "-v")
    assert first(full) == first(bug) and "expected:" in full.stdout


def test_matrix_prints_the_contracts_own_verdict_first_and_cuts_the_refusals(cli, contract):
    good = cli("matrix", contract)
    assert good.returncode == 0
    assert first(good).startswith("ok: SGLang 0.5.13..0.5.23: the fc gets what the trainer")
    refusals = [x for x in good.stdout.splitlines() if x.startswith("refused:")]
    assert refusals and all(len(x) <= 120 for x in refusals)
    assert any(x.endswith("…") for x in refusals)
    full = cli("matrix", contract, "-v")
    whole = [x for x in full.stdout.splitlines() if x.startswith("refused:")]
    assert len(whole) == len(refusals) and not any(x.endswith("…") for x in whole)
    assert any(len(x) > 120 for x in whole)
    bad = cli("matrix", KIMI)
    assert bad.returncode == 1
    assert first(bad).startswith("FAILED: SGLang 0.5.13, SGLang 0.5.14..0.5.23: the fc gets")


def test_ec501_found_for_several_spans_keeps_each_spans_hint(cli, tmp_path):
    """The known bug: the short view kept the first span's hint only. Every covered SGLang
    release (a Kimi contract without a version): 0.5.10, 0.5.11..0.5.12 and 0.5.13..0.5.23
    each feed another input, each with its own fix."""
    path = tmp_path / "kimi.yaml"
    path.write_text(KIMI.read_text().replace('version: ">=0.5.13"', 'version: ">=0.5.0"'))
    res = cli("check", path, "--checks", "layout")
    assert res.returncode == 1 and first(res).startswith("FAILED: ")
    out = folded(res.stdout)
    assert out.count("EC501 layout-mismatch") == 1  # one entry for the code
    for span in ("SGLang 0.5.10 on", "SGLang 0.5.11..0.5.12 on", "SGLang 0.5.13 on"):
        assert f"hint: {span} KimiK25ForConditionalGeneration" in out, span
    assert "also: the draft's fc is trained on embed" in out
    assert "eagle-contract explain EC501" in out
    full = cli("check", path, "--checks", "layout", "-v")
    assert folded(full.stdout).count("EC501 layout-mismatch") == 3  # one per span, in full


def test_validate_prints_its_verdict_first(cli, contract, tmp_path):
    """validate leads with its verdict as the other commands do, then one line per valid
    contract; the problems of an invalid one follow on stderr, after the verdict."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("contract: x\nversion: 1\ntarget: {num_hidden_layers: eight}\n")
    good = cli("validate", contract)
    assert good.returncode == 0 and first(good) == "ok: 1 contract(s) valid", good.stdout
    assert good.stdout.splitlines()[1:] == [f"{contract}: valid"]
    both = cli("validate", contract, bad)
    assert both.returncode == 2, both.stdout
    assert first(both) == "FAILED: 1 of 2 contract(s) invalid (the problems on stderr)"
    assert f"{contract}: valid" in both.stdout and f"{bad}:3:10:" in both.stderr
    quiet = cli("validate", contract, "-q")
    assert quiet.returncode == 0 and quiet.stdout.splitlines() == ["ok: 1 contract(s) valid"]
    checked = cli("validate", "--check", "--sample", "all", contract)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    assert lines[0] == "valid: 1 contract(s), each checked below on its own shards", lines
    assert any(line.startswith("ok: ") for line in lines[1:])  # check's own verdict
