"""``eagle-contract resolve`` from the command line, for every engine and the refusals."""

from __future__ import annotations

import json

import pytest


def resolve_json(cli, *args):
    res = cli("resolve", *map(str, args), "--json", "--source", "table")
    return res.returncode, json.loads(res.stdout) if res.stdout.strip() else None


@pytest.mark.parametrize(
    ("engine", "arch", "version", "ids", "layers"),
    [
        ("sglang", "LlamaForCausalLM", "0.5.23", [2, 30, 58], [3, 31, 59]),
        ("sglang", "deepseek_v3", "0.5.14", [2, 30, 58], [2, 30, 58]),
        ("sglang", "deepseek_v3", "0.5.9", [2, 30, 58], [3, 31, 59]),
        ("sglang", "KimiK25ForConditionalGeneration", "0.5.12", [2, 30, 58], [3, 31, 59]),
        ("sglang", "KimiK25ForConditionalGeneration", "0.5.13", [1, 29, 57], [2, 30, 58]),
        ("sglang", "Qwen3ForCausalLM", "0.5.23", None, [2, 30, 58]),
        ("sglang", "Qwen3ForCausalLM", "0.5.23", [58, 2, 30], [3, 31, 59]),
        ("sglang", "GptOssForCausalLM", "0.5.23", [1, 30, 61], [1, 30, 61]),
        ("sglang", "GptOssForCausalLM", "0.5.16", [1, 30, 59], [2, 31, 60]),
        ("sglang", "LlamaForCausalLM", "0.4.6", [5, 6, 7], [2, 30, 58]),
        ("vllm", None, None, [2, 30, 61], [2, 30, 61]),
        ("vllm", None, None, None, [2, 30, 58]),
        ("specforge", "deepseek_v3", None, None, [2, 30, 58]),
        ("speculators-v1", None, None, None, [3, 31, 59, 61]),
        ("speculators", None, None, None, [2, 30, 58, 61]),
        ("eagle", None, None, None, [2, 30, 58]),
    ],
)
def test_resolve_layers(cli, engine, arch, version, ids, layers):
    args = ["--engine", engine, "--num-layers", 61]
    args += ["--arch", arch] if arch else []
    args += ["--version", version] if version else []
    args += ["--ids", *ids] if ids else []
    code, out = resolve_json(cli, *args)
    assert code == 0
    assert out["layers"] == [f"residual:{k}" for k in layers]
    assert out["source"].startswith(("built-in", "SpecForge", "speculators", "SafeAILab"))


def test_hf_indices(cli):
    code, out = resolve_json(cli, "--engine", "hf", "--num-layers", 8, "--ids", 0, 3, 8)
    assert code == 0 and out["layers"] == ["embed", "residual:3", "final_norm"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--arch", "KimiK25ForConditionalGeneration", "--version", "0.5.9"], "no EAGLE-3 capture"),
        (["--arch", "LlamaForCausalLM", "--version", "0.4.4"], "has no EAGLE-3"),
        (["--arch", "KimiVLForConditionalGeneration", "--version", "0.5.23"], "kimi_vl.py"),
        (
            ["--arch", "Qwen3MoeForCausalLM", "--version", "0.5.23", "--ids", "2", "30", "60"],
            "IndexError at start-up",
        ),
        (
            ["--arch", "DeepseekV3ForCausalLM", "--version", "0.5.23", "--ids", "2", "30", "61"],
            "fails at the first forward",
        ),
        (["--arch", "LlamaForCausalLM", "--version", "0.6.0"], "newer than the built-in table"),
        (["--arch", "FalconForCausalLM", "--version", "0.5.23"], "not in the built-in table"),
    ],
)
def test_unservable_cases_exit_2(cli, args, words):
    res = cli("resolve", "--engine", "sglang", "--num-layers", "61", *args, "--source", "table")
    assert res.returncode == 2
    assert words in res.stderr


def test_silently_dropped_layer_is_said(cli):
    code, out = resolve_json(
        cli,
        "--engine",
        "sglang",
        "--arch",
        "llama",
        "--version",
        "0.5.23",
        "--num-layers",
        61,
        "--ids",
        2,
        30,
        60,
    )
    assert code == 0 and out["layers"] == ["residual:3", "residual:31"]
    assert out["problems"][0]["code"] == "EC511"


def test_text_output(cli):
    res = cli(
        "resolve",
        "--engine",
        "sglang",
        "--version",
        "0.5.14",
        "--arch",
        "deepseek_v3",
        "--num-layers",
        "61",
        "--ids",
        "2",
        "30",
        "58",
        "--source",
        "table",
    )
    assert res.returncode == 0
    assert "  0    2         2         residual:2" in res.stdout
    assert "rule deepseek" in res.stdout


def test_each_engine_reads_the_draft_config_keys_it_names(tmp_path):
    from pytest_eagle_contract.contract.model import ServingSpec
    from pytest_eagle_contract.engines.resolve import ENGINES, serving_ids
    from pytest_eagle_contract.models.draft import read_draft_config

    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "eagle_aux_hidden_state_layer_ids": [1, 2, 3],
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": [4, 5, 6]},
            }
        )
    )
    draft = read_draft_config(tmp_path)
    assert ENGINES["sglang"].draft_ids(draft) == (4, 5, 6)
    assert ENGINES["vllm"].draft_ids(draft) == (1, 2, 3)
    serving = ServingSpec("sglang", None, None, tmp_path, (7, 8, 9), None, None)
    assert serving_ids(serving) == (4, 5, 6)
    assert serving_ids(serving, engine="vllm") == (1, 2, 3)
    assert serving_ids(ServingSpec("vllm", None, None, None, (7, 8, 9), None, None)) == (7, 8, 9)


def test_each_engine_says_its_default_ids():
    from pytest_eagle_contract.engines.resolve import ENGINES

    assert {name: e.default_ids(61) for name, e in ENGINES.items()} == {
        "sglang": [2, 30, 58],
        "vllm": [2, 30, 58],
        "specforge": [1, 29, 57],
        "speculators-v1": [2, 30, 58, 60],
        "speculators": [2, 30, 58, 61],
        "eagle": [2, 30, 58],
        "hf": None,
    }
