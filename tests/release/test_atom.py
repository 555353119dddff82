"""ROCm ATOM through ``eagle-contract resolve --engine atom``: the draft's nested eagle_config
ids are read only with ``use_aux_hidden_state: true`` (without it ATOM feeds the final hidden
state, EC508), a top-level list is not read (its default, EC508), id i is the state entering
layer i, and ids it cannot capture fail at start-up; a pinned snapshot of the rules read from
its repository (``engines/atom_rules.json``, checked by test_atom_source.py)."""

from __future__ import annotations

import json

import pytest
from serving_cases import resolve_json

from pytest_eagle_contract.engines import atom

HEAD = ("--engine", "atom", "--num-layers", "61")


def _resolve(cli, *args: object):
    return resolve_json(cli, *HEAD, *args)


@pytest.mark.parametrize(
    ("config", "layers", "problems"),
    [
        (
            {
                "eagle_config": {
                    "eagle_aux_hidden_state_layer_ids": [1, 30, 57],
                    "use_aux_hidden_state": True,
                }
            },
            ["residual:1", "residual:30", "residual:57"],
            [],
        ),
        (
            {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 30, 57]}},
            ["final_norm"],
            ["EC508"],
        ),
        (
            {"eagle_aux_hidden_state_layer_ids": [1, 30, 57]},
            ["residual:2", "residual:30", "residual:58"],
            ["EC508"],
        ),
        ({"num_hidden_layers": 1}, ["residual:2", "residual:30", "residual:58"], []),
    ],
)
def test_which_draft_config_it_reads(cli, tmp_path, config, layers, problems):
    (tmp_path / "config.json").write_text(json.dumps(config))
    res, out = _resolve(cli, "--draft-config", tmp_path)
    assert out["layers"] == layers and [p["code"] for p in out["problems"]] == problems
    assert res.returncode == (1 if problems else 0)


def test_id_0_is_the_embedding_and_what_fails_at_start_up(cli):
    res, out = _resolve(cli, "--ids", 0, 30, 57)
    assert res.returncode == 0 and out["layers"] == ["embed", "residual:30", "residual:57"]
    for ids in ([1, 1, 57], [1, 30, 61]):
        res, out = _resolve(cli, "--ids", *ids)
        assert res.returncode == 2 and "at the first forward" in out["refused"]
    res, out = _resolve(cli, "--arch", "LlamaForCausalLM")
    assert res.returncode == 2 and "no EAGLE-3 capture for LlamaForCausalLM" in out["refused"]


def test_want_pastes_the_gate_too(cli):
    res = cli("resolve", *HEAD, "--want", "residual:3", "residual:30", "residual:58")
    assert res.returncode == 0 and '"use_aux_hidden_state": true' in res.stdout


def test_pinned_snapshot_of_the_rules_from_the_source():
    rows = atom._data()["rows"]
    assert rows[0]["refs"][0] == "v0.1.3" and rows[-1]["refs"] == [
        atom._data()["snapshot"]["commit"]
    ]
    assert [r["mismatch"] for r in rows] == ["fc", "fc", "strict"]
    assert all(r["gate_default"] is False and r["capture"] == "input" for r in rows)
