"""Issue 22, item 2: whatever a shard holds is checked before a model runs on it.

Each class of model input that a target cannot take (ids outside the vocabulary, negative
ids, a sequence past the model's positions, an empty sequence, a mask or slot of another
length, ids that are not integers, non-finite states) gets the finding it gets without a
model, and every family that needs the model skips that shard and says so (EC009): in the
CLI's text and JSON, in `identify`, and as a skipped pytest item. Driven from outside, on
the demo's real shards and its real tiny target model.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from pytest_eagle_contract.shells import demo

CONTRACT = demo.shipped_contract()
T = 101  # rows of the edited shard


def _edit(name: str, data: dict) -> None:
    ids, mask = data["input_ids"], data["loss_mask"]
    if name == "id-past-vocabulary":
        ids[5] = 100_000
    elif name == "negative-id":
        ids[5] = -3
    elif name == "past-max-positions":
        n = 4097  # the demo target's max_position_embeddings is 4096
        data["input_ids"] = torch.randint(0, 512, (n,))
        data["loss_mask"] = torch.ones(n, dtype=torch.int64)
        for key in ("aux_hidden_state", "hidden_state"):
            data[key] = data[key][:, :1].expand(1, n, data[key].shape[-1]).contiguous()
    elif name == "empty-sequence":
        data["input_ids"], data["loss_mask"] = ids[:0], mask[:0]
        for key in ("aux_hidden_state", "hidden_state"):
            data[key] = data[key][:, :0]
    elif name == "mask-of-another-length":
        data["loss_mask"] = torch.ones(len(ids) + 49, dtype=torch.int64)
    elif name == "float-ids":
        data["input_ids"] = ids.float()
    elif name == "nan-ids":
        data["input_ids"] = ids.float()
        data["input_ids"][3] = float("nan")
    elif name == "uint64-ids":
        data["input_ids"] = ids.to(torch.uint64)
    elif name == "non-finite-state":
        data["aux_hidden_state"][0, 7, 3] = float("inf")
    else:  # pragma: no cover
        raise AssertionError(name)


# class -> the finding the shard gets without a model (the no-model families' code)
CLASSES = {
    "id-past-vocabulary": "EC301",
    "negative-id": "EC301",
    "past-max-positions": None,  # no contract bound is broken: only the model's
    "empty-sequence": "EC205",
    "mask-of-another-length": "EC202",
    "float-ids": "EC201",
    "nan-ids": "EC201",
    "uint64-ids": "EC201",  # the contract says int64; the model may still run on them
    "non-finite-state": "EC304",
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    demo.write_demo_shards(root, shards=2, save_target=True)
    return root


def _shard(world, tmp_path, name):
    folder = tmp_path / "shards" / "rows_0-2000"
    folder.mkdir(parents=True)
    data = torch.load(world / "good" / "rows_0-2000" / "data_0.ckpt", weights_only=True)
    _edit(name, data)
    path = folder / "data_0.ckpt"
    torch.save(data, path)
    return path


def no_traceback(res):
    assert "Traceback" not in res.stdout + res.stderr, res.stdout + res.stderr
    assert res.returncode in (0, 1, 2), res.stdout + res.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CLASSES))
def test_check_with_the_target_gives_the_no_model_finding_and_says_the_model_did_not_run(
    world, tmp_path, cli, name
):
    path = _shard(world, tmp_path, name)
    report = tmp_path / "report.json"
    res = cli(
        "check",
        CONTRACT,
        path,
        "--target-model",
        world / "target",
        "--reference-capture",
        "--json",
        report,
    )
    no_traceback(res)
    findings = json.loads(report.read_text())["findings"]
    codes = {f["code"] for f in findings if f["severity"] == "error"}
    expected = CLASSES[name]
    if expected is not None:
        assert expected in codes, res.stdout
    if name == "uint64-ids":  # ids inside the vocabulary: the model runs, nothing skipped
        assert "EC009" not in res.stdout, res.stdout
        return
    skipped = [f["message"] for f in findings if f["code"] == "EC009"]
    assert any(m.startswith("evidence did not run: ") for m in skipped), res.stdout
    if name != "non-finite-state":  # the layout's capture compares no states
        assert any(m.startswith("layout's reference capture did not run") for m in skipped)
    assert all(f["severity"] == "warning" for f in findings if f["code"] == "EC009")
    assert "IndexError" not in res.stdout + res.stderr
    last = res.stdout.strip().splitlines()[0]  # the verdict, first
    assert not last.startswith("ok"), last  # "ok" only when every check that applies ran
    assert "did not run (EC009" in last


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["id-past-vocabulary", "negative-id", "empty-sequence", "float-ids", "nan-ids"]
)
def test_identify_refuses_what_the_target_cannot_run_on(world, tmp_path, cli, name):
    path = _shard(world, tmp_path, name)
    res = cli("identify", path, "--target-model", world / "target")
    no_traceback(res)
    assert res.returncode == 1
    # without a contract, an id past the embedding says the shard is not this target's
    code = "EC605" if name == "id-past-vocabulary" else CLASSES[name]
    assert "no reference capture" in res.stderr and code in res.stderr


@pytest.mark.slow
def test_uint64_ids_past_two_to_the_63_are_out_of_the_vocabulary(world, tmp_path, cli):
    path = _shard(world, tmp_path, "uint64-ids")
    data = torch.load(path, weights_only=True)
    data["input_ids"][4] = torch.tensor(2**64 - 1, dtype=torch.uint64)
    torch.save(data, path)
    res = cli("identify", path, "--target-model", world / "target")
    no_traceback(res)
    assert res.returncode == 1 and "EC301" in res.stderr


@pytest.mark.slow
def test_pytest_skips_the_model_item_with_the_reason(world, tmp_path, pytester):
    path = _shard(world, tmp_path, "id-past-vocabulary")
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-rs",
        "--eagle-contract",
        str(CONTRACT),
        "--eagle-shards",
        str(path.parent.parent),
        "--eagle-target-model",
        str(world / "target"),
    )
    out = result.stdout.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out, out
    assert "EC301" in out
    assert "SKIPPED" in out and "EC009 evidence did not run" in out, out
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 1 and outcomes.get("skipped", 0) >= 1


@pytest.mark.slow
def test_a_good_shard_runs_every_model_family_and_says_ok(world, tmp_path, cli):
    shards = tmp_path / "good"
    shutil.copytree(world / "good", shards)
    res = cli("check", CONTRACT, shards, "--target-model", world / "target", "--reference-capture")
    no_traceback(res)
    assert res.returncode == 0, res.stdout
    assert "EC009" not in res.stdout
    assert res.stdout.strip().splitlines()[0].startswith("ok:")
