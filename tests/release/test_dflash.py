"""DFlash drafts (issue 38): ``method:`` in a contract, ``resolve --method dflash`` per engine,
guessed tap lists (EC522) and vLLM's unshifted taps (EC516), from the command line.

The draft configs are shaped as SpecForge writes them: ``configs/qwen3-8b-dflash.json``
(sgl-project/SpecForge at b3d2401f: no tap list, ``num_hidden_layers`` 5,
``num_target_layers`` 36) and ``configs/qwen3.5-27b-dflash.json`` (at 95d22a7c: its taps under
``dflash_config.target_layer_ids``). The expected layers are computed here from the rules as
docs/dflash.md states them (tap t = the output of layer t = residual:t+1; SGLang's fallback
spreads n taps from 1 to L - 3), not copied from the tool's output.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serving_cases import resolve_json

# SpecForge configs/qwen3-8b-dflash.json (b3d2401f), the keys resolve reads
NO_TAPS = {
    "architectures": ["DFlashDraftModel"],
    "block_size": 16,
    "hidden_size": 4096,
    "model_type": "qwen3",
    "num_hidden_layers": 5,
    "num_target_layers": 36,
    "vocab_size": 151936,
}
# SpecForge configs/qwen3.5-27b-dflash.json (95d22a7c)
LISTED = {
    "architectures": ["DFlashDraftModel"],
    "block_size": 16,
    "dflash_config": {"mask_token_id": None, "target_layer_ids": [3, 15, 31, 47, 59]},
    "hidden_size": 5120,
    "model_type": "qwen3",
    "num_hidden_layers": 5,
    "num_target_layers": 64,
    "vocab_size": 248320,
}


def spread(num_layers: int, n: int) -> list[int]:
    """n taps spread evenly from layer 1 to L - 3, rounded (docs/dflash.md)."""
    return [round(1 + i * (num_layers - 4) / (n - 1)) for i in range(n)]


def outputs_of(taps: list[int]) -> list[str]:
    return [f"residual:{t + 1}" for t in taps]


def config(tmp_path: Path, data: dict, name: str = "draft") -> Path:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(data, indent=2))
    return d


def dflash(cli, *args: object):
    return resolve_json(cli, "--method", "dflash", *args)


def test_sglang_reads_the_listed_taps_as_layer_outputs(cli, tmp_path):
    res, out = dflash(
        cli, "--engine", "sglang", "--version", "0.5.23", "--arch", "Qwen3ForCausalLM",
        "--num-layers", 64, "--draft-config", config(tmp_path, LISTED),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert out["layers"] == outputs_of([3, 15, 31, 47, 59])
    assert out["problems"] == [] and out["method"] == "dflash"
    assert "set_dflash_layers_to_capture" in out["source"]


@pytest.mark.parametrize("version", ["0.5.11", "0.5.18", "0.5.23"])
def test_sglang_guesses_a_missing_tap_list_ec522(cli, tmp_path, version):
    res, out = dflash(
        cli, "--engine", "sglang", "--version", version, "--arch", "Qwen3ForCausalLM",
        "--num-layers", 36, "--draft-config", config(tmp_path, NO_TAPS),
    )  # fmt: skip
    guessed = spread(36, 5)
    assert res.returncode == 1
    assert out["layers"] == outputs_of(guessed)
    [problem] = out["problems"]
    assert problem["code"] == "EC522"
    assert "build_target_layer_ids(L=36, n=5)" in problem["message"]
    assert str(guessed) in problem["message"] and "trained on other layers" in problem["message"]


def test_sglang_before_dflash_and_out_of_range_taps_are_refused(cli, tmp_path):
    res, out = dflash(
        cli, "--engine", "sglang", "--version", "0.5.10", "--num-layers", 36, "--ids", 1
    )
    assert res.returncode == 2 and out["layers"] is None and "no DFlash" in out["refused"]
    res, out = dflash(cli, "--engine", "sglang", "--num-layers", 36, "--ids", 1, 36)
    assert res.returncode == 2 and "outside [0, 36)" in out["refused"]


@pytest.mark.parametrize("version", ["0.22.0", "0.34.0"])
def test_vllm_adds_one_from_0_22(cli, tmp_path, version):
    res, out = dflash(
        cli, "--engine", "vllm", "--version", version, "--arch", "Qwen3ForCausalLM",
        "--num-layers", 64, "--draft-config", config(tmp_path, LISTED),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert out["layers"] == outputs_of([3, 15, 31, 47, 59]) and out["problems"] == []


def test_vllm_0_21_feeds_the_layer_before_ec516(cli, tmp_path):
    res, out = dflash(
        cli, "--engine", "vllm", "--version", "0.21.0", "--arch", "Qwen3ForCausalLM",
        "--num-layers", 64, "--draft-config", config(tmp_path, LISTED),
    )  # fmt: skip
    assert res.returncode == 1
    assert out["layers"] == [f"residual:{t}" for t in (3, 15, 31, 47, 59)]
    assert [p["code"] for p in out["problems"]] == ["EC516"]


def test_vllm_without_taps(cli, tmp_path):
    """No tap list: vLLM feeds its EAGLE-3 default (2, L//2, L-3) while the DFlash fc takes
    one state per draft layer: a 5-layer draft is refused, a 3-layer one guessed (EC522)."""
    res, out = dflash(
        cli, "--engine", "vllm", "--arch", "Qwen3ForCausalLM", "--num-layers", 36,
        "--draft-config", config(tmp_path, NO_TAPS),
    )  # fmt: skip
    assert res.returncode == 2 and "takes 5" in out["refused"]
    three = config(tmp_path, {**NO_TAPS, "num_hidden_layers": 3}, "three")
    res, out = dflash(
        cli, "--engine", "vllm", "--arch", "Qwen3ForCausalLM", "--num-layers", 36,
        "--draft-config", three,
    )  # fmt: skip
    assert res.returncode == 1
    assert out["layers"] == ["residual:2", "residual:18", "residual:33"]
    assert [p["code"] for p in out["problems"]] == ["EC522"]
    res, out = dflash(
        cli, "--engine", "vllm", "--version", "0.19.0", "--num-layers", 36, "--ids", 1
    )
    assert res.returncode == 2 and "reads no DFlash tap key" in out["refused"]


def test_llamacpp_converts_and_refuses_a_missing_list(cli, tmp_path):
    res, out = dflash(
        cli, "--engine", "llama.cpp", "--num-layers", 64, "--draft-config", config(tmp_path, LISTED)
    )
    assert res.returncode == 0, res.stderr
    assert out["layers"] == outputs_of([3, 15, 31, 47, 59])
    res, out = dflash(
        cli,
        "--engine",
        "llama.cpp",
        "--num-layers",
        36,
        "--draft-config",
        config(tmp_path, NO_TAPS, "n"),
    )
    assert res.returncode == 2 and "requires target_layers" in out["refused"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--engine", "sglang", "--method", "pard", "--ids", "1"], "no tap rule: a PARD draft"),
        (["--engine", "sglang", "--method", "dflash"], "needs --draft-config"),
        (
            ["--engine", "sglang", "--method", "dflash", "--ids", "1", "--want", "residual:2"],
            "--want",
        ),
    ],
)
def test_resolve_usage_errors(cli, args, words):
    res = cli("resolve", "--num-layers", 36, *args)
    assert res.returncode == 2 and words in res.stderr and "Traceback" not in res.stderr


CONTRACT = """\
contract: dflash-tiny
version: 1
method: {method}
target: {{arch: LlamaForCausalLM, num_hidden_layers: 8, hidden_size: 64, vocab_size: 512}}
{training}serving:
  engine: {engine}
  version: "{version}"
  draft_config: draft
"""
# a mask token id inside the contract's vocabulary of 512 (EC527 otherwise)
TINY_DRAFT = {
    **NO_TAPS,
    "hidden_size": 64,
    "num_hidden_layers": 3,
    "num_target_layers": 8,
    "mask_token_id": 500,
}


def slots(layers: list[str]) -> str:
    return "training:\n  slots:\n" + "".join(
        f"    - {{layer: {x}}}\n" for x in [*layers, "final_norm"]
    )


def check(cli, tmp_path: Path, draft: dict, training: str, method: str = "dflash",
          engine: str = "sglang", version: str = "0.5.23"):  # fmt: skip
    config(tmp_path, draft)
    path = tmp_path / "c.yaml"
    path.write_text(
        CONTRACT.format(method=method, training=training, engine=engine, version=version)
    )
    res = cli("check", path, "--checks", "layout", "--json")
    assert "Traceback" not in res.stderr, res.stderr
    return res


def found(res) -> list[tuple[str, str]]:
    return [(f["code"], f["severity"]) for f in json.loads(res.stdout)["findings"]]


def test_check_guess_that_matches_training_passes(cli, tmp_path):
    trained = outputs_of(spread(8, 3))
    res = check(cli, tmp_path, TINY_DRAFT, slots(trained))
    assert res.returncode == 0, res.stdout
    assert found(res) == []


def test_check_guess_against_other_trained_layers_is_ec522_error(cli, tmp_path):
    trained = [f"residual:{t + 2}" for t in spread(8, 3)]  # one layer deeper each
    res = check(cli, tmp_path, TINY_DRAFT, slots(trained))
    assert res.returncode == 1
    assert found(res) == [("EC522", "error")]
    [f] = json.loads(res.stdout)["findings"]
    assert f["expected"] == ", ".join(trained)
    assert f["found"] == ", ".join(outputs_of(spread(8, 3)))
    assert str([t + 1 for t in spread(8, 3)]) in f["hint"]


def test_check_guess_without_training_is_ec522_warning(cli, tmp_path):
    res = check(cli, tmp_path, TINY_DRAFT, "")
    assert res.returncode == 0
    assert found(res) == [("EC522", "warning")]


def test_check_listed_taps_against_training(cli, tmp_path):
    listed = {**TINY_DRAFT, "dflash_config": {"target_layer_ids": [1, 3, 5]}}
    res = check(cli, tmp_path, listed, slots(outputs_of([1, 3, 5])))
    assert res.returncode == 0 and found(res) == []
    res = check(cli, tmp_path, listed, slots(outputs_of([2, 4, 6])))
    assert res.returncode == 1 and found(res) == [("EC501", "error")]


def test_check_vllm_0_21_is_ec516(cli, tmp_path):
    listed = {**TINY_DRAFT, "dflash_config": {"target_layer_ids": [1, 3, 5]}}
    res = check(
        cli, tmp_path, listed, slots(outputs_of([1, 3, 5])), engine="vllm", version="0.21.0"
    )
    assert res.returncode == 1
    assert ("EC516", "error") in found(res) and ("EC501", "error") in found(res)
    res = check(
        cli, tmp_path, listed, slots(outputs_of([1, 3, 5])), engine="vllm", version="0.22.0"
    )
    assert res.returncode == 0 and found(res) == []


@pytest.mark.parametrize(
    ("method", "engine", "words"),
    [
        ("dflsh", "sglang", "c.yaml:3:1: method: unknown method 'dflsh' (did you mean 'dflash'?)"),
        (  # TensorRT-LLM serves DFlash (source-read); AutoDeploy does not
            "dflash",
            "trtllm-autodeploy",
            "serving.engine: trtllm-autodeploy: no DFlash tap rules are read here",
        ),
        ("pard", "sglang", "method: PARD: no tap rule: a PARD draft"),
    ],
)
def test_contract_method_errors_exit_2(cli, tmp_path, method, engine, words):
    res = check(cli, tmp_path, TINY_DRAFT, "", method=method, engine=engine)
    assert res.returncode == 2 and words in res.stderr


def test_eagle3_is_the_default_method(cli, tmp_path):
    """A contract without ``method:`` is EAGLE-3's: the same draft folder is read by the
    EAGLE-3 keys (none here: the engine's default ids, EC507)."""
    config(tmp_path, TINY_DRAFT)
    path = tmp_path / "c.yaml"
    text = CONTRACT.format(method="eagle3", training="", engine="sglang", version="0.5.23")
    path.write_text(text.replace("method: eagle3\n", ""))
    res = cli("check", path, "--checks", "layout", "--json")
    assert "EC522" not in res.stdout and "Traceback" not in res.stderr


def test_rules_table_covers_the_read_releases():
    """The generated table (scripts/gen_dflash_rules.py, pinned here): every sglang release
    from 0.5.9 to 0.5.23 read; DFlash from 0.5.11, its fallback z-lab's formula throughout."""
    from pytest_eagle_contract.engines.dflash import _table

    data = _table()["sglang"]
    assert data["releases"][0] == "0.5.9" and data["releases"][-1] == "0.5.23"
    rows = data["rows"]
    assert rows[0]["since"] == "0.5.11" and rows[-1]["until"] is None
    assert {r["fallback"] for r in rows} == {"zlab"}
    assert all(r["keys"] == ["dflash_config.target_layer_ids", "target_layer_ids"] for r in rows)
    assert all(r["archs"]["LlamaForCausalLM"] == "plus1" for r in rows)


@pytest.mark.slow
def test_infer_detects_a_dflash_draft_then_check(cli, tmp_path):
    """``infer --draft`` with a DFlash draft config writes ``method: dflash``; the drafted
    contract's layout check then passes where the shards hold the guessed taps and fails
    (EC522) where they hold the taps one layer deeper."""
    import torch
    import yaml

    from pytest_eagle_contract.shards.writing import save, shard_dict, shard_name

    guessed = outputs_of(spread(8, 3))
    deeper = [f"residual:{t + 2}" for t in spread(8, 3)]
    draft = config(tmp_path, TINY_DRAFT)
    for name, layers in (("good", guessed), ("shifted", deeper)):
        root = tmp_path / name
        g = torch.Generator().manual_seed(0)
        for i in range(3):
            ids = torch.randint(0, 64, (24,), generator=g)
            slots = [(torch.randn(24, 16, generator=g) * (k + 1)).bfloat16() for k in range(4)]
            mask = torch.ones(24, dtype=torch.long)
            save(root / shard_name("specforge", i), shard_dict("specforge", ids, mask, slots))
        contract = tmp_path / f"{name}.yaml"
        res = cli(
            "infer", root, "--layers", *layers, "final_norm", "--num-layers", 8,
            "--vocab-size", 512, "--arch", "LlamaForCausalLM", "--draft", draft, "-o", contract,
        )  # fmt: skip
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
        data = yaml.safe_load(contract.read_text())
        assert data["method"] == "dflash" and data["serving"]["engine"] == "sglang"
        check_res = cli("check", contract, "--checks", "layout", "--json")
        codes = [(f["code"], f["severity"]) for f in json.loads(check_res.stdout)["findings"]]
        if name == "good":
            assert check_res.returncode == 0 and codes == []
        else:
            assert check_res.returncode == 1 and codes == [("EC522", "error")]


def test_matrix_of_a_dflash_contract(cli, tmp_path):
    """``matrix`` answers a DFlash contract by the DFlash rules of every engine that serves
    it: the guessed taps are SGLang's spread on every DFlash release, and the taps that fix
    a row name the trained layers' outputs (t = layer - 1) where the engine adds 1."""
    deeper = [f"residual:{t + 2}" for t in spread(8, 3)]
    config(tmp_path, TINY_DRAFT)
    path = tmp_path / "c.yaml"
    path.write_text(
        CONTRACT.format(method="dflash", training=slots(deeper), engine="sglang", version="0.5.23")
    )
    res = cli("matrix", path, "--json")
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    out = json.loads(res.stdout)
    assert out["method"] == "dflash" and out["own_differs"] is True
    sglang = [r for r in out["rows"] if r["engine"] == "sglang"]
    assert sglang[0]["versions"][0] == "0.5.11" and sglang[-1]["versions"][-1] == "0.5.23"
    assert all(r["feeds"] == outputs_of(spread(8, 3)) for r in sglang)
    assert all(
        r["problems"] == ["EC522"] and r["fix"] == [t + 1 for t in spread(8, 3)] for r in sglang
    )
    trained = outputs_of(spread(8, 3))
    path.write_text(
        CONTRACT.format(method="dflash", training=slots(trained), engine="sglang", version="0.5.23")
    )
    res = cli("matrix", path, "--json")
    assert res.returncode == 0
    assert {r["verdict"] for r in json.loads(res.stdout)["rows"] if r["engine"] == "sglang"} == {
        "ok"
    }


def test_want_gives_the_taps_per_release_span(cli):
    """``resolve --method dflash --want``: the taps are the wanted layers less one wherever
    the engine adds 1 (SGLang; vLLM from 0.22.0); no one list serves vLLM across 0.21/0.22."""
    want = ["residual:2", "residual:10", "residual:34"]
    taps = [int(x.split(":")[1]) - 1 for x in want]
    for engine, version in (("sglang", ">=0.5.11"), ("vllm", ">=0.22.0")):
        res, out = resolve_json(
            cli, "--engine", engine, "--method", "dflash", "--num-layers", 36,
            "--version", version, "--want", *want,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert out["taps"] == taps and str(taps) in out["config_line"]
    res, out = resolve_json(
        cli, "--engine", "vllm", "--method", "dflash", "--num-layers", 36,
        "--version", ">=0.20.0", "--want", *want,
    )  # fmt: skip
    assert res.returncode == 1 and out["taps"] is None
    assert out["per_version"]["0.21.0"] == [t + 1 for t in taps]
    assert out["per_version"]["0.22.0"] == taps
