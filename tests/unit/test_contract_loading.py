"""Contract files: validated by the shipped JSON Schema, every error located."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from pytest_eagle_contract.contract import model
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


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def load_text(tmp_path, text):
    return load_contract(_write(tmp_path, text))


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

    for path in sorted(Path(__file__).parents[2].joinpath("contracts").glob("*.yaml")):
        load_contract(path)


@pytest.fixture
def kept(tmp_path, monkeypatch) -> Path:
    """The schema's kept passes, in a cache of this test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("EAGLE_CONTRACT_SCHEMA_CACHE", raising=False)
    return tmp_path / "xdg" / "eagle-contract" / "valid"


def test_a_schema_pass_is_kept_and_an_edit_is_validated_again(tmp_path, kept, monkeypatch):
    p = _write(tmp_path, VALID)
    load_contract(p)
    (entry,) = kept.iterdir()
    calls = []
    monkeypatch.setattr(model, "_schema_problems", lambda *a: calls.append(a) or [])
    load_contract(p)  # the same data: the kept pass, the schema not run
    assert calls == []
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    p.write_text(VALID.replace("  hidden_size: 64", "  hidden_size: 64\n  hiden: 1"))
    with pytest.raises(ContractError, match=r"unknown key 'hiden'"):  # new data: validated
        load_contract(p)
    with pytest.raises(ContractError, match=r"unknown key 'hiden'"):  # a failure is not kept
        load_contract(p)
    assert list(kept.iterdir()) == [entry]


def test_a_schema_cache_that_cannot_be_used_changes_nothing(tmp_path, kept):
    kept.parent.mkdir(parents=True)
    kept.write_text("a file where the folder should be")
    p = _write(tmp_path, VALID)
    assert load_contract(p).target.hidden_size == 64
    p.write_text(VALID.replace("  hidden_size: 64", "  hidden_size: 64\n  hiden: 1"))
    with pytest.raises(ContractError, match=r"unknown key 'hiden'"):
        load_contract(p)


def test_the_schema_cache_can_be_turned_off(tmp_path, kept, monkeypatch):
    monkeypatch.setenv("EAGLE_CONTRACT_SCHEMA_CACHE", "off")
    load_contract(_write(tmp_path, VALID))
    assert not kept.exists()
