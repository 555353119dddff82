"""Bad input gets a clear error or finding, the right exit code, and never a traceback."""

from __future__ import annotations

import os

import pytest
from conftest import no_traceback

from pytest_eagle_contract.shells import demo

CONTRACT = demo.shipped_contract()


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    demo.write_demo_shards(root, shards=2, save_target=True)
    return root


@pytest.mark.slow
def test_garbage_files_are_findings_and_the_run_goes_on(tmp_path, demo_dir, cli):
    folder = tmp_path / "rows_0-2000"
    folder.mkdir()
    (folder / "data_0.ckpt").write_text("hello\n")
    for i in range(1, 4):
        (folder / f"data_{i}.ckpt").write_bytes(os.urandom(200))
    (folder / "data_9.ckpt").write_bytes((demo_dir / "good/rows_0-2000/data_0.ckpt").read_bytes())
    res = cli("check", CONTRACT, tmp_path, "--sample", "all", "--checks", "structure")
    no_traceback(res)
    assert res.returncode == 1 and "on 5 shard(s)" in res.stdout
    assert "EC001 unreadable-file: not a torch file" in res.stdout
    assert "EC003" not in res.stdout  # garbage is not a pickle that asks to run code
    res = cli("inspect", folder / "data_0.ckpt")
    no_traceback(res)
    assert res.returncode == 1 and "EC001" in res.stderr


def test_serving_only_contract_is_linted(tmp_path, cli):
    path = tmp_path / "serving.yaml"
    path.write_text(
        "contract: s\nversion: 1\n"
        "target: {arch: LlamaForCausalLM, num_hidden_layers: 8, hidden_size: 64}\n"
        "serving: {engine: sglang, version: '0.5.14', aux_layer_ids: [1, 3, 40],\n"
        '  launch: "x --speculative-eagle-topk 1 --speculative-num-steps 1 '
        '--speculative-num-draft-tokens 16"}\n'
    )
    res = cli("check", path)
    assert res.returncode == 1
    assert "EC511 dropped-capture" in res.stdout and "EC512 serving-args" in res.stdout


def test_unparsable_launch_line_is_a_finding(demo_dir, cli):
    res = cli(
        "check",
        CONTRACT,
        demo_dir / "good",
        "--checks",
        "layout",
        "--serving-args",
        "python -m sglang.launch_server --dtype 'x",
    )
    no_traceback(res)
    assert res.returncode == 1 and "cannot be parsed: No closing quotation" in res.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--checks", "evidence"],
        ["--checks", "capture"],
        ["--reference-capture"],
        ["--json", "/nonexistent/folder/report.json"],
        ["--checks", ","],
    ],
)
def test_gate_that_would_check_nothing_is_a_usage_error(demo_dir, cli, args):
    res = cli("check", CONTRACT, demo_dir / "good", *args)
    no_traceback(res)
    assert res.returncode == 2 and "eagle-contract: error:" in res.stderr


def test_sharpness_takes_the_contract_alone(demo_dir, cli):
    res = cli("check", "--sharpness", CONTRACT, demo_dir / "good")
    assert res.returncode == 2 and "takes no shard PATH" in res.stderr


def test_infer_refuses_bad_layer_names_and_invalid_drafts(demo_dir, tmp_path, cli):
    res = cli("infer", demo_dir / "good", "--layers", "bogus", "x", "y", "z")
    no_traceback(res)
    assert res.returncode == 2 and "'bogus' is not a canonical layer" in res.stderr
    out = tmp_path / "c.yaml"
    res = cli(
        "infer",
        demo_dir / "good",
        "--layers",
        "residual:2",
        "residual:4",
        "residual:5",
        "final_norm",
        "--num-layers",
        "3",
        "-o",
        out,
    )
    assert res.returncode == 2 and "residual:4 is beyond the target's 3 layers" in res.stderr
    assert str(out) in res.stderr and not out.exists()


@pytest.mark.slow
def test_evidence_on_a_shard_of_another_vocabulary_is_ec301_and_the_model_does_not_run(
    demo_dir, tmp_path, cli
):
    import torch

    from pytest_eagle_contract.shards.writing import save

    data = torch.load(demo_dir / "good/rows_0-2000/data_0.ckpt", weights_only=True)
    data["input_ids"] = data["input_ids"] + 10_000
    save(tmp_path / "big" / "data_0.ckpt", data)
    res = cli(
        "check",
        CONTRACT,
        tmp_path / "big",
        "--target-model",
        demo_dir / "target",
    )
    no_traceback(res)
    assert res.returncode == 1 and "EC301" in res.stdout  # the finding it gets without a model
    assert "EC009 check-not-run: evidence did not run: input ids span" in res.stdout
    res = cli("identify", tmp_path / "big" / "data_0.ckpt", "--target-model", demo_dir / "target")
    no_traceback(res)
    assert res.returncode == 1 and "EC605" in res.stderr


@pytest.mark.slow
def test_identify_refuses_another_hidden_size(demo_dir, tmp_path, cli):
    import torch

    from pytest_eagle_contract.shards.writing import save

    data = torch.load(demo_dir / "good/rows_0-2000/data_0.ckpt", weights_only=True)
    data["aux_hidden_state"] = data["aux_hidden_state"].repeat(1, 1, 2)
    data["hidden_state"] = data["hidden_state"].repeat(1, 1, 2)
    save(tmp_path / "wide.ckpt", data)
    res = cli("identify", tmp_path / "wide.ckpt", "--target-model", demo_dir / "target")
    assert res.returncode == 1 and "hidden_size is 64" in res.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--eagle-sample", "0"], "--sample takes a positive number"),
        (["--eagle-sample", "abc"], "--sample takes a positive number"),
        (["--eagle-captures", "/nonexistent"], "does not exist"),
        (["--eagle-target-model", "/nonexistent"], "cannot read config.json"),
    ],
)
def test_plugin_bad_options_are_usage_errors(pytester, demo_dir, args, words):
    (pytester.path / "contracts").mkdir()
    (pytester.path / "contracts" / "demo.yaml").write_text(
        CONTRACT.read_text().replace("../eagle-demo/good", str(demo_dir / "good"))
    )
    result = pytester.runpytest("--eagle-contract", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{words}*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_small_usage_errors(tmp_path, demo_dir, cli):
    res = cli(
        "resolve",
        "--engine",
        "sglang",
        "--version",
        "notaversion",
        "--arch",
        "llama",
        "--num-layers",
        "32",
    )
    assert res.returncode == 2 and "'notaversion' is not an sglang version" in res.stderr
    (tmp_path / "empty").mkdir()
    res = cli("check", CONTRACT, demo_dir / "good", "--captures", tmp_path / "empty")
    assert res.returncode == 2 and "no capture files under" in res.stderr
    (tmp_path / "afile").write_text("x")
    res = cli("demo", "--out", tmp_path / "afile")
    assert res.returncode == 2 and "is a file, not a folder" in res.stderr
