"""TensorRT-LLM: its EAGLE-3 capture rules (engine ``trtllm``) and its hidden-state files
(shard format ``trtllm``), driven through the CLI on files written as TensorRT-LLM writes them.

The files are written here the way TensorRT-LLM's saver does (NVIDIA/TensorRT-LLM
``tensorrt_llm/_torch/speculative/save_hidden_state.py``: ``_process_request`` builds one dict
per request, ``_write_to_file`` does ``torch.save(list_of_dicts, f"{prefix}_{iter}.pt")``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import shardgen
import torch
import yaml
from serving_cases import tiny_contract

from pytest_eagle_contract.engines import trtllm
from pytest_eagle_contract.engines.draft_config import DraftConfig
from pytest_eagle_contract.engines.fixes import ids_for
from pytest_eagle_contract.engines.resolve import ENGINES
from pytest_eagle_contract.layers import Layer
from pytest_eagle_contract.shards.reading import read_sample

L, H = shardgen.L, shardgen.H
# TensorRT-LLM's default capture on the tiny target (ids 1, 3, 4), then id -1 (post-norm).
LAYERS = [Layer(2), Layer(L // 2), Layer(L - 3), Layer(-1)]

# The rule set as read from TensorRT-LLM's code (docs/layers.md): a change here is a change
# of what the tool claims about TensorRT-LLM, and needs the releases re-read.
PINNED = {
    "releases": ["1.0.0", "1.1.0", "1.2.0", "1.2.1"],
    "default_ids_32": [1, 15, 28],
    "layers_32": ["residual:2", "residual:16", "residual:29"],
}


def _record(seed: int, key: str = "aux_hidden_states", request_id: int = 1) -> dict:
    """One request's dict as ``_process_request`` builds it: the post-norm state (id -1,
    always the last slice of the buffer) as ``hidden_state``, every captured layer before it
    concatenated as ``key``."""
    rec = shardgen.record(seed)
    states = [rec.states[layer].to(torch.bfloat16) for layer in LAYERS]
    return {
        "id": request_id,
        "input_ids": rec.input_ids.to(torch.long),
        "hidden_state": states[-1].clone(),
        key: torch.cat(states[:-1], dim=-1).clone(),
    }


def _write(root: Path, seeds: range, per_file: int = 2, key: str = "aux_hidden_states") -> None:
    """``per_file`` (``write_interval``) requests per ``data_{iter}.pt``, as the saver names it."""
    root.mkdir(parents=True, exist_ok=True)
    batch: list[dict] = []
    for n, seed in enumerate(seeds, start=1):
        batch.append(_record(seed, key, n))
        if n % per_file == 0:
            torch.save(batch, root / f"data_{n}.pt")
            batch = []


# -- engine ---------------------------------------------------------------------------------


def test_pinned_snapshot():
    res = ENGINES["trtllm"].resolve(32, None, None, "1.2.1")
    assert list(trtllm.RELEASES) == PINNED["releases"]
    assert trtllm.default_ids(32) == PINNED["default_ids_32"]
    assert [str(x) for x in res.layers] == PINNED["layers_32"]


def test_resolve_default_json(cli):
    res = cli("resolve", "--engine", "trtllm", "--version", "1.2.1", "--num-layers", "32", "--json")
    data = json.loads(res.stdout)
    assert data["layers"] == ["residual:2", "residual:16", "residual:29"]
    assert data["engine"] == "trtllm" and data["version"] == "1.2.1"


def test_ids_are_layer_outputs_sorted_set_final_last(cli):
    args = ["--engine", "trtllm", "--version", "1.0.0", "--num-layers", "32", "--json"]
    res = cli("resolve", *args, "--ids", "20", "-1", "0", "20", "31")
    data = json.loads(res.stdout)
    assert data["layers"] == ["residual:1", "residual:21", "residual:32", "final_norm"]
    assert any("reordered" in n for n in data["notes"])
    assert any("duplicate" in n for n in data["notes"])


def test_out_of_range_id_is_a_silent_problem(cli):
    res = cli(
        "resolve", "--engine", "trtllm", "--version", "1.2.0", "--num-layers", "32",
        "--ids", "2", "16", "32", "--json",
    )  # fmt: skip
    data = json.loads(res.stdout)
    assert res.returncode == 1
    assert data["layers"] == ["residual:3", "residual:17"]
    assert [p["code"] for p in data["problems"]] == ["EC511"]


def test_small_model_default_is_refused():
    with pytest.raises(Exception, match="more than 5"):
        ENGINES["trtllm"].resolve(5, None, None, "1.2.1")
    assert ENGINES["trtllm"].resolve(5, [0, 2, 4], None, "1.2.1").layers[-1] == Layer(5)


def test_versions(cli):
    assert ENGINES["trtllm"].versions(">=1.2") == ["1.2.0", "1.2.1"]
    res = cli("resolve", "--engine", "trtllm", "--version", "0.9.0", "--num-layers", "32")
    assert res.returncode == 2
    assert "not a covered release" in res.stderr + res.stdout


def test_draft_config_ids_are_never_read():
    draft = DraftConfig.__new__(DraftConfig)
    assert ENGINES["trtllm"].draft_ids(draft) is None
    assert ids_for(ENGINES["trtllm"], [Layer(0), Layer(3)], 32, None, "1.2.1") is None
    assert ids_for(ENGINES["trtllm"], [Layer(3), Layer(17)], 32, None, "1.2.1") == (2, 16)


@pytest.mark.parametrize(
    ("slots", "code"),
    [
        (["residual:2", "residual:4", "residual:5"], 0),
        (["residual:3", "residual:5", "residual:6"], 1),
    ],
)
def test_contract_serving_trtllm_layout(tmp_path, cli, slots, code):
    text = tiny_contract("tiny-trtllm", [*slots, "final_norm"], "trtllm", ">=1.1")
    path = tmp_path / "c.yaml"
    path.write_text(text)
    res = cli("check", path, "--checks", "layout", "--no-sharpness")
    assert res.returncode == code, res.stdout + res.stderr
    if code:
        assert "EC501" in res.stdout


def test_a_draft_config_with_ids_is_not_what_trtllm_reads(tmp_path, cli):
    """TensorRT-LLM takes its ids from its launch config: the draft config's ids are
    reported as unread (EC508) and the contract's aux_layer_ids are what is resolved."""
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(
        '{"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64,'
        ' "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 4, 5]}}'
    )
    slots = ["residual:3", "residual:5", "residual:6", "final_norm"]
    text = tiny_contract("tiny-trtllm", slots, "trtllm", "1.2.1")
    path = tmp_path / "c.yaml"
    path.write_text(text + "  draft_config: draft\n  aux_layer_ids: [2, 4, 5]\n")
    res = cli("check", path, "--checks", "layout", "--no-sharpness")
    assert res.returncode == 0, res.stdout + res.stderr  # [2, 4, 5] feed residual:3, 5, 6
    assert "EC508" in res.stdout and "launch config" in res.stdout
    assert "Traceback" not in res.stderr


