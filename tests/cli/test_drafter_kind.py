"""Issue 39 item 1: the drafter kind mlx-vlm really runs, read per release from its wheels
(engines/mlx_drafters_rules.json; scripts/gen_mlx_drafters.py). mlx-vlm's server and
``mlx_vlm.generate`` pick the kind from the draft config's ``model_type`` (else
``speculators_model_type``): a draft laid out as SGLang and SpecForge write it
(``"model_type": "llama"``, ``LlamaForCausalLMEagle3``) launched without ``--draft-kind`` runs
as ``dflash`` (the default); ``--draft-kind eagle3`` pointed at an MTP head is overridden to
``mtp`` with a log line (vllm-mlx#762 reported a refusal of such a pair: mlx-vlm's
``validate_drafter_compatibility`` refuses it for a caller passing its own kind); an MTP
head of another width than the target is then dropped and the server decodes token by token
(EC524). The good case: a
draft in speculators' layout (``"speculators_model_type": "eagle3"``, as
``Eagle3SpeculatorConfig`` writes it; mlx-vlm's own ``Eagle3Config`` reads that layout)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import no_traceback

CONTRACT = """\
contract: mlx-kind
version: 1
target: {{arch: Qwen3_5ForConditionalGeneration, num_hidden_layers: 32, hidden_size: 4096,
  vocab_size: 151936}}
serving:
  engine: mlx
  version: "{version}"
  arch: qwen3_5
  draft_config: draft/config.json
