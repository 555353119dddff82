"""TensorRT-LLM AutoDeploy through ``eagle-contract resolve --engine trtllm-autodeploy``: ids from
``eagle3_layers_to_capture`` only (the draft's config.json never), id k the output of layer k,
the default (1, L//2-1, L-4), ids without a layer refused (its transform asserts), and -1 the
last layer's pre-norm output where the PyTorch backend feeds the final norm (EC516). Rules
read from a source snapshot of NVIDIA/TensorRT-LLM (engines/autodeploy.py names it)."""

from __future__ import annotations

import json

import pytest
from serving_cases import resolve_json

HEAD = ("--engine", "trtllm-autodeploy", "--num-layers", "32")


def _resolve(cli, *args: object):
    return resolve_json(cli, *HEAD, *args)


def test_ids_feed_layer_outputs_in_layer_order_and_the_draft_is_not_read(cli, tmp_path):
    res, out = _resolve(cli, "--ids", 28, 1, 15, 1)
    assert res.returncode == 0 and out["layers"] == ["residual:2", "residual:16", "residual:29"]
    assert any("set" in n for n in out["notes"])
    (tmp_path / "config.json").write_text(
        json.dumps({"eagle_aux_hidden_state_layer_ids": [3, 9, 20]})
    )
    res, out = _resolve(cli, "--draft-config", tmp_path)
    assert out["layers"] == ["residual:2", "residual:16", "residual:29"]  # its default


def test_minus_one_is_the_last_layer_before_the_norm(cli):
    res, out = _resolve(cli, "--ids", 1, 15, -1)
    assert res.returncode == 1 and out["layers"] == ["residual:2", "residual:16", "residual:32"]
    assert [p["code"] for p in out["problems"]] == ["EC516"]
    res, out = _resolve(cli, "--ids", 1, 15, 31)  # the same layers, named as they are
    assert res.returncode == 0 and out["layers"] == ["residual:2", "residual:16", "residual:32"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--ids", 1, 15, 40], "AssertionError at start-up"),
        (["--num-layers", 6], "more than 6 layers"),
    ],
)
def test_what_it_refuses_at_start_up(cli, args, says):
    res, out = _resolve(cli, *args)
    assert res.returncode == 2 and says in out["refused"], out


def test_want_finds_its_ids(cli):
    res = cli("resolve", *HEAD, "--want", "residual:3", "residual:17", "residual:30")
    assert res.returncode == 0 and "eagle3_layers_to_capture: [2, 16, 29]" in res.stdout
