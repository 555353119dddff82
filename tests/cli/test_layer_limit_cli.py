"""The layer-count limit (limits.MOST_LAYERS = 1024, the contract schema's bound on a
target's num_hidden_layers) as `resolve` applies it: a usage error naming this tool's limit on
every path, never an engine's refusal."""

from __future__ import annotations

import json

import pytest

L = 5000
QWEN3 = "Qwen3ForCausalLM"


def fold(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize(
    "extra",
    [
        ["--engine", "sglang", "--arch", "LlamaForCausalLM"],  # EAGLE-3
        ["--engine", "vllm", "--arch", "LlamaForCausalLM", "--ids", "2", "30"],
        ["--engine", "sglang", "--arch", "LlamaForCausalLM", "--want", "residual:3"],
        ["--engine", "sglang", "--method", "dflash", "--arch", QWEN3, "--ids", "1", "2"],
        ["--engine", "lmdeploy", "--method", "dflash", "--arch", QWEN3, "--ids", "1", "2"],
        ["--engine", "lmdeploy", "--method", "mtp", "--arch", QWEN3],
        ["--engine", "mlx", "--method", "dflash", "--arch", "qwen3_5", "--ids", "1", "2"],
        ["--engine", "onnxruntime-genai", "--method", "dflash2", "--arch", QWEN3, "--ids", "1"],
        ["--engine", "trtllm", "--method", "dflash", "--arch", QWEN3, "--ids", "1", "2"],
        ["--trainer", "specforge", "--arch", "LlamaForCausalLM"],
    ],
    ids=lambda a: "-".join(a[1:4:2]),
)
def test_num_layers_above_the_limit_is_a_usage_error(cli, extra):
    res = cli("resolve", "--num-layers", L, *extra)
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    said = fold(res.stderr)
    assert res.returncode == 2, (res.stdout[-500:], said)
    assert f"--num-layers is {L}, above 1024: this tool's limit on a layer count" in said
    assert "would not serve" not in said


def test_num_layers_at_the_limit_still_resolves(cli):
    res = cli("resolve", "--engine", "sglang", "--arch", "LlamaForCausalLM", "--num-layers", 1024)
    assert res.returncode == 0, res.stderr
    assert "L = 1024" in res.stdout


def test_a_target_config_above_the_limit_is_a_usage_error(cli, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": L}))
    res = cli("resolve", "--engine", "sglang", "--target-config", config)
    said = fold(res.stderr)
    assert res.returncode == 2 and "Traceback" not in said, said
    assert f"num_hidden_layers is {L}, above 1024: this tool's limit" in said


def test_lmdeploy_over_a_huge_draft_is_the_tools_limit_not_the_engines(cli, tmp_path):
    """No tap list and num_hidden_layers 2000: lmdeploy's fallback formula would build one
    tap per draft layer; refusing that is this tool's limit, a usage error, not something
    "lmdeploy would not serve"."""
    draft = tmp_path / "config.json"
    draft.write_text(json.dumps({"num_hidden_layers": 2000, "num_target_layers": 36}))
    for json_flag in ([], ["--json"]):
        res = cli(
            "resolve", "--engine", "lmdeploy", "--method", "dflash", "--arch", QWEN3,
            "--num-layers", 36, "--draft-config", draft, *json_flag,
        )  # fmt: skip
        said = fold(res.stderr)
        assert res.returncode == 2 and "Traceback" not in said, said
        assert "would not serve" not in said and said.startswith("eagle-contract: error:"), said
        assert "num_hidden_layers is 2000, above 1024: this tool's limit on a layer count" in said
