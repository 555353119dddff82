"""speculators-format DFlash drafts (issue 38): ``speculators_model_type: dflash`` with
``aux_hidden_state_layer_ids`` (vLLM ids, id k = residual:k), ``mask_token_id`` and
``block_size`` at the top level and the draft length in
``speculators_config.proposal_methods[0].speculative_tokens``.

The configs are written here by this project's code in the layout speculators 0.9.0's
``DFlashSpeculatorConfig`` (``models/dflash/config.py``) and ``SpeculatorsConfig`` save, so
these tests need no trainer installed; ``tests/cli/test_dflash_trainer_exports.py`` runs
speculators' own ``DFlashConverter`` where it is (CI). What vLLM 0.34.0 does
with them was read from its wheel (``transformers_utils/configs/speculators/algos.py``
``update_dflash``: the ids under ``eagle_aux_hidden_state_layer_ids`` as they are, so every
release feeds residual:k; ``transformer_utils/config.py``: ``speculative_tokens`` is
``num_speculative_tokens`` where the launch sets none). speculators before #456 wrote
``speculative_tokens = block_size``: one draft token more than a block of B can draft.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serving_cases import resolve_json

L, H, VOCAB = 8, 64, 512
IDS = [2, 4, 6]  # vLLM ids: residual:2, residual:4, residual:6


def speculators_config(speculative_tokens: int, block: int = 8) -> dict:
    return {
        "architectures": ["DFlashSpeculator"],
        "speculators_model_type": "dflash",
        "speculators_version": "0.9.0",
        "transformer_layer_config": {
            "model_type": "qwen3",
            "hidden_size": H,
            "num_hidden_layers": 1,
            "vocab_size": VOCAB,
        },
        "draft_vocab_size": VOCAB,
        "block_size": block,
        "aux_hidden_state_layer_ids": IDS,
        "mask_token_id": 500,
        "sample_from_anchor": False,
        "speculators_config": {
            "algorithm": "dflash",
            "proposal_methods": [
                {"proposal_type": "greedy", "speculative_tokens": speculative_tokens}
            ],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": "target", "architectures": ["Qwen3ForCausalLM"]},
        },
    }


def write(tmp_path: Path, data: dict) -> Path:
    d = tmp_path / "draft"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(data))
    return d


@pytest.mark.parametrize("version", ["0.21.0", "0.34.0"])
def test_vllm_reads_the_aux_ids_as_they_are(cli, tmp_path, version):
    """vLLM maps the ids to eagle_aux_hidden_state_layer_ids (read as they are in every
    release) beside dflash_config.target_layer_ids = ids - 1: no EC516 on 0.21."""
    res, out = resolve_json(
        cli, "--method", "dflash", "--engine", "vllm", "--version", version,
        "--arch", "Qwen3ForCausalLM", "--num-layers", L,
        "--draft-config", write(tmp_path, speculators_config(7)),
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert out["layers"] == [f"residual:{k}" for k in IDS] and out["problems"] == []


def test_other_engines_refuse_a_speculators_config(cli, tmp_path):
    res = cli(
        "resolve", "--method", "dflash", "--engine", "sglang", "--num-layers", L,
        "--draft-config", write(tmp_path, speculators_config(7)),
    )  # fmt: skip
    assert res.returncode == 2 and "speculators-format DFlash config" in res.stderr


CONTRACT = f"""\
contract: spec-dflash
version: 1
method: dflash
target: {{arch: Qwen3ForCausalLM, num_hidden_layers: {L}, hidden_size: {H}, vocab_size: {VOCAB}}}
training:
  format: speculators
  slots:
    - {{layer: residual:2}}
    - {{layer: residual:4}}
    - {{layer: residual:6}}
    - {{layer: residual:{L}}}
serving:
  engine: vllm
  version: "0.34.0"
  draft_config: draft
"""


def check(cli, tmp_path: Path, data: dict, launch: str | None = None):
    write(tmp_path, data)
    text = CONTRACT + (f"  launch: {json.dumps(launch)}\n" if launch else "")
    (tmp_path / "c.yaml").write_text(text)
    res = cli("check", tmp_path / "c.yaml", "--checks", "layout", "--json")
    assert "Traceback" not in res.stderr, res.stderr
    return res, [(f["code"], f["severity"]) for f in json.loads(res.stdout)["findings"]]


def test_post_456_speculative_tokens_pass(cli, tmp_path):
    res, found = check(cli, tmp_path, speculators_config(7))
    assert res.returncode == 0 and found == []


def test_pre_456_speculative_tokens_are_ec523(cli, tmp_path):
    """speculators before #456 wrote speculative_tokens = block_size (8): vLLM drafts 8."""
    res, found = check(cli, tmp_path, speculators_config(8))
    assert res.returncode == 1 and found == [("EC526", "error")]
    assert "speculative_tokens 8" in res.stdout and "#456" in res.stdout
    launch = "vllm serve draft --speculative-config '{\"num_speculative_tokens\": 7}'"
    res, found = check(cli, tmp_path, speculators_config(8), launch)  # the launch wins
    assert res.returncode == 0 and found == []


