"""Hostile DSpark inputs (issue 38): SpecForge-layout DSpark shards (``specforge-dspark``) that
are not what they claim, and DFlash-family draft checkpoints whose fc or config is garbage
(EC901's reading). Each ends in a finding for its file or a clean refusal (exit 1 or 2), never
a traceback; the good shard beside the bad ones is still checked."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from test_hostile_dflash import each_bad_shard_is_a_finding_for_its_file
from test_hostile_dflash import setup as write_project
from test_hostile_shards import run

pytestmark = pytest.mark.slow

T, H, L = 12, 16, 8
TAPS = [1, 3, 5]


def good(**over: object) -> dict[str, object]:
    g = torch.Generator().manual_seed(0)
    data: dict[str, object] = {
        "input_ids": torch.arange(T),
        "loss_mask": torch.ones(T, dtype=torch.long),
        "hidden_states": (torch.randn(1, T, 3 * H, generator=g) * 3).bfloat16(),
        "target_last_hidden_states": torch.randn(1, T, H, generator=g).bfloat16(),
    }
    return data | over


SHARDS: dict[str, tuple[dict[str, object], str]] = {
    "hidden_states a string": (good(hidden_states="x"), "EC203"),
    "target a string": (good(target_last_hidden_states="x"), "EC203"),
    "target twice as wide": (good(target_last_hidden_states=torch.zeros(1, T, 2 * H)), "EC207"),
    "two taps, not three": (good(hidden_states=torch.zeros(1, T, 2 * H)), "EC204"),
    "T + 3 rows": (good(hidden_states=torch.zeros(1, T + 3, 3 * H)), "EC202"),
    "NaN target": (good(target_last_hidden_states=torch.full((1, T, H), math.nan)), "EC304"),
}

CONTRACT = f"""\
contract: hostile-dspark
version: 1
method: dspark
target: {{arch: Qwen3ForCausalLM, num_hidden_layers: {L}, hidden_size: {H}, vocab_size: 64}}
training:
  format: specforge-dspark
  shards: shards
  slots:
    - {{layer: residual:2}}
    - {{layer: residual:4}}
    - {{layer: residual:6}}
    - {{layer: final_norm}}
serving:
  engine: sglang
  version: "0.5.23"
  draft_config: draft
"""
DRAFT = {
    "architectures": ["DSparkDraftModel"],
    "dflash_config": {"mask_token_id": 60, "target_layer_ids": TAPS, "markov_rank": 4},
    "dspark_markov_rank": 4,
    "hidden_size": H,
    "num_hidden_layers": 3,
}


def setup(root: Path, draft: dict[str, object]) -> Path:
    return write_project(root, draft, CONTRACT)


def test_each_bad_dspark_shard_is_a_finding_for_its_file(tmp_path):
    each_bad_shard_is_a_finding_for_its_file(tmp_path, setup(tmp_path, DRAFT), SHARDS, good())


@pytest.mark.parametrize(
    "weights,config",
    [
        ({"fc.weight": torch.zeros(H)}, DRAFT),  # 1-d
        ({"fc.weight": torch.zeros(0, 0)}, DRAFT),
        ({"encoder.fc.weight": torch.zeros(H, 7)}, DRAFT),
        ({"fc.weight": torch.zeros(H, 3 * H)}, {**DRAFT, "dspark_target_layer_ids": "1,3,5"}),
        ({"fc.weight": torch.zeros(H, 3 * H)}, {**DRAFT, "num_hidden_layers": True}),
        ({"fc.weight": torch.zeros(H, 3 * H)}, {**DRAFT, "hidden_size": "wide"}),
    ],
    ids=["fc 1-d", "fc empty", "encoder fc narrow", "ids a string", "layers bool", "hidden word"],
)
def test_hostile_dflash_family_checkpoints_are_findings(tmp_path, weights, config):
    setup(tmp_path, config)
    save_file(weights, str(tmp_path / "draft" / "model.safetensors"))
    res = run("check", tmp_path / "c.yaml", "--checks", "draft", "--json")
    assert res.returncode in (0, 1, 2), res.stderr
    if res.returncode == 1:
        assert json.loads(res.stdout)["findings"], res.stdout
