"""MLX (mlx-vlm) by release, through ``eagle-contract resolve --engine mlx``: which draft
config.json keys its EAGLE-3 drafter reads, the default it falls back to (counted on the
draft's own layers), how an id becomes a capture index (``max(id - 1, 0)``: id 0 silently
feeds residual:1, EC516), what the target's loop captures and refuses; and a pinned snapshot
of the rules derived from the wheels (``engines/mlx_rules.json``, checked against them by
test_mlx_releases.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serving_cases import layer_inputs, resolve_json

from pytest_eagle_contract.engines import mlx

TOP = "eagle_aux_hidden_state_layer_ids"


def _draft(tmp_path: Path, config: dict[str, object]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": ["Eagle3Speculator"], **config}))
    return path


def _resolve(cli, *args: object, version: str = "0.7.10", arch: str = "qwen3_5"):
    head = ("--engine", "mlx", "--version", version, "--arch", arch, "--num-layers", 32)
    return resolve_json(cli, *head, *args)


def test_id_k_is_residual_k_in_layer_order(cli):
    res, out = _resolve(cli, "--ids", "16", "2", "29")
    assert res.returncode == 0 and out["layers"] == layer_inputs(2, 16, 29)
    assert [p["capture"] for p in out["positions"]] == [1, 15, 28]
    assert any("not ascending" in n for n in out["notes"])


def test_id_0_silently_feeds_residual_1(cli):
    res, out = _resolve(cli, "--ids", "0", "16", "29")
    assert res.returncode == 1 and out["layers"] == layer_inputs(1, 16, 29)
    assert [p["code"] for p in out["problems"]] == ["EC516"]
    # ids 0 and 1 both become capture index 0: two states, the fc takes three
    res, out = _resolve(cli, "--ids", "0", "1", "29")
    assert res.returncode == 2 and "2 distinct states captured" in out["refused"]


@pytest.mark.parametrize(
    ("config", "layers", "codes"),
    [
        ({"target_layer_ids": [3, 16, 29], TOP: [1, 2, 3]}, (3, 16, 29), []),
        ({TOP: [3, 16, 29]}, (3, 16, 29), []),
        # the nested key SGLang reads is never read: the default, on the draft's own layers
        ({"eagle_config": {TOP: [3, 16, 29]}}, None, ["EC508"]),
        # a draft with three layers of its own: [2, 1, 0] -> captures 1, 0, 0
        ({"transformer_layer_config": {"num_hidden_layers": 3}}, None, []),
        ({"transformer_layer_config": {"num_hidden_layers": 32}}, (2, 16, 29), []),
        ({"capture_layer_ids": [4, 9, 20]}, (5, 10, 21), []),
    ],
)
def test_what_the_drafter_reads_from_the_draft_config(cli, tmp_path, config, layers, codes):
    res, out = _resolve(cli, "--draft-config", _draft(tmp_path, config))
    if layers is None:  # the default [2, 0, 0] (or [2, 1, 0]): fewer than 3 states
        assert res.returncode == 2 and "the draft fc" in out["refused"], out
        return
    assert out["layers"] == layer_inputs(*layers), out
    assert [p["code"] for p in out["problems"]] == codes


def test_without_ids_the_default_counts_the_drafts_layers_and_is_refused(cli):
    res, out = _resolve(cli)
    assert res.returncode == 2 and "1 distinct" not in out["refused"]
    assert "takes 3" in out["refused"]


@pytest.mark.parametrize(
    ("arch", "ids", "says"),
    [
        ("glm_moe_dsa", ("2", "16", "40"), "raises ValueError"),  # strict loop, 0.7.0 on
        ("qwen3_5", ("2", "16", "40"), "never reached"),  # others drop it
        ("llama", ("2", "16", "29"), "no EAGLE-3 capture for llama"),
    ],
)
def test_what_the_target_loop_refuses(cli, arch, ids, says):
    res, out = _resolve(cli, "--ids", *ids, arch=arch)
    assert res.returncode == 2 and says in out["refused"], out


def test_versions_outside_the_rules_and_models_not_yet_served(cli):
    res, out = _resolve(cli, "--ids", "2", "16", "29", version="0.5.0")
    assert res.returncode == 2 and "no EAGLE-3 drafter (first in 0.6.0)" in out["refused"]
    res, out = _resolve(cli, "--ids", "2", "16", "29", version="0.6.9", arch="laguna")
    assert res.returncode == 2 and "no EAGLE-3 capture for laguna" in out["refused"]


def test_pinned_snapshot_of_the_rules_from_the_releases():
    assert mlx.releases()[0] == "0.6.0" and mlx.releases()[-1] == "0.7.10"
    rel = mlx.rules("0.7.10")
    assert rel.keys == ("target_layer_ids", TOP) and rel.draft_layers == 1 and rel.fc == 3
    strict = {m for r in mlx._data()["models"] if r["site"] == "after-strict" for m in r["models"]}
    assert strict == {"deepseek_v4", "glm_moe_dsa", "nemotron_h"}
