"""Hostile DFlash inputs (issue 38): SpecForge-layout DFlash shards that are not what they
claim, and DFlash draft configs whose block size, mask token or taps are garbage. Each ends
in a finding for its file or a clean refusal (exit 1 or 2), never a traceback; the good shard
beside the bad ones is still checked."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from test_hostile_shards import codes_by_file, run

pytestmark = pytest.mark.slow

T, H, L = 12, 16, 8
TAPS = [1, 3, 5]


def good(**over: object) -> dict[str, object]:
    g = torch.Generator().manual_seed(0)
    data: dict[str, object] = {
        "input_ids": torch.arange(T),
        "loss_mask": torch.ones(T, dtype=torch.long),
        "hidden_states": (torch.randn(1, T, 3 * H, generator=g) * 3).bfloat16(),
    }
    return data | over


SHARDS: dict[str, tuple[dict[str, object], str]] = {
    "hidden_states a string": (good(hidden_states="x"), "EC203"),
    "hidden_states 0-d": (good(hidden_states=torch.tensor(1.0)), "EC203"),
    "width not a multiple of H": (good(hidden_states=torch.zeros(1, T, 3 * H + 1)), "EC203"),
    "two taps, not three": (good(hidden_states=torch.zeros(1, T, 2 * H)), "EC204"),
    "T + 3 rows": (good(hidden_states=torch.zeros(1, T + 3, 3 * H)), "EC202"),
    "NaN states": (good(hidden_states=torch.full((1, T, 3 * H), math.nan)), "EC304"),
    "no hidden_states": ({"input_ids": torch.arange(T), "loss_mask": torch.ones(T)}, "EC101"),
}

CONTRACT = f"""\
contract: hostile-dflash
version: 1
method: dflash
target: {{arch: LlamaForCausalLM, num_hidden_layers: {L}, hidden_size: {H}, vocab_size: 64}}
training:
  format: specforge-dflash
  shards: shards
  target_slot: null
  slots:
    - {{layer: residual:2}}
    - {{layer: residual:4}}
    - {{layer: residual:6}}
serving:
  engine: sglang
  version: "0.5.23"
  draft_config: draft
  launch: "python -m sglang.launch_server --speculative-num-draft-tokens 8"
"""
DRAFT = {
    "architectures": ["DFlashDraftModel"],
    "block_size": 8,
    "dflash_config": {"mask_token_id": 60, "target_layer_ids": TAPS},
    "hidden_size": H,
    "num_hidden_layers": 3,
    "num_target_layers": L,
}


def setup(root: Path, draft: dict[str, object], contract: str = CONTRACT) -> Path:
    """The draft's config.json, the contract and the shards' folder under ``root``
    (tests/hostile/test_hostile_dspark.py uses it with its own contract)."""
    folder = root / "shards" / "rows_0-2000"
    folder.mkdir(parents=True, exist_ok=True)
    (root / "draft").mkdir(exist_ok=True)
    (root / "draft" / "config.json").write_text(json.dumps(draft))
    (root / "c.yaml").write_text(contract)
    return folder


def each_bad_shard_is_a_finding_for_its_file(
    root: Path, folder: Path, shards: dict[str, tuple[object, str]], good_shard: object
) -> None:
    """Every hostile shard beside a good one: a finding of its code for that file, none of
    the reading codes for the good one."""
    for i, (shard, _) in enumerate(shards.values()):
        torch.save(shard, folder / f"data_{i}.ckpt")
    torch.save(good_shard, folder / "data_999.ckpt")
    report = root / "report.json"
    res = run("check", root / "c.yaml", "--sample", "all", "--no-sharpness", "--json", report)
    assert res.returncode == 1
    found = codes_by_file(report)
    for i, (name, (_, code)) in enumerate(shards.items()):
        assert code in found.get(f"rows_0-2000/data_{i}.ckpt", set()), (name, sorted(found.items()))
    assert not found.get("rows_0-2000/data_999.ckpt", set()) & {"EC001", "EC201", "EC203"}


def test_each_bad_dflash_shard_is_a_finding_for_its_file(tmp_path):
    each_bad_shard_is_a_finding_for_its_file(tmp_path, setup(tmp_path, DRAFT), SHARDS, good())


@pytest.mark.parametrize(
    "draft",
    [
        {**DRAFT, "block_size": "eight"},
        {**DRAFT, "block_size": -3},
        {**DRAFT, "dflash_config": {"mask_token_id": "x", "target_layer_ids": TAPS}},
        {**DRAFT, "dflash_config": {"mask_token_id": 10**30, "target_layer_ids": TAPS}},
        {**DRAFT, "dflash_config": {"mask_token_id": 1, "target_layer_ids": "1,3,5"}},
        {**DRAFT, "dflash_config": {"mask_token_id": 1, "target_layer_ids": [10**30, -(10**30)]}},
        {**DRAFT, "num_target_layers": 10**30},
        {**DRAFT, "num_hidden_layers": True},
    ],
    ids=lambda d: json.dumps(d)[:60],
)
def test_hostile_dflash_draft_configs_are_findings(tmp_path, draft):
    folder = setup(tmp_path, draft)
    torch.save(good(), folder / "data_0.ckpt")
    res = run("check", tmp_path / "c.yaml", "--checks", "layout", "--json")
    if res.returncode != 2:  # a usage error, else a finding (a warning where SGLang warns)
        assert json.loads(res.stdout)["findings"], res.stdout


def test_a_block_size_of_0_is_a_malformed_draft_config(tmp_path):
    """A block is the anchor then block_size - 1 masked positions: block_size 0 holds not
    even the anchor. It is a malformed draft config (EC510), not an EC526 about a draft
    'trained on blocks of 0 (-1 drafted tokens)'."""
    folder = setup(tmp_path, {**DRAFT, "block_size": 0})
    torch.save(good(), folder / "data_0.ckpt")
    res = run("check", tmp_path / "c.yaml", "--checks", "layout", "--json")
    found = json.loads(res.stdout)["findings"]
    assert [f["code"] for f in found] == ["EC510"], found
    assert "block_size must be at least 1 (the anchor), not 0" in found[0]["message"]


def test_a_dflash_config_that_is_no_object_is_read_as_absent(tmp_path):
    """SGLang reads ``dflash_config`` with ``.get``: a list there is read here as no
    dflash_config (no taps, no mask token: the fallback and EC527's warning), no crash."""
    folder = setup(tmp_path, {**DRAFT, "dflash_config": [1, 2]})
    torch.save(good(), folder / "data_0.ckpt")
    res = run("check", tmp_path / "c.yaml", "--checks", "layout", "--json")
    codes = {f["code"] for f in json.loads(res.stdout)["findings"]}
    assert "EC527" in codes