def test_infer_names_a_speculators_dflash_draft(cli, tmp_path):
    """``infer --draft`` writes method: dflash for a speculators-format DFlash draft
    (architectures DFlashSpeculator)."""
    import torch
    import yaml

    from pytest_eagle_contract.shards.writing import save, shard_dict, shard_name

    root = tmp_path / "shards"
    g = torch.Generator().manual_seed(0)
    for i in range(3):
        ids = torch.randint(0, VOCAB, (24,), generator=g)
        slots = [(torch.randn(24, 16, generator=g) * (k + 1)).bfloat16() for k in range(4)]
        save(
            root / shard_name("specforge", i),
            shard_dict("specforge", ids, torch.ones(24, dtype=torch.long), slots),
        )
    out = tmp_path / "c.yaml"
    res = cli(
        "infer", root, "--layers", "residual:2", "residual:4", "residual:6", "final_norm",
        "--num-layers", L, "--engine", "vllm", "--draft",
        write(tmp_path, speculators_config(7)), "-o", out,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    data = yaml.safe_load(out.read_text())
    assert data["method"] == "dflash" and data["serving"]["engine"] == "vllm"


def test_infer_names_the_slots_from_the_aux_ids(cli, tmp_path):
    """Without ``--layers``, ``infer --draft`` names speculators' slots from the DFlash
    config's ``aux_hidden_state_layer_ids`` (not the EAGLE-3 defaults, which put residual:5
    third on 8 layers) then the last layer, and ``check`` passes what it wrote; without
    ``--num-layers`` the last layer cannot be named: a usage error."""
    import torch
    import yaml

    from pytest_eagle_contract.shards.writing import save, shard_dict, shard_name

    root = tmp_path / "shards"
    g = torch.Generator().manual_seed(0)
    for i in range(6):
        ids = torch.randint(0, VOCAB, (32,), generator=g)
        slots = []
        for k in [*IDS, L]:
            x = torch.randn(32, 16, generator=g)
            slots.append((x / x.norm(dim=-1, keepdim=True) * 4.0 * k).bfloat16())
        save(
            root / shard_name("speculators", i),
            shard_dict("speculators", ids, torch.ones(32, dtype=torch.long), slots),
        )
    draft = write(tmp_path, speculators_config(7))
    out = tmp_path / "c.yaml"
    res = cli("infer", root, "--num-layers", L, "--draft", draft, "-o", out)
    assert res.returncode == 0, res.stderr
    data = yaml.safe_load(out.read_text())
    assert data["method"] == "dflash" and data["serving"]["engine"] == "vllm"
    layers = [s["layer"] for s in data["training"]["slots"]]
    assert layers == [*(f"residual:{k}" for k in IDS), f"residual:{L}"]
    assert "aux_hidden_state_layer_ids [2, 4, 6]" in out.read_text()
    res = cli("check", out, "--checks", "layout")
    assert res.returncode == 0, res.stdout + res.stderr

    res = cli("infer", root, "--draft", draft, "-o", tmp_path / "x.yaml")
    assert res.returncode == 2 and "--num-layers" in res.stderr
    negative = speculators_config(7) | {"aux_hidden_state_layer_ids": [-1, 4, 6]}
    res = cli(
        "infer",
        root,
        "--num-layers",
        L,
        "--draft",
        write(tmp_path, negative),
        "-o",
        tmp_path / "n.yaml",
    )
    assert res.returncode == 2 and "negative id" in res.stderr, res.stderr


def test_a_shifted_aux_list_is_ec501_with_the_aux_ids_that_fix_it(cli, tmp_path):
    """The fix names the key a speculators config holds (aux_hidden_state_layer_ids, vLLM ids
    as they are), not dflash_config.target_layer_ids (one less)."""
    data = speculators_config(7) | {"aux_hidden_state_layer_ids": [2, 4, 5]}
    res, found = check(cli, tmp_path, data)
    assert res.returncode == 1 and found == [("EC501", "error")]
    [finding] = json.loads(res.stdout)["findings"]
    assert finding["hint"].endswith("aux_hidden_state_layer_ids: [2, 4, 6]"), finding["hint"]
    assert "vLLM id k = residual:k" in finding["hint"]
