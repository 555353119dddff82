"""``eagle-contract inspect`` on a Kimi-K2.5-sized shard with the real statistics."""

from __future__ import annotations

import json

import pytest

from pytest_eagle_contract.shards import synthetic
from pytest_eagle_contract.shards.writing import write_shard


@pytest.fixture(scope="module")
def kimi_shard(tmp_path_factory):
    ids, mask, slots = synthetic.kimi_like_sample(seed=0)
    return write_shard(tmp_path_factory.mktemp("kimi"), "speculators-v1", 0, ids, mask, slots)


@pytest.mark.slow
def test_inspect_json_on_kimi_sized_shard(kimi_shard, cli):
    res = cli("inspect", kimi_shard, "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["format"] == "speculators-v1"
    slots = report["slots"]
    # the middle token is the bf16 rounding of a row scaled to the median: as close as
    # bf16 allows (steps of about 1e-5 to 1e-4 at these norms)
    medians = [s["norm"]["median"] for s in slots]
    assert medians == pytest.approx(list(synthetic.KIMI_MEDIANS), abs=2e-4)
    for s in slots:
        assert s["dtype"] == "bfloat16" and s["shape"] == [1281, 7168]
        assert s["norm"]["p5"] < s["norm"]["median"] < s["norm"]["p95"]
        assert set(s["norm"]) == {"mean", "median", "p5", "p95"}
    assert [s["guess"] for s in slots] == ["embedding-like", None, None, None]
    assert report["loss_mask"] == {"length": 1281, "sum": 1235, "dtype": "int64"}
    assert report["input_ids"]["length"] == 1281
    assert 0 <= report["input_ids"]["min"] <= report["input_ids"]["max"] < synthetic.KIMI_VOCAB


def test_inspect_text(kimi_shard, cli):
    res = cli("inspect", kimi_shard)
    assert res.returncode == 0
    lines = res.stdout.splitlines()
    assert "loss_mask: 1281 entries, 1235 of them 1" in lines
    slot_rows = [line for line in lines if line.strip().startswith(("0 ", "1 ", "2 ", "3 "))]
    assert len(slot_rows) == 4
    assert "1.0383" in slot_rows[0] and "embedding-like" in slot_rows[0]
    for row, median in zip(slot_rows[1:], synthetic.KIMI_MEDIANS[1:]):
        printed = float(row.split()[4])  # slot, source, dtype, mean, median, p5, p95, guess
        assert printed == pytest.approx(median, abs=2e-4) and "-" == row.split()[-1]


def test_post_norm_target_is_called_post_norm(tmp_path, cli):
    import shardgen

    (path,) = shardgen.write_good(tmp_path, "specforge", range(1))
    report = json.loads(cli("inspect", path, "--json").stdout)
    assert [s["guess"] for s in report["slots"]] == [None, None, None, "post-norm-like"]


@pytest.mark.slow
def test_inspect_unreadable_file(tmp_path, cli):
    bad = tmp_path / "data_0.pt"
    bad.write_bytes(b"not a shard at all")
    res = cli("inspect", bad)
    assert res.returncode == 1 and "EC00" in res.stderr
