"""Issue 13: ``inspect`` over many shards (files and folders) on every core, in input
order, each report the same as the one-file command gives."""

from __future__ import annotations

import json

import pytest
import shardgen


def _set(tmp_path, n=4):
    root = tmp_path / "set"
    return root, shardgen.write_good(root, "specforge", range(n))


@pytest.mark.slow
def test_many_shards_in_input_order_whatever_the_workers(tmp_path, cli):
    root, paths = _set(tmp_path)
    args = ["inspect", paths[2], root, paths[0], "--json"]
    pooled = cli(*args, "--workers", "2")
    alone = cli(*args, "--workers", "1")
    assert pooled.returncode == alone.returncode == 0, pooled.stderr
    reports = json.loads(pooled.stdout)
    assert [r["file"] for r in reports] == list(map(str, [paths[2], *paths, paths[0]]))
    assert reports == json.loads(alone.stdout)
    one = cli("inspect", paths[1], "--json")
    assert json.loads(one.stdout) == reports[2]  # one file: one object, as before
    text = cli("inspect", root, "--workers", "2")
    blocks = text.stdout.split("\n\n")
    assert [b.splitlines()[0].split()[0] for b in blocks] == list(map(str, paths))
    single = cli("inspect", paths[3])
    assert blocks[3].rstrip("\n") == single.stdout.rstrip("\n")


@pytest.mark.slow
def test_an_unreadable_shard_among_many_is_named_in_its_place(tmp_path, cli):
    root, paths = _set(tmp_path, 2)
    bad = paths[0].parent / "data_0b.ckpt"  # between the two in natural order
    bad.write_bytes(b"not a shard at all")
    res = cli("inspect", root, "--json", "--workers", "2")
    assert res.returncode == 1
    reports = json.loads(res.stdout)
    assert [r["file"] for r in reports] == [str(paths[0]), str(bad), str(paths[1])]
    assert reports[1]["error"]["code"].startswith("EC00") and "slots" in reports[2]
    assert f"{bad}: EC00" in res.stderr
    text = cli("inspect", root, "--workers", "2")
    assert text.returncode == 1 and str(paths[1]) in text.stdout and str(bad) not in text.stdout


def test_a_folder_without_shards_or_no_path_is_a_usage_error(tmp_path, cli):
    (tmp_path / "empty").mkdir()
    assert cli("inspect", tmp_path / "empty").returncode == 2
    assert cli("inspect").returncode == 2
    assert cli("inspect", tmp_path / "set", "--workers", "0").returncode == 2
