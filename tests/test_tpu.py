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


@pytest.mark.parametrize(
    ("arch", "version", "says"),
    [
        ("GptOssForCausalLM", "0.32.0", "prefers vLLM's code"),
        ("KimiK25ForConditionalGeneration", "0.32.0", "prefers vLLM's code"),
        ("Qwen3ForCausalLM", "0.32.0", "has no JAX model with EAGLE-3"),
        ("LlamaForCausalLM", "0.11.0", "has no EAGLE-3 (first in 0.11.1)"),
    ],
)
def test_what_the_jax_path_does_not_answer(cli, arch, version, says):
    res, out = _resolve(cli, "--arch", arch, "--ids", "2", "16", "29", version=version)
    assert res.returncode == 2 and says in out["refused"], out


def test_pinned_snapshot_of_the_rules_from_the_releases():
    assert tpu.releases()[0] == "0.11.1" and tpu.releases()[-1] == "0.32.0"
    (row,) = tpu._data()["archs"]
    assert row["archs"] == ["LlamaForCausalLM"] and row["capture"] == "input"
    assert row["reads_ids"] is False and row["default"] == "2,L//2,L-3"
