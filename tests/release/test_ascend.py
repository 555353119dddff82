"""vllm-ascend by release, through ``eagle-contract resolve --engine vllm-ascend``: up to
0.18.0 its runner sets the target's default aux layers and never reads the draft's ids (EC508
where they differ, even though vLLM's own runner of the same release reads them); 0.23.0 reads
them as vLLM 0.23.0's V1 runner does; MiniMax-M2 gets its own patched capture in 0.18.0; and a
pinned snapshot of the rules derived from the sdists (``engines/ascend_rules.json``, checked
against them by test_ascend_releases.py)."""

from __future__ import annotations

import json

import pytest

from pytest_eagle_contract.engines import ascend


def _resolve(cli, version, *args):
    res = cli(
        "resolve", "--engine", "vllm-ascend", "--version", version, "--num-layers", "32",
        *map(str, args), "--json",
    )  # fmt: skip
    assert "Traceback" not in res.stderr, res.stderr
    return res, json.loads(res.stdout) if res.stdout.strip() else None


DEFAULT = ["residual:2", "residual:16", "residual:29"]


@pytest.mark.parametrize("version", ["0.11.0", "0.13.0", "0.18.0"])
def test_up_to_0_18_the_drafts_ids_are_silently_not_used(cli, tmp_path, version):
    draft = tmp_path / "config.json"
    draft.write_text(json.dumps({"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}))
    res, out = _resolve(cli, version, "--draft-config", draft)
    assert res.returncode == 1 and out["layers"] == DEFAULT and out["ids"] == [2, 16, 29]
    assert [p["code"] for p in out["problems"]] == ["EC508"]
    res, out = _resolve(cli, version, "--ids", 2, 16, 29)  # its default: nothing lost
    assert res.returncode == 0 and out["layers"] == DEFAULT and not out["problems"]


def test_0_23_reads_the_drafts_ids_as_vllm_0_23_does(cli, tmp_path):
    nested = tmp_path / "config.json"
    nested.write_text(
        json.dumps({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}})
    )
    for version in ("0.23.0", "0.23.0.post1"):
        res, out = _resolve(cli, version, "--draft-config", nested)
        assert res.returncode == 0 and out["layers"] == ["residual:1", "residual:15", "residual:28"]
        assert "_get_eagle3_aux_layers_from_config" in out["source"]
    # the same draft on 0.18.0: its default, whatever the draft says
    res, out = _resolve(cli, "0.18.0", "--draft-config", nested)
    assert out["layers"] == DEFAULT and "[1, 15, 28] are not used" in out["problems"][0]["message"]


def test_minimax_m2_patched_capture_and_want(cli):
    res, out = _resolve(cli, "0.18.0", "--arch", "MiniMaxM2ForCausalLM", "--ids", 2, 16, 29)
    assert res.returncode == 0 and out["layers"] == DEFAULT
    assert "patch_minimax_m2.py" in out["source"]
    res = cli(
        "resolve", "--engine", "vllm-ascend", "--version", "0.18.0", "--num-layers", "32",
        "--want", "residual:3", "residual:16", "residual:29",
    )  # fmt: skip
    assert res.returncode == 2 and "nearest it feeds: residual:2, residual:16, residual:29" in (
        res.stdout
    )
    res = cli(
        "resolve", "--engine", "vllm-ascend", "--version", "0.23.0", "--num-layers", "32",
        "--want", "residual:3", "residual:16", "residual:29",
    )  # fmt: skip
    assert res.returncode == 0 and '"eagle_aux_hidden_state_layer_ids": [3, 16, 29]' in res.stdout


@pytest.mark.parametrize(
    ("version", "says"),
    [("0.9.1", "has no EAGLE-3 (first in 0.11.0)"), ("0.24.0", "newer than the built-in rules")],
)
def test_releases_it_does_not_answer_for(cli, version, says):
    res, out = _resolve(cli, version, "--ids", 2, 16, 29)
    assert res.returncode == 2 and says in out["refused"], out


def test_pinned_snapshot_of_the_rules_from_the_releases():
    assert ascend.releases() == ["0.11.0", "0.13.0", "0.18.0", "0.23.0", "0.23.0.post1"]
    rows = ascend._TABLE.data()["rows"]
    assert [(r["since"], r["vllm"], r["ids_from"]) for r in rows] == [
        ("0.11.0", "0.11.0", "default"),
        ("0.13.0", "0.13.0", "default"),
        ("0.18.0", "0.18.0", "default"),
        ("0.23.0", "0.23.0", "config"),
    ]
    assert [p["arch"] for p in rows[2]["patched"]] == ["MiniMaxM2ForCausalLM"]
    # DFlash from 0.23.0: its own proposer, vLLM's runner sets the aux layers (issue 38)
    assert [r["dflash"] is not None for r in rows] == [False, False, False, True]
    assert rows[3]["proposers"]["dflash"] == "AscendDflashProposer"
    assert rows[3]["dflash"]["aux"] == "vllm"
    assert not any(r["dflash2"] or r["dspark"] for r in rows)
