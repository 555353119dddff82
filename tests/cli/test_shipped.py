"""The shipped contracts and the built-in demo, run as a user would."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from pytest_eagle_contract.shards import synthetic
from pytest_eagle_contract.shards.writing import write_shard

CONTRACTS = Path(__file__).parents[2] / "contracts"


@pytest.mark.slow
def test_demo_command_passes_good_and_catches_the_bug(tmp_path, cli):
    res = cli("demo", "--out", tmp_path / "demo", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "ok: 50 checks on 12 shard(s) passed" in out  # sharpness included, as in pytest
    assert "FAILED: 36 finding(s) [EC401]" in out
    assert "hint: slot 0 looks like the embedding" in out
    assert "the good set passed and the bug was caught" in out
    # with the target's weights (saved by the demo) the bug is named, not only measured:
    # each code once, with its count (issue 40 item 3: the short view)
    assert "EC601 embed-identity: 12 findings, slot 0 in 12 shards" in out
    assert "  slot 0 is declared residual:2 but equals embed_tokens.weight" in out
    assert "EC604 slot-identity: 36 findings, slots 0, 1, 2 in 12 shards" in out
    assert "training side: reference capture of the target on a sampled shard" in out
    assert "slot 0 = embed (declared residual:2)" in out
    assert "the buggy set's draft accepts" in out  # the probe step: SGLang's layout costs
    # nothing twice: the second check of the buggy set names the EC401 findings it repeats
    assert out.count("EC401 norm-out-of-bounds: 36 findings") == 1
    assert "EC401 norm-out-of-bounds: the 36 findings above again" in out
    assert "MLX" not in out  # EC501's engine rows: those that differ from SGLang's only
    assert "other engines that feed another input with these ids:" in out
    assert "17 more engine row(s) refuse these ids or feed what the contract's engine" in out
    assert "Writing model shards" not in res.stderr  # transformers' bar is off for the call
    assert len(out.splitlines()) < 90  # 132 before issue 40
    folder = str(tmp_path)  # a line naming the test's own folder is as wide as its name
    wide = [line for line in out.splitlines() if len(line) > 120 and folder not in line]
    assert all(line.startswith("demo:") for line in wide), wide  # the closing verdict
    # its contract beside its shards, checking them from anywhere (no checkout, no copy)
    beside = tmp_path / "demo" / "demo-tiny-llama-eagle3.yaml"
    assert f"{beside}: the contract the checks below run" in out
    assert (tmp_path / "demo" / "contract-v1.schema.json").is_file()  # its $schema line's
    assert beside.read_text().splitlines()[0].endswith("$schema=contract-v1.schema.json")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    res = cli("check", beside, "--sample", "2", "--no-sharpness", cwd=elsewhere)
    assert res.returncode == 0 and "on 2 shard(s) passed" in res.stdout, res.stdout
    # and it ends with the next command, which runs on its output
    *_, header, command = out.splitlines()
    assert header.startswith("next: ") and "docs/first-contract.md" in header
    res = cli(*shlex.split(command.strip())[1:], cwd=elsewhere)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (elsewhere / "contracts" / "mine.yaml").is_file()


@pytest.mark.slow
def test_kimi_contract_passes_kimi_like_shards(tmp_path, cli):
    for seed in range(2):
        ids, mask, slots = synthetic.kimi_like_sample(seed=seed)
        write_shard(tmp_path, "speculators-v1", seed, ids, mask, slots)
    res = cli(
        "check",
        CONTRACTS / "kimi-k2.5-eagle3.yaml",
        tmp_path,
        "--sample",
        "all",
        "--checks",
        "structure,values,norms",
    )
    assert res.returncode == 0, res.stdout
    assert "on 2 shard(s) passed" in res.stdout


@pytest.mark.slow
def test_kimi_contract_catches_a_shifted_capture(tmp_path, cli):
    medians = (37.1650, 174.3977, 111.3359, 150.0)  # embed dropped, all shifted by one
    ids, mask, slots = synthetic.kimi_like_sample(seed=3, medians=medians)
    write_shard(tmp_path, "speculators-v1", 0, ids, mask, slots)
    res = cli("check", CONTRACTS / "kimi-k2.5-eagle3.yaml", tmp_path, "--checks", "norms")
    assert res.returncode == 1
    assert "EC401" in res.stdout
