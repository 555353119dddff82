"""The shipped contracts and the built-in demo, run as a user would."""

from __future__ import annotations

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
    # with the target's weights (saved by the demo) the bug is named, not only measured
    assert "EC601 embed-identity: slot 0 is declared residual:2 but equals" in out
    assert "EC604 slot-identity: slot 0 is declared residual:2 but is embed" in out
    assert "training side: reference capture of the target on a sampled shard" in out
    assert "slot 0 = embed (declared residual:2)" in out
    assert "the buggy set's draft accepts" in out  # the probe step: SGLang's layout costs


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