"""
SERVER = "mlx_vlm.server --model mlx-community/Qwen3.5-9B-4bit --draft-model draft --port 8080"

SPECFORGE = {  # SGLang / SpecForge layout: a Llama config, the EAGLE-3 ids nested
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 1,
    "target_hidden_size": 4096,
    "eagle_aux_hidden_state_layer_ids": [2, 16, 29],
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 16, 29]},
}
SPECULATORS = {  # speculators' Eagle3SpeculatorConfig layout: no model_type of its own
    "architectures": ["Eagle3Speculator"],
    "speculators_model_type": "eagle3",
    "transformer_layer_config": {"model_type": "llama", "hidden_size": 4096},
    "target_hidden_size": 4096,
    "eagle_aux_hidden_state_layer_ids": [2, 16, 29],
}
MTP_HEAD = {  # mlx-vlm's own Qwen3.5 MTP drafter type, made for a 2,560-wide target
    "model_type": "qwen3_5_mtp",
    "text_config": {"hidden_size": 2560, "num_hidden_layers": 1},
    "eagle_aux_hidden_state_layer_ids": [2, 16, 29],
}


def project(root: Path, config: dict[str, Any], version: str = "0.7.10") -> Path:
    (root / "draft").mkdir()
    (root / "draft" / "config.json").write_text(json.dumps(config))
    contract = root / "c.yaml"
    contract.write_text(CONTRACT.format(version=version))
    return contract


def codes(cli: Any, contract: Path, launch: str, *extra: object) -> tuple[list[dict], Any]:
    res = cli("check", contract, "--checks", "layout", "--serving-args", launch, "--json", *extra)
    no_traceback(res)
    found = [f for u in json.loads(res.stdout)["units"] for f in u["findings"]]
    return [f for f in found if f["code"] in ("EC523", "EC524")], res


def test_a_specforge_draft_without_draft_kind_runs_as_dflash_ec523(cli, tmp_path):
    contract = project(tmp_path, SPECFORGE)
    found, res = codes(cli, contract, SERVER)
    assert [f["code"] for f in found] == ["EC523"], res.stdout
    (f,) = found
    assert "runs the draft draft as a 'dflash' drafter, not EAGLE-3" in f["message"]
    assert "model_type 'llama' names no kind" in f["message"]
    assert '"model_type": "eagle3"' in f["hint"] and "--draft-kind eagle3" in f["hint"]
    assert res.returncode == 1


def test_every_release_read_gives_the_span(cli, tmp_path):
    contract = project(tmp_path, SPECFORGE, ">=0.6.0")
    (f,) = codes(cli, contract, SERVER)[0]
    assert "mlx-vlm 0.6.0 to 0.7.10 runs" in f["message"]


def test_draft_kind_eagle3_on_an_mtp_head_is_overridden_and_dropped(cli, tmp_path):
    """--draft-kind eagle3 at a qwen3_5_mtp head: mlx-vlm runs it as mtp (EC523); the head is
    2,560 wide, the target 4,096: the drafter is dropped, no speculation (EC524)."""
    contract = project(tmp_path, MTP_HEAD)
    found, res = codes(cli, contract, SERVER + " --draft-kind eagle3")
    assert [f["code"] for f in found] == ["EC523", "EC524"], res.stdout
    assert "requires 'mtp', which overrides --draft-kind eagle3" in found[0]["message"]
    assert "the MTP drafter is 2560 wide, the target 4096" in found[1]["message"]
    assert "falls back to autoregressive generation" in found[1]["message"]


def test_the_kind_from_the_serving_environment(cli, tmp_path):
    """The server reads MLX_VLM_DRAFT_KIND where no --draft-kind is given (--serving-env)."""
    contract = project(tmp_path, SPECFORGE)
    env = tmp_path / "env.txt"
    env.write_text("MLX_VLM_DRAFT_KIND=mtp\n")
    found, _ = codes(cli, contract, SERVER, "--serving-env", env)
    assert "the launch asks for it (--draft-kind mtp)" in found[0]["message"]


@pytest.mark.parametrize(
    ("config", "launch"),
    [
        (SPECULATORS, SERVER),
        (SPECULATORS, SERVER + " --draft-kind eagle3"),
        (SPECFORGE, "python -m sglang.launch_server --model-path m"),  # not mlx-vlm
    ],
    ids=["speculators-auto", "speculators-eagle3", "no-mlx-launch"],
)
def test_a_draft_run_as_eagle3_passes(cli, tmp_path, config, launch):
    contract = project(tmp_path, config)
    found, res = codes(cli, contract, launch)
    assert found == [], res.stdout


def test_doctor_method_seam(cli, tmp_path):
    contract = project(tmp_path, SPECFORGE)
    res = cli(
        "doctor",
        "--draft",
        tmp_path / "draft",
        "--contract",
        contract,
        "--serving-args",
        SERVER,
        "--json",
    )
    no_traceback(res)
    seams = {s["name"]: s for s in json.loads(res.stdout)["seams"]}
    assert seams["method"]["status"] == "fail", seams["method"]
    assert [f["code"] for f in seams["method"]["findings"]] == ["EC523"]
    good = tmp_path / "good"
    good.mkdir()
    fine = project(good, SPECULATORS)
    ok = cli(
        "doctor", "--draft", good / "draft", "--contract", fine, "--serving-args", SERVER, "--json"
    )
    seams = {s["name"]: s for s in json.loads(ok.stdout)["seams"]}
    assert seams["method"]["status"] == "pass", seams["method"]


@pytest.mark.parametrize(
    "config",
    [
        {"model_type": 5, "text_config": [1], "backbone_hidden_size": "x"},
        {"model_type": "foo_mtp", "text_config": {"hidden_size": None}},
        {"model_type": ["eagle3"], "num_nextn_predict_layers": True},
    ],
    ids=["wrong-types", "null-width", "list-type"],
)
def test_hostile_draft_configs_end_in_findings(cli, tmp_path, config):
    contract = project(tmp_path, config)
    found, res = codes(cli, contract, SERVER + " --draft-kind=eagle3")
    every = [f["code"] for u in json.loads(res.stdout)["units"] for f in u["findings"]]
    assert res.returncode == 1 and every, res.stdout + res.stderr  # a finding, not a pass
    kinds = [f["code"] for f in found]
    assert kinds in ([], ["EC523"], ["EC524"], ["EC523", "EC524"]), kinds


def test_an_unlisted_mtp_type_on_0_6_is_run_as_dflash_then_dropped(cli, tmp_path):
    """mlx-vlm 0.6.17 lists no glm5_next_mtp (0.7.1 adds it): without --draft-kind it resolves
    to dflash, then its validation, which reads the ``mtp`` in the name, refuses the pair and
    the server drops the drafter. On 0.7.10 the same head runs as mtp, kept (its width is the
    target's): EC523 alone."""
    head = {"model_type": "glm5_next_mtp", "hidden_size": 4096}
    found, res = codes(cli, project(tmp_path, head, "0.6.17"), SERVER)
    assert [f["code"] for f in found] == ["EC523", "EC524"], res.stdout
    assert "'dflash' drafter" in found[0]["message"]
    assert "requires kind 'mtp' for model_type 'glm5_next_mtp'" in found[1]["message"]
    new = tmp_path / "new"
    new.mkdir()
    found, _ = codes(cli, project(new, head, "0.7.10"), SERVER)
    assert [f["code"] for f in found] == ["EC523"]
    assert "'mtp' drafter" in found[0]["message"]
