"""Current speculators: input_ids and loss_mask come from the Arrow dataset beside
``hidden_states/`` (row i for ``hs_{i}.safetensors``), read with pyarrow."""

from __future__ import annotations

import pytest
import torch
from conftest import speculators_contract, speculators_states

pytest.importorskip("pyarrow")

from pytest_eagle_contract.contract.model import load_contract
from pytest_eagle_contract.plan.planner import plan, run_units
from pytest_eagle_contract.shards.writing import write_speculators_dataset

H, T = 32, 30
CONTRACT = speculators_contract(H, [f"{{layer: residual:{k}}}" for k in (2, 4, 5, 8)])
ROW_CODES = {"EC202", "EC206", "EC303"}


def make(tmp_path, edit=None):
    mask = torch.ones(T, dtype=torch.long)
    mask[:10] = 0
    ids = speculators_states(tmp_path / "data", 3, T, H, torch.Generator().manual_seed(0))
    rows = [(i, mask.clone()) for i in ids]
    if edit:
        edit(rows)
    write_speculators_dataset(tmp_path / "data", rows)
    (tmp_path / "c.yaml").write_text(CONTRACT)
    contract = load_contract(tmp_path / "c.yaml")
    outcome = run_units(plan(contract, sample=None, checks=("structure", "values")))
    return {(f.file, f.code) for f in outcome.findings}


def test_mask_from_the_dataset_passes(tmp_path):
    assert make(tmp_path) == set()


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        (
            lambda rows: rows.__setitem__(1, (rows[1][0], torch.ones(T + 7, dtype=torch.long))),
            "EC202",
        ),
        (lambda rows: rows.__setitem__(1, (rows[1][0], torch.zeros(T, dtype=torch.long))), "EC303"),
        (lambda rows: rows.append(rows.pop(0)), "EC206"),  # rows renumbered
    ],
)
def test_dataset_row_problems(tmp_path, edit, code):
    found = make(tmp_path, edit)
    assert ("hs_1.safetensors", code) in found, found


@pytest.mark.slow
def test_inspect_shows_the_mask(tmp_path, cli):
    make(tmp_path)
    res = cli("inspect", tmp_path / "data" / "hidden_states" / "hs_0.safetensors")
    assert res.returncode == 0 and f"loss_mask: {T} entries, {T - 10} of them 1" in res.stdout
