"""Issue 39 item 1 (in part): the mode a launch really runs. A draft config with
``eagle_config.use_aux_hidden_state: false`` (the case ATOM and tpu-inference#2841 reported)
makes SGLang from 0.5.9 (its model runner reads the key, default true; 0.5.6 reads no such
key) and vLLM (``llama_eagle3.py`` builds no fc) feed an EAGLE-3 draft trained on three aux
states the last hidden state alone, with no error: EC521, through ``check --checks layout``
and ``doctor`` as a user runs them; the same draft with the flag true or absent, or served by
a release that ignores it, passes that rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import no_traceback

CONTRACT = """\
contract: aux-flag
version: 1
target: {{arch: LlamaForCausalLM, num_hidden_layers: 32, hidden_size: 4096, vocab_size: 128256}}
training:
  format: specforge
  slots:
    - {{layer: residual:2}}
    - {{layer: residual:16}}
    - {{layer: residual:29}}
    - {{layer: final_norm}}
serving:
  engine: {engine}
  version: "{version}"
  draft_config: draft/config.json
"""
SGLANG_EAGLE3 = (
    "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct "
    "--speculative-algorithm EAGLE3 --speculative-draft-model-path draft "
    "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
)


def write_draft(folder: Path, eagle: dict[str, object]) -> Path:
    """A SpecForge-style Llama EAGLE-3 draft's config.json in ``folder``, its ``eagle_config``
    as given."""
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLMEagle3"],
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "num_hidden_layers": 1,
                "intermediate_size": 14336,
                "vocab_size": 128256,
                "draft_vocab_size": 32000,
                "target_hidden_size": 4096,
                "eagle_config": eagle,
            }
        )
    )
    return folder


def project(root: Path, engine: str, version: str, use_aux: bool | None) -> Path:
    """A contract trained on three aux states and a SpecForge-style EAGLE-3 draft config
    (ids 1, 15, 28: SGLang and vLLM capture before id + 1), its flag as given."""
    eagle: dict[str, object] = {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}
    if use_aux is not None:
        eagle["use_aux_hidden_state"] = use_aux
    write_draft(root / "draft", eagle)
    contract = root / "c.yaml"
    contract.write_text(CONTRACT.format(engine=engine, version=version))
    return contract


@pytest.mark.parametrize(("engine", "version"), [("sglang", "0.5.23"), ("sglang", "0.5.9")])
def test_use_aux_hidden_state_false_under_eagle3_is_ec521(cli, tmp_path, engine, version):
    contract = project(tmp_path, engine, version, use_aux=False)
    res = cli("check", contract, "--checks", "layout", "--serving-args", SGLANG_EAGLE3)
    no_traceback(res)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "EC521 aux-states-off" in res.stdout
    assert "feeds the EAGLE-3 draft the last hidden state alone" in res.stdout
    assert "trained on 3 aux states" in res.stdout


def test_vllm_reads_the_flag_too(cli, tmp_path):
    contract = project(tmp_path, "vllm", "0.33.0", use_aux=False)
    res = cli("check", contract, "--checks", "layout")
    no_traceback(res)
    assert "EC521 aux-states-off" in res.stdout, res.stdout + res.stderr
    assert "llama_eagle3.py" in res.stdout
    old = tmp_path / "old"
    old.mkdir()
    before = project(old, "vllm", "0.11.0", use_aux=False)  # its llama_eagle3.py reads no flag
    assert "EC521" not in cli("check", before, "--checks", "layout").stdout


@pytest.mark.parametrize("use_aux", [True, None], ids=["true", "absent"])
def test_the_flag_true_or_absent_passes(cli, tmp_path, use_aux):
    contract = project(tmp_path, "sglang", "0.5.23", use_aux=use_aux)
    res = cli("check", contract, "--checks", "layout", "--serving-args", SGLANG_EAGLE3)
    assert "EC521" not in res.stdout, res.stdout
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_release_that_ignores_the_flag_passes(cli, tmp_path):
    """sglang 0.5.6 reads no use_aux_hidden_state: EAGLE3 captures the aux states anyway."""
    contract = project(tmp_path, "sglang", "0.5.6", use_aux=False)
    res = cli("check", contract, "--checks", "layout", "--serving-args", SGLANG_EAGLE3)
    assert "EC521" not in res.stdout, res.stdout


def test_doctor_fails_its_method_seam(cli, tmp_path):
    contract = project(tmp_path, "sglang", "0.5.23", use_aux=False)
    res = cli("doctor", "--draft", tmp_path / "draft", "--contract", contract, "--json")
    no_traceback(res)
    seams = {s["name"]: s for s in json.loads(res.stdout)["seams"]}
    assert seams["method"]["status"] == "fail", seams["method"]
    assert [f["code"] for f in seams["method"]["findings"]] == ["EC521"]
    assert res.returncode == 1
    good = tmp_path / "good"
    good.mkdir()
    fine = project(good, "sglang", "0.5.23", use_aux=None)
    ok = cli("doctor", "--draft", good / "draft", "--contract", fine, "--json")
    seams = {s["name"]: s for s in json.loads(ok.stdout)["seams"]}
    assert seams["method"]["status"] == "pass", seams["method"]
