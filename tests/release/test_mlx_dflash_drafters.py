"""mlx-vlm's other DFlash and DSpark drafters (issue 38): ``gemma4_dflash``, ``laguna_dflash``,
``gemma4_dspark``, ``deepseek_v4_dspark`` and 0.6.15's routing, from the command line, by the
rules ``scripts/gen_method_rules.py`` reads from mlx-vlm 0.6.15-0.7.10 (method_rules.json's
mlx rows; docs/dflash.md, docs/dspark.md).

The expected layers are computed here from the rules as the docs state them (tap t = the
output of layer t = residual:t+1), not copied from the tool's output.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serving_cases import resolve_json

READ = ["0.6.15", "0.6.16", "0.6.17", "0.7.0", "0.7.1", "0.7.2", "0.7.3", "0.7.4", "0.7.5",
        "0.7.6", "0.7.8", "0.7.9", "0.7.10"]  # fmt: skip
FROM_0_7 = READ[3:]
QWEN3_DEFAULT = [1, 8, 15, 22, 29]  # qwen3_dflash/config.py's default_factory
LAGUNA = {
    "model_type": "laguna",
    "num_hidden_layers": 3,
    "dflash_config": {"target_layer_ids": [2, 19, 37], "num_target_layers": 40, "block_size": 8},
}


def outputs_of(taps: list[int]) -> list[str]:
    return [f"residual:{t + 1}" for t in taps]


def config(tmp_path: Path, data: dict) -> Path:
    d = tmp_path / "draft"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(data))
    return d


def resolve(cli, tmp_path, method, data, arch, version="0.7.10", layers=40):
    return resolve_json(
        cli, "--method", method, "--engine", "mlx", "--version", version, "--arch", arch,
        "--num-layers", layers, "--draft-config", config(tmp_path, data),
    )  # fmt: skip


def folded(res) -> str:
    return " ".join((res.stdout + res.stderr).split())


# --- gemma4_dflash: a subclass of qwen3_dflash's config that only defaults mask_token_id


@pytest.mark.parametrize("version", READ)
def test_gemma4_dflash_reads_qwen3s_keys(cli, tmp_path, version):
    data = {"model_type": "gemma4", "dflash_config": {"target_layer_ids": [3, 20, 35]}}
    res, out = resolve(cli, tmp_path, "dflash", data, "gemma4", version)
    assert res.returncode == 0, res.stdout
    assert out["layers"] == outputs_of([3, 20, 35]) and out["problems"] == []
    assert "gemma4_dflash/__init__.py" in out["source"]


def test_gemma4_dflash_without_taps_guesses_qwen3s_default_ec522(cli, tmp_path):
    data = {"model_type": "gemma4", "dflash_config": {}}
    res, out = resolve(cli, tmp_path, "dflash", data, "gemma4")
    assert res.returncode == 1
    assert out["layers"] == outputs_of(QWEN3_DEFAULT)
    [problem] = out["problems"]
    assert problem["code"] == "EC522" and "gemma4_dflash/__init__.py" in problem["message"]


# --- laguna_dflash: dflash_config.target_layer_ids required, checked at load and bind


@pytest.mark.parametrize("version", FROM_0_7)
def test_laguna_dflash_reads_dflash_config_taps(cli, tmp_path, version):
    res, out = resolve(cli, tmp_path, "dflash", LAGUNA, "laguna", version)
    assert res.returncode == 0, res.stdout
    assert out["layers"] == outputs_of([2, 19, 37]) and out["problems"] == []
    assert "laguna_dflash/config.py" in out["source"]


@pytest.mark.parametrize(
    "change,words",
    [
        # the top-level key is not read: the config requires it under dflash_config
        (
            {"target_layer_ids": [2, 19, 37], "dflash_config": {"num_target_layers": 40}},
            "requires dflash_config.target_layer_ids",
        ),
        ({"dflash_config": {"target_layer_ids": [19, 2, 37]}}, "not strictly increasing"),
        ({"dflash_config": {"target_layer_ids": [2, 19]}}, "one tap per draft layer"),
        (
            {"dflash_config": {"target_layer_ids": [2, 19, 37], "num_target_layers": 48}},
            "num_target_layers 48 is not the target's 40 layers",
        ),
    ],
)
def test_laguna_dflash_refuses_what_its_config_rejects(cli, tmp_path, change, words):
    res, out = resolve(cli, tmp_path, "dflash", {**LAGUNA, **change}, "laguna")
    assert res.returncode == 2 and words in out["refused"]


@pytest.mark.parametrize("version", READ[:3])
def test_laguna_targets_before_0_7_capture_nothing(cli, tmp_path, version):
    res, out = resolve(cli, tmp_path, "dflash", LAGUNA, "laguna", version)
    assert res.returncode == 2 and "models/laguna captures no layer states" in out["refused"]


# --- DSpark: Gemma-4's drafter (routed by architectures) and DeepSeek-V4's (refused)

GEMMA4_DSPARK = {
    "model_type": "gemma4_text",
    "architectures": ["Gemma4DSparkModel"],
    "target_layer_ids": [5, 17, 29],
    "block_size": 7,
    "markov_rank": 64,
}


@pytest.mark.parametrize("version", FROM_0_7)
def test_gemma4_dspark_reads_flat_or_nested_taps(cli, tmp_path, version):
    nested = {**GEMMA4_DSPARK, "dflash_config": {"target_layer_ids": [4, 16]}}
    for data, taps in ((GEMMA4_DSPARK, [5, 17, 29]), (nested, [4, 16])):
        res, out = resolve(cli, tmp_path, "dspark", data, "gemma4", version)
        assert res.returncode == 0, res.stdout
        assert out["layers"] == outputs_of(taps)
        assert "gemma4_dspark/config.py" in out["source"]


def test_gemma4_dspark_before_0_7_is_not_routed_by_its_architecture(cli, tmp_path):
    res, out = resolve(cli, tmp_path, "dspark", GEMMA4_DSPARK, "gemma4", "0.6.17")
    assert res.returncode == 2 and "requires a dflash_config object" in out["refused"]


def test_deepseek_v4_dspark_capture_is_refused_with_the_reason(cli, tmp_path):
    data = {"model_type": "deepseek_v4_dspark", "target_layer_ids": [2, 20, 40]}
    res, out = resolve(cli, tmp_path, "dspark", data, "deepseek_v4", layers=43)
    assert res.returncode == 2
    assert "mean over the hyper-connection copies" in out["refused"]
    assert "deepseek_v4_dspark/config.py" in out["refused"]


def test_the_refusal_is_said_in_the_short_view(cli, tmp_path):
    d = config(tmp_path, {**LAGUNA, "dflash_config": {"target_layer_ids": [19, 2, 37]}})
    res = cli(
        "resolve", "--method", "dflash", "--engine", "mlx", "--arch", "laguna",
        "--num-layers", "40", "--draft-config", str(d),
    )  # fmt: skip
    assert res.returncode == 2 and "not strictly increasing" in folded(res)
