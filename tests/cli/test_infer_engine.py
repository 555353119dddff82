"""Issue 24 item 6: ``infer`` drafts the serving section for the engine the shards'
pipeline pairs with (speculators' files are made with vLLM and their drafts carry vLLM ids:
vLLM, not SGLang), or the one ``--engine`` names. Shards of random states with the layers
named by ``--layers`` (the serving section reads only the layers), a draft config as each
trainer exports it, and one CLI run whose contract ``check`` then accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from conftest import no_traceback

from pytest_eagle_contract.authoring.infer import infer_contract
from pytest_eagle_contract.errors import UsageError
from pytest_eagle_contract.shards.writing import save, shard_dict, shard_name

L, H, V = 8, 16, 64
# what each trainer's defaults capture on an 8-layer target (docs/layers.md)
LAYERS = {
    "speculators": ["residual:2", "residual:4", "residual:5", "residual:8"],
    "specforge": ["residual:2", "residual:4", "residual:5", "final_norm"],
}


def shards(root: Path, fmt: str, n: int = 3) -> Path:
    g = torch.Generator().manual_seed(0)
    for i in range(n):
        t = 24
        ids = torch.randint(0, V, (t,), generator=g)
        mask = torch.ones(t, dtype=torch.long)
        slots = [(torch.randn(t, H, generator=g) * (k + 1)).bfloat16() for k in range(4)]
        save(root / fmt / shard_name(fmt, i), shard_dict(fmt, ids, mask, slots))
    return root / fmt


def serving(text: str) -> dict[str, object]:
    section: dict[str, object] = yaml.safe_load(text)["serving"]
    return section


def drafted(root: Path, fmt: str, layers: list[str] | None = None, **options: object) -> str:
    """The contract ``infer`` drafts (each run includes its sharpness self-test: ~2 s)."""
    return infer_contract(
        [shards(root, fmt)],
        name="x",
        layers=layers or LAYERS[fmt],
        num_layers=L,
        vocab_size=V,
        arch="LlamaForCausalLM",
        **options,
    )


@pytest.mark.slow
def test_speculators_files_get_a_vllm_serving_section(tmp_path):
    section = serving(drafted(tmp_path, "speculators"))
    assert section["engine"] == "vllm"  # was sglang
    assert "aux_layer_ids" not in section  # vLLM's default (2, L//2, L-3) is what was captured
    assert "vLLM's default capture" in drafted(tmp_path / "again", "speculators")


@pytest.mark.slow
def test_a_speculators_draft_is_read_as_vllm_reads_it(tmp_path):
    draft = tmp_path / "draft"
    draft.mkdir()
    # speculators' export: the ids at the top level, vLLM's numbering (id k = residual:k)
    (draft / "config.json").write_text(json.dumps({"eagle_aux_hidden_state_layer_ids": [2, 4, 5]}))
    text = drafted(tmp_path, "speculators", draft=draft)
    section = serving(text)
    assert section["engine"] == "vllm" and str(section["version"]).startswith(">=")
    assert "aux ids [2, 4, 5]" in text and "no release feeds" not in text
    # under SGLang, which reads only eagle_config's nested ids: its default, said as such
    sglang = drafted(tmp_path / "sg", "speculators", draft=draft, engine="sglang")
    assert serving(sglang)["engine"] == "sglang" and "aux ids the default" in sglang


@pytest.mark.slow
def test_specforge_files_stay_with_sglang_unless_engine_says(tmp_path):
    layers = ["residual:1", "residual:3", "residual:6", "final_norm"]  # no engine's default
    section = serving(drafted(tmp_path, "specforge", layers))
    assert section["engine"] == "sglang"
    assert section["aux_layer_ids"] == [0, 2, 5]  # SGLang reads id k as residual:k+1
    section = serving(drafted(tmp_path / "v", "specforge", layers, engine="vllm"))
    assert section["engine"] == "vllm"
    assert section["aux_layer_ids"] == [1, 3, 6]  # vLLM reads id k as residual:k


def test_a_trainer_is_not_an_engine_to_serve_with(tmp_path):
    with pytest.raises(UsageError, match="a trainer, not a serving engine"):
        drafted(tmp_path, "speculators", engine="speculators")


@pytest.mark.slow
def test_cli_infer_engine_then_check(tmp_path, cli):
    folder = shards(tmp_path, "specforge")
    contract = tmp_path / "c.yaml"
    res = cli(
        "infer", folder, "--layers", *LAYERS["specforge"], "--num-layers", L,
        "--vocab-size", V, "--arch", "LlamaForCausalLM", "--engine", "vllm", "-o", contract,
    )  # fmt: skip
    no_traceback(res)
    assert res.returncode == 0, res.stderr
    assert serving(contract.read_text())["engine"] == "vllm"
    check = cli("check", contract, "--checks", "layout")
    assert check.returncode == 0, check.stdout + check.stderr