# -- shard format ----------------------------------------------------------------------------


def test_read_first_record_of_a_saved_list(tmp_path):
    _write(tmp_path, range(4))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data_2.pt", "data_4.pt"]
    sample = read_sample(tmp_path / "data_2.pt")
    assert sample.format.name == "trtllm"
    slots, problems = sample.slots()
    assert problems == [] and len(slots) == 4
    assert all(s.tensor.shape[-1] == H for s in slots)


@pytest.mark.slow
@pytest.mark.parametrize("key", ["aux_hidden_states", "hidden_state_features"])
def test_inspect_infer_check(tmp_path, cli, key):
    _write(tmp_path / "trusted", range(4), key=key)
    _write(tmp_path / "other", range(100, 104), key=key)
    insp = cli("inspect", tmp_path / "trusted" / "data_2.pt")
    assert insp.returncode == 0, insp.stderr
    assert "trtllm" in insp.stdout
    contract = tmp_path / "c.yaml"
    res = cli(
        "infer", tmp_path / "trusted", "--num-layers", L, "--vocab-size", shardgen.VOCAB,
        "-o", contract,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    data = yaml.safe_load(contract.read_text())
    assert data["training"]["format"] == "trtllm"
    assert [s["layer"] for s in data["training"]["slots"]] == [str(x) for x in LAYERS]
    good = cli("check", contract, tmp_path / "other", "--sample", "all", "--no-sharpness")
    assert good.returncode == 0, good.stdout + good.stderr


@pytest.mark.slow
def test_check_catches_swapped_slots(tmp_path, cli):
    _write(tmp_path / "trusted", range(4))
    contract = tmp_path / "c.yaml"
    assert cli("infer", tmp_path / "trusted", "--num-layers", L, "-o", contract).returncode == 0
    bad = _record(200)
    aux = bad["aux_hidden_states"]
    bad["aux_hidden_states"] = torch.cat([aux[:, H : 2 * H], aux[:, :H], aux[:, 2 * H :]], -1)
    (tmp_path / "bad").mkdir()
    torch.save([bad], tmp_path / "bad" / "data_1.pt")
    res = cli("check", contract, tmp_path / "bad", "--sample", "all", "--no-sharpness")
    assert res.returncode == 1, res.stdout
    assert "EC401" in res.stdout
