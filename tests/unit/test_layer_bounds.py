"""The layer-count bound (limits.MOST_LAYERS, the contract schema's maximum for a target's
num_hidden_layers) held by the tap formula itself: build_target_layer_ids builds one tap per
draft layer, so an unbounded count would allocate unboundedly whoever calls it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_eagle_contract.engines.dflash import zlab_formula
from pytest_eagle_contract.errors import UsageError
from pytest_eagle_contract.limits import MOST_LAYERS

ROOT = Path(__file__).parents[2]


def test_the_bound_is_the_contract_schemas():
    schema = ROOT / "pytest_eagle_contract" / "contract" / "schema" / "contract-v1.schema.json"
    text = json.loads(schema.read_text())["properties"]["target"]["properties"]
    assert text["num_hidden_layers"]["maximum"] == MOST_LAYERS == 1024


@pytest.mark.parametrize(
    "L,n,named",
    [(36, 10**9, "num_hidden_layers n is 1000000000"), (10**9, 5, "layer count L is 1000000000")],
)
def test_zlab_formula_refuses_a_count_above_the_bound(L, n, named):
    with pytest.raises(UsageError) as err:
        zlab_formula(L, n)
    assert named in str(err.value) and "above 1024: this tool's limit" in str(err.value)


def test_zlab_formula_at_the_bound_still_answers():
    assert zlab_formula(MOST_LAYERS, 5) == [1, 256, 511, 766, 1021]
    assert len(zlab_formula(36, MOST_LAYERS)) == MOST_LAYERS
