"""vLLM tpu-inference by release, through ``eagle-contract resolve --engine tpu-inference``:
the JAX path a default launch takes never reads the draft's ids (its default, silently:
EC508); architectures it runs through vLLM's own code are sent to the vLLM rules; and a pinned
snapshot of the rules derived from the wheels (``engines/tpu_rules.json``, checked against
them by test_tpu_releases.py)."""

from __future__ import annotations

import json

import pytest
from serving_cases import resolve_json

from pytest_eagle_contract.engines import tpu

TOP = "eagle_aux_hidden_state_layer_ids"


def _resolve(cli, *args: object, version: str = "0.32.0"):
    head = ("--engine", "tpu-inference", "--version", version, "--num-layers", 32)
    return resolve_json(cli, *head, *args)


def test_the_jax_path_ignores_the_drafts_ids_and_feeds_its_default(cli, tmp_path):
    res, out = _resolve(cli, "--arch", "LlamaForCausalLM", "--ids", "1", "15", "28")
    assert res.returncode == 1 and out["layers"] == ["residual:2", "residual:16", "residual:29"]
    assert [p["code"] for p in out["problems"]] == ["EC508"]
    res, out = _resolve(cli, "--arch", "LlamaForCausalLM", "--ids", "2", "16", "29")
    assert res.returncode == 0 and not out["problems"]
    # a draft config's ids are not read either: its default, whatever the draft says
    (tmp_path / "config.json").write_text(json.dumps({"eagle_aux_hidden_state_layer_ids": [1]}))
    res, out = _resolve(cli, "--arch", "LlamaForCausalLM", "--draft-config", tmp_path)
    assert out["layers"] == ["residual:2", "residual:16", "residual:29"]


def test_want_says_no_other_layers_can_be_fed(cli):
    res = cli(
        "resolve", "--engine", "tpu-inference", "--version", "0.32.0", "--arch",
        "LlamaForCausalLM", "--num-layers", "32", "--want", "embed", "residual:3", "residual:31",
    )  # fmt: skip
    assert res.returncode == 2 and "nearest it feeds: residual:2, residual:16, residual:29" in (
        res.stdout
    )


ASSERTION = "'EAGLE3 requires auxiliary hidden states from the target model.' fails at the first"
VALUE_ERROR = "Eagle3Proposer.load_model raises ValueError at start-up"


@pytest.mark.parametrize(
    ("arch", "version", "says"),
    [
        # in the JAX registry without EAGLE-3: flax_nnx, no aux states, the drafter's assertion
        ("Qwen3ForCausalLM", "0.32.0", ASSERTION),
        ("Qwen2ForCausalLM", "0.18.0", ASSERTION),
        ("DeepseekV3ForCausalLM", "0.32.0", ASSERTION),
        ("GptOssForCausalLM", "0.12.0", ASSERTION),  # JAX, not yet preferred
        # preferred (vLLM's code) from 0.18: the draft resolves to flax_nnx, a start-up error
        ("GptOssForCausalLM", "0.32.0", VALUE_ERROR),
        ("KimiK25ForConditionalGeneration", "0.32.0", VALUE_ERROR),
        ("Qwen3MoeForCausalLM", "0.18.0", VALUE_ERROR),
        # before 0.18 the vLLM-path wrapper returns no aux states at all
        ("GptOssForCausalLM", "0.13.3", "wrapper (models/vllm/vllm_model_wrapper.py) returns no"),
        ("MistralForCausalLM", "0.13.3", "returns no aux states in this release"),
        ("LlamaForCausalLM", "0.11.0", "has no EAGLE-3 (first in 0.11.1)"),
    ],
)
def test_what_tpu_inference_refuses_and_the_real_reason(cli, arch, version, says):
    res, out = _resolve(cli, "--arch", arch, "--ids", "2", "16", "29", version=version)
    assert res.returncode == 2 and says in out["refused"], out
    assert "runs vLLM's own model code (torchax)" not in out["refused"]  # the old, wrong reason


