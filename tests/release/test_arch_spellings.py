"""``resolve --arch`` takes what a target's config.json holds, for every engine: its
``architectures[0]`` or its ``model_type``, and ``--target-config`` reads both from the file
(with ``num_hidden_layers``). Each engine answers the same for the three; a config.json that
is not one is exit 2 with a message."""

from __future__ import annotations

import json

import pytest
from serving_cases import resolve_json

from pytest_eagle_contract.engines.names import ENGINE_NAMES, TRAINER_NAMES

# per engine, a target it serves: (architectures[0], model_type, ids); engines whose rules do
# not depend on the architecture (trtllm, openvino, the trainers) take any
TARGETS = {
    "sglang": ("Qwen3ForCausalLM", "qwen3", (2, 16, 28)),
    "vllm": ("DeepseekV3ForCausalLM", "deepseek_v3", (2, 16, 29)),
    "trtllm": ("LlamaForCausalLM", "llama", (1, 15, 28)),
    "llama.cpp": ("Qwen3_5ForConditionalGeneration", "qwen3_5", (2, 16, 29)),
    "mlx": ("Qwen3_5ForConditionalGeneration", "qwen3_5", (2, 16, 29)),
    "tpu-inference": ("LlamaForCausalLM", "llama", (2, 16, 29)),
    "vllm-ascend": ("DeepseekV3ForCausalLM", "deepseek_v3", (2, 16, 29)),
    "trtllm-autodeploy": ("LlamaForCausalLM", "llama", (1, 15, 28)),
    "sglang-jax": ("Qwen3ForCausalLM", "qwen3", (2, 16, 29)),
    "atom": ("KimiK25ForConditionalGeneration", "kimi_k25", (2, 16, 29)),
    "openvino": ("LlamaForCausalLM", "llama", (2, 16, 29)),
    "lmdeploy": ("LlamaForCausalLM", "llama", (2, 16, 29)),  # its fixed taps: (2, L//2, L-3)
    "specforge": ("Qwen3ForCausalLM", "qwen3", (1, 15, 28)),
    "speculators-v1": ("LlamaForCausalLM", "llama", (2, 16, 28)),
    "speculators": ("LlamaForCausalLM", "llama", (2, 16, 29)),
    "eagle": ("LlamaForCausalLM", "llama", ()),  # no configurable ids
    "hf": ("LlamaForCausalLM", "llama", (3, 17, 30)),
}


def test_every_engine_is_covered():
    assert set(TARGETS) == set(ENGINE_NAMES)


def _answer(out):
    return out["layers"], out.get("refused")


@pytest.mark.parametrize("engine", sorted(TARGETS))
def test_both_spellings_and_the_config_give_one_answer(cli, tmp_path, engine):
    arch, model_type, ids = TARGETS[engine]
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps({"architectures": [arch], "model_type": model_type, "num_hidden_layers": 32})
    )
    side = "--trainer" if engine in TRAINER_NAMES else "--engine"
    head = (side, engine, *(("--ids", *ids) if ids else ()))
    by_arch = resolve_json(cli, *head, "--arch", arch, "--num-layers", 32)
    by_type = resolve_json(cli, *head, "--arch", model_type, "--num-layers", 32)
    by_file = resolve_json(cli, *head, "--target-config", config)
    outs = [out for _, out in (by_arch, by_type, by_file)]
    assert all(out is not None for out in outs), [r.stderr for r, _ in (by_arch, by_type, by_file)]
    assert _answer(outs[0]) == _answer(outs[1]) == _answer(outs[2]), outs
    assert outs[0]["layers"], outs[0]  # each target is one its engine serves
    assert by_arch[0].returncode == by_type[0].returncode == by_file[0].returncode


def test_mlx_takes_the_hf_class_and_vllm_the_model_type(cli):
    """The issue's case: mlx refused Qwen3_5ForConditionalGeneration (its rules are keyed by
    mlx-vlm's model folders), vLLM and the others keyed by class took only the class."""
    res, out = resolve_json(cli, "--engine", "mlx", "--arch", "Qwen3_5ForConditionalGeneration",
                            "--num-layers", 32, "--ids", 2, 16, 29)  # fmt: skip
    assert res.returncode == 0 and out["arch"] == "qwen3_5"
    res, out = resolve_json(cli, "--engine", "vllm", "--arch", "deepseek_v3", "--num-layers", 32)
    assert res.returncode in (0, 1) and out["arch"] == "DeepseekV3ForCausalLM"


def test_a_model_type_of_several_classes_says_which_it_took(cli):
    res, out = resolve_json(cli, "--engine", "sglang", "--arch", "qwen3_5", "--num-layers", 32)
    assert res.returncode == 0, out
    assert out["arch"] == "Qwen3_5ForConditionalGeneration", out
    assert any("also Qwen3_5ForCausalLM" in n for n in out["notes"])


def test_target_config_takes_the_text_configs_layers(cli, tmp_path):
    folder = tmp_path / "kimi"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["KimiK25ForConditionalGeneration"],
                "model_type": "kimi_k25",
                "text_config": {"model_type": "kimi_k2", "num_hidden_layers": 61},
            }
        )
    )
    res, out = resolve_json(cli, "--engine", "vllm", "--version", "0.33.0", "--target-config",
                            folder, "--ids", 2, 30, 58)  # fmt: skip
    assert res.returncode == 0 and out["num_layers"] == 61
    assert out["layers"] == ["residual:2", "residual:30", "residual:58"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "cannot read target config"),
        ("[1, 2]", "a JSON list, not an object"),
        ("{}", "neither architectures nor model_type"),
        ('{"architectures": "LlamaForCausalLM"}', "architectures must be a list of names"),
        ('{"architectures": ["X"], "model_type": 3}', "model_type must be a name"),
        ('{"model_type": "llama"}', "no integer num_hidden_layers"),
        ('{"model_type": "llama", "num_hidden_layers": "32"}', "no integer num_hidden_layers"),
    ],
)
def test_a_bad_target_config_is_a_usage_error(cli, tmp_path, text, says):
    config = tmp_path / "config.json"
    config.write_text(text)
    res = cli("resolve", "--engine", "vllm", "--target-config", config)
    assert res.returncode == 2 and says in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_target_config_with_arch_or_without_layers_is_a_usage_error(cli, tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "llama", "num_hidden_layers": 32}')
    res = cli("resolve", "--engine", "vllm", "--target-config", config, "--arch", "llama")
    assert res.returncode == 2 and "not both" in res.stderr
    res = cli("resolve", "--engine", "vllm", "--arch", "llama")
    assert res.returncode == 2 and "needs --num-layers" in res.stderr
    res = cli("resolve", "--engine", "vllm", "--target-config", tmp_path / "missing.json")
    assert res.returncode == 2 and "cannot read target config" in res.stderr


def test_the_name_as_spelled_wins_over_one_that_differs_only_in_case(cli):
    """vLLM's registry holds both LlamaForCausalLM and LLaMAForCausalLM; tpu-inference's JAX
    registry only the first: the exact name must reach the engine, or Llama leaves the JAX
    path."""
    for arch in ("LlamaForCausalLM", "llama"):
        res, out = resolve_json(cli, "--engine", "tpu-inference", "--version", "0.32.0",
                                "--arch", arch, "--num-layers", 32, "--ids", 1, 3, 4)  # fmt: skip
        assert out["arch"] == "LlamaForCausalLM" and "JAX path" in out["source"], out
        assert res.returncode == 1 and [p["code"] for p in out["problems"]] == ["EC508"]
