"""Contract files: validated by the shipped JSON Schema, every error located."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from pytest_eagle_contract.contract.model import load_contract, schema, schema_path
from pytest_eagle_contract.errors import ContractError

VALID = """\
contract: demo
version: 1
target:
  arch: LlamaForCausalLM
  num_hidden_layers: 8
  hidden_size: 64
training:
  format: specforge
  slots:
    - {layer: residual:2, norm: {median: 1.5, rtol: 0.2}}
    - layer: residual:4
      norm: {min: 3.0, max: 4.0}
    - {layer: final_norm}
  fc_input: [0, 1]
  target_slot: 2
serving:
  engine: sglang
  aux_layer_ids: [1, 3]
"""


def load_text(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return load_contract(path)


def problems(tmp_path, text):
    with pytest.raises(ContractError) as info:
        load_text(tmp_path, text)
    return info.value.problems


def test_valid_contract_is_typed(tmp_path):
    c = load_text(tmp_path, VALID)
    assert c.name == "demo" and c.target.dtype == "bfloat16"
    assert [str(s.layer) for s in c.training.slots] == ["residual:2", "residual:4", "final_norm"]
    assert c.training.slots[0].norm.low == pytest.approx(1.25)
    assert c.training.slots[1].norm.high == 4.0 and c.training.slots[2].norm is None
    assert c.training.fc_input == (0, 1) and c.training.target_slot == 2
    assert c.serving.aux_layer_ids == (1, 3)
    assert c.line_of("training.slots[1].norm") == 12


def test_unknown_key_names_file_line_column_and_path(tmp_path):
    text = VALID.replace("      norm: {min: 3.0", "      nrom: {min: 3.0")
    (p,) = problems(tmp_path, text)
    assert (p.line, p.column, p.path) == (12, 7, "training.slots[1].nrom")
    assert "unknown key 'nrom'" in p.message and "did you mean 'norm'" in p.message
    assert str(p).startswith(f"{tmp_path / 'c.yaml'}:12:7: training.slots[1].nrom:")


def test_every_problem_is_reported_at_once(tmp_path):
    text = VALID.replace("hidden_size: 64", "hidden_size: -1").replace(
        "engine: sglang", "engine: tgi"
    )
    found = {p.path: p for p in problems(tmp_path, text)}
    assert set(found) == {"target.hidden_size", "serving.engine"}
    assert found["target.hidden_size"].line == 6 and found["serving.engine"].line == 17


@pytest.mark.parametrize(
    ("edit", "path", "words"),
    [
        (("layer: residual:2", "layer: layer2"), "training.slots[0].layer", "does not match"),
        (("layer: residual:2", "layer: residual:9"), "training.slots[0].layer", "beyond"),
        (("fc_input: [0, 1]", "fc_input: [0, 5]"), "training.fc_input[1]", "does not exist"),
        (("fc_input: [0, 1]", "fc_input: [0, 2]"), "training.fc_input[1]", "target slot"),
        (("{median: 1.5, rtol: 0.2}", "{median: 1.5}"), "training.slots[0].norm", "rtol"),
        (("version: 1", "version: 2"), "version", "1 was expected"),
        (("format: specforge", "format: parquet"), "training.format", "is not one of"),
    ],
)
def test_bad_values_are_located(tmp_path, edit, path, words):
    (p, *_) = problems(tmp_path, VALID.replace(*edit))
    assert p.path == path and words in p.message, p


def test_yaml_syntax_error_is_located(tmp_path):
    (p,) = problems(tmp_path, VALID.replace("  fc_input: [0, 1]", "  fc_input: [0, 1"))
    assert p.line >= 15 and "invalid YAML" in p.message


def test_duplicate_key(tmp_path):
    (p,) = problems(tmp_path, VALID + "contract: again\n")
    assert "duplicate key 'contract'" in p.message and p.line == 19


def test_check_exits_2_on_invalid_contract(tmp_path, cli):
    path = tmp_path / "bad.yaml"
    path.write_text(VALID.replace("target:", "targte:"))
    res = cli("check", path)
    assert res.returncode == 2
    assert f"{path}:3:1: targte: unknown key 'targte' (did you mean 'target'?)" in res.stderr


def test_schema_is_shipped_and_valid():
    Draft202012Validator.check_schema(schema())
    assert json.loads(schema_path().read_text()) == schema()


def test_shipped_contracts_validate():
    from pathlib import Path

    for path in sorted(Path(__file__).parent.parent.joinpath("contracts").glob("*.yaml")):
        load_contract(path)
