"""Issue 22: classes of hostile input found by the sweep after the default paths were safe,
each tried on every command that reads it.

- a packed dtype torch stores but cannot widen (``float4_e2m1fn_x2``) in any tensor;
- a folder tree deeper than Python's recursion limit (3.11's ``rglob`` and ``os.walk``
  recurse once per level).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from pytest_eagle_contract.shells import demo

CONTRACT = demo.shipped_contract()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("demo")
    demo.write_demo_shards(root, shards=2, save_target=True)
    return root


def _clean(res) -> None:
    out = res.stdout + res.stderr
    assert "Traceback" not in out and "RecursionError" not in out, out[-3000:]
    assert res.returncode in (0, 1, 2), out[-3000:]


def _packed(t: torch.Tensor) -> torch.Tensor:
    """A float4_e2m1fn_x2 tensor of ``t``'s shape (one byte holds two values)."""
    return torch.zeros(t.shape, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)


@pytest.mark.slow
@pytest.mark.parametrize("key", ["input_ids", "loss_mask", "hidden_state", "extra"])
def test_a_packed_dtype_in_any_tensor_is_ec001_on_every_command(world, tmp_path, cli, key):
    folder = tmp_path / "shards" / "rows_0-2000"
    folder.mkdir(parents=True)
    data = torch.load(world / "good" / "rows_0-2000" / "data_0.ckpt", weights_only=True)
    data[key] = _packed(data.get(key, torch.zeros(4)))
    path = folder / "data_0.ckpt"
    torch.save(data, path)
    target = ("--target-model", world / "target")
    check = cli("check", CONTRACT, path, *target, "--reference-capture")
    _clean(check)
    assert check.returncode == 1 and "EC001" in check.stdout
    assert "float4_e2m1fn_x2" in check.stdout
    inspect = cli("inspect", path)
    _clean(inspect)
    assert inspect.returncode == 1 and "EC001" in inspect.stdout + inspect.stderr
    for args in (
        ("identify", path, *target),
        ("audit", CONTRACT, folder.parent),
        ("infer", folder.parent, "--num-layers", "8", "-o", tmp_path / "c.yaml"),
    ):
        res = cli(*args)
        _clean(res)
        assert res.returncode in (1, 2), (args, res.stdout, res.stderr)


@pytest.fixture
def deep(tmp_path: Path):
    """A folder 1,100 levels deep, removed level by level afterwards (pytest's own clean-up
    of its temporary folders recurses)."""
    top = tmp_path / "deep"
    yield top
    cwd = Path.cwd()
    try:
        os.chdir(top)
        depth = 0
        while os.path.isdir("d"):
            os.chdir("d")
            depth += 1
        for name in os.listdir("."):
            os.remove(name)
        for _ in range(depth):
            os.chdir("..")
            os.rmdir("d")
    finally:
        os.chdir(cwd)


@pytest.mark.slow
def test_a_folder_tree_past_the_recursion_limit_is_walked(world, tmp_path, cli, deep):
    top = deep
    # 1,100 levels (Python's default recursion limit is 1,000); os.makedirs recurses too,
    # so the levels are made one by one, each relative to the last
    cwd = Path.cwd()
    top.mkdir()
    os.chdir(top)
    try:
        for _ in range(1100):
            os.mkdir("d")
            os.chdir("d")
        shutil.copyfile(world / "good" / "rows_0-2000" / "data_0.ckpt", "data_0.ckpt")
    finally:
        os.chdir(cwd)
    check = cli("check", CONTRACT, top)
    _clean(check)
    assert check.returncode == 0 and "on 1 shard(s)" in check.stdout, check.stdout
    audit = cli("audit", CONTRACT, top)
    _clean(audit)
    assert "audit of 1 shard(s)" in audit.stdout
    for args in (
        ("inspect", top),
        ("infer", top, "--num-layers", "8", "-o", tmp_path / "c.yaml"),
        ("check", CONTRACT, world / "good", "--captures", top),
    ):
        res = cli(*args)
        _clean(res)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["model.norm.weight", "model.layers.0.mlp.up_proj.weight"])
def test_a_packed_dtype_in_the_target_model_is_a_usage_error(world, tmp_path, cli, name):
    from safetensors.torch import load_file, save_file

    target = tmp_path / "target"
    shutil.copytree(world / "target", target)
    weights = load_file(target / "model.safetensors")
    weights[name] = _packed(weights[name])
    save_file(weights, target / "model.safetensors", metadata={"format": "pt"})
    shard = world / "good" / "rows_0-2000" / "data_0.ckpt"
    for args in (
        ("check", CONTRACT, shard, "--target-model", target, "--reference-capture"),
        ("identify", shard, "--target-model", target),
    ):
        res = cli(*args)
        _clean(res)
        assert res.returncode == 2 and f"target model {target}" in res.stderr, res.stderr


@pytest.mark.parametrize("key", ["target.model", "serving.draft_config", "training.shards"])
def test_a_contract_path_no_file_system_holds_is_a_located_usage_error(tmp_path, cli, key):
    section, name = key.split(".")
    long = "x" * 300
    lines = []
    for line in CONTRACT.read_text().splitlines():
        if name == "shards" and line.startswith("  shards:"):
            line = f"  shards: {long}"
        lines.append(line)
        if name != "shards" and line.startswith(f"{section}:"):
            lines.append(f"  {name}: {long}")
    text = "\n".join(lines) + "\n"
    path = tmp_path / "c.yaml"
    path.write_text(text)
    for args in (("check", path), ("check", path, "--sharpness"), ("audit", path)):
        res = cli(*args)
        _clean(res)
        assert res.returncode == 2 and f"{key}: not a path" in res.stderr, (args, res.stderr)