def test_draft_model_impl_vllm_goes_through_vllms_v2_runner_helper(cli, tmp_path):
    """DRAFT_MODEL_IMPL_TYPE=vllm on a target tpu-inference prefers vLLM's code for: the
    wrapper sets the aux layers with vLLM's V2-runner helper, which reads the top-level key
    (the nested one never) and, from vLLM 0.25, ``target_layer_ids`` + 1."""
    args = ("--arch", "GptOssForCausalLM", "--draft-model-impl", "vllm")
    res, out = _resolve(cli, *args, "--ids", "1", "15", "28")
    assert res.returncode == 0, out
    assert out["layers"] == ["residual:1", "residual:15", "residual:28"]
    assert out["assumed"]["DRAFT_MODEL_IMPL_TYPE"]["value"] == "vllm"
    assert "set_eagle3_aux_hidden_state_layers" in out["source"]
    nested = tmp_path / "nested.json"
    nested.write_text(json.dumps({"eagle_config": {TOP: [1, 15, 28]}}))
    res, out = _resolve(cli, *args, "--draft-config", nested)
    assert res.returncode == 1 and out["layers"] == ["residual:2", "residual:16", "residual:29"]
    assert [p["code"] for p in out["problems"]] == ["EC508"]
    dspark = tmp_path / "dspark.json"
    dspark.write_text(json.dumps({"target_layer_ids": [1, 15, 28]}))
    res, out = _resolve(cli, *args, "--draft-config", dspark)
    assert res.returncode == 0 and out["layers"] == ["residual:2", "residual:16", "residual:29"]
    # the same setting on a JAX target is the start-up ValueError; auto on a target not in the
    # JAX registry falls back to vLLM's code and reads the ids there
    res, out = _resolve(cli, "--arch", "LlamaForCausalLM", "--draft-model-impl", "vllm")
    assert res.returncode == 2 and VALUE_ERROR in out["refused"]
    res, out = _resolve(cli, "--arch", "MistralForCausalLM", "--ids", "1", "15", "28")
    assert res.returncode == 0 and out["layers"] == ["residual:1", "residual:15", "residual:28"]
    res = cli("resolve", "--engine", "vllm", "--num-layers", "32", "--draft-model-impl", "vllm")
    assert res.returncode == 2 and "--draft-model-impl is for --engine tpu-inference" in res.stderr


def test_pinned_snapshot_of_the_rules_from_the_releases():
    assert tpu.releases()[0] == "0.11.1" and tpu.releases()[-1] == "0.32.0"
    (row,) = tpu._data()["archs"]
    assert row["archs"] == ["LlamaForCausalLM"] and row["capture"] == "input"
    assert row["reads_ids"] is False and row["default"] == "2,L//2,L-3"
    rows = {r["since"]: r for r in tpu._data()["rows"]}
    # rows split where the DFlash / MTP facts change too (0.22.1, 0.24.0, 0.25.0)
    assert [r["impl_check"] for r in rows.values()] == [False] * 3 + [True] * 8
    assert [r["vllm_aux"] for r in rows.values()] == ["none"] * 3 + ["v2_helper"] * 8
    served = [v for v, r in rows.items() if (r["dflash"] or {}).get("runner")]
    assert served == ["0.25.0"] and rows["0.24.0"]["dflash"]["runner"] is False
    targets = rows["0.25.0"]["dflash"]["targets"]
    assert sorted(targets) == ["LlamaForCausalLM", "Qwen3ForCausalLM"]
    assert {t["capture"] for t in targets.values()} == {"output"}
    assert not any(r["dflash2"] or r["dspark"] for r in rows.values())
    assert all(r["asserts"] and r["drafts"] == ["Eagle3LlamaForCausalLM"] for r in rows.values())
    assert {"Qwen3ForCausalLM", "DeepseekV3ForCausalLM"} <= set(rows["0.25.0"]["jax"])
