"""OpenVINO GenAI through ``eagle-contract resolve --engine openvino``: ids from the
``hidden_layers_list`` property, id k the output of layer k, its default (2, L/2, L-3) one layer
past EAGLE's, exactly three distinct ids, releases to 2026.3.0.0 in layer order and main in
the list's order; a pinned snapshot of the rules read from its source
(``engines/openvino_rules.json``, checked by test_openvino_source.py)."""

from __future__ import annotations

import json

import pytest
from serving_cases import resolve_json

from pytest_eagle_contract.engines import openvino

HEAD = ("--engine", "openvino", "--num-layers", "32")


def _resolve(cli, *args: object):
    return resolve_json(cli, *HEAD, *args)


def test_the_default_feeds_layer_outputs_one_past_eagles(cli, tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps({"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    )
    res, out = _resolve(cli, "--draft-config", tmp_path)  # the draft's ids are not read
    assert res.returncode == 0 and out["layers"] == ["residual:3", "residual:17", "residual:30"]
    assert any("never read" in n for n in out["notes"])


def test_want_gives_the_property(cli):
    res = cli("resolve", *HEAD, "--want", "residual:2", "residual:16", "residual:29")
    assert res.returncode == 0 and "hidden_layers_list: [1, 15, 28]" in res.stdout


@pytest.mark.parametrize(
    ("version", "layers"),
    [
        ("2026.3.0.0", ["residual:2", "residual:16", "residual:29"]),
        (openvino.snapshot(), ["residual:29", "residual:2", "residual:16"]),
    ],
)
def test_order_by_release(cli, version, layers):
    res, out = _resolve(cli, "--version", version, "--ids", 28, 1, 15)
    assert res.returncode == 0 and out["layers"] == layers


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--ids", 1, 15], "exactly 3"),
        (["--ids", 1, 1, 15], "repeated id"),
        (["--ids", 1, 15, 32], "ids [32] match no layer"),
        (["--version", "2025.4.1.0"], "has no EAGLE-3 (first in 2026.0.0.0)"),
    ],
)
def test_what_it_refuses(cli, args, says):
    res, out = _resolve(cli, *args)
    assert res.returncode == 2 and says in out["refused"], out


def test_pinned_snapshot_of_the_rules_from_the_source():
    assert openvino.releases()[0] == "2026.0.0.0" and openvino.releases()[-1] == "2026.3.0.0"
    rows = openvino._data()["rows"]
    assert [(r["order"], r["capture"], r["count"]) for r in rows] == [
        ("layer", "output", 3),
        ("list", "output", 3),
    ]
