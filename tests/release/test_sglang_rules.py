"""The generated SGLang table (engines/sglang_rules.json): a pinned snapshot, no network.

``tox -e sglang-releases`` regenerates it from every release wheel and compares
(tests/release/test_sglang_releases.py); here the file's own consistency and the cases it was made
to get right: Gemma3 and MiniMax-M3 served, index 0 the embedding where the forward makes
it so (DeepSeek/Kimi >= 0.5.14), refused where residual is None (Llama's loop).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_eagle_contract.engines import sglang_table as table


def resolve_json(cli, *args):
    res = cli("resolve", "--engine", "sglang", "--num-layers", "61", *map(str, args), "--json")
    return res, json.loads(res.stdout) if res.stdout.strip() else None


def _table(cli, *args):
    return resolve_json(cli, *args, "--source", "table")


def test_the_snapshot_is_consistent():
    data = json.loads(Path(table.__file__).with_name("sglang_rules.json").read_text("utf-8"))
    releases = data["releases"]
    assert releases == sorted(releases, key=table.parse_version)
    assert set(data["sha256"]) == set(releases)
    assert all(re.fullmatch(r"[0-9a-f]{64}", d) for d in data["sha256"].values())
    assert releases[0] == "0.4.0" and table.NEWEST == releases[-1]
    for row in table.ROWS:
        assert row.since in releases and (row.until is None or row.until in releases)
        assert row.rule in table.RULES or row.rule == "unfollowed"
        assert row.index0 in {"embed", "error", "none", "unknown"}
        assert row.beyond in {"dropped", "raises", "final", "none", "unknown"}
    for arch in table.KNOWN_ARCHS - set(table.NO_CAPTURE):  # one row per arch and release
        for release in releases:
            v = table.parse_version(release)
            assert sum(arch in r.archs and r.covers(v) for r in table.ROWS) <= 1


@pytest.mark.parametrize("version", ["0.5.12", "0.5.18", "0.5.23"])
def test_gemma3_is_served_and_reaches_index_l(cli, version):
    res, out = _table(cli, "--arch", "Gemma3ForCausalLM", "--version", version, "--ids", 2, 30, 60)
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["residual:3", "residual:31", "residual:61"]  # index L captured


@pytest.mark.parametrize("version", ["0.5.18", "0.5.21", "0.5.23"])
def test_minimax_m3_vl_is_served_and_shifts_its_default(cli, version):
    arch = "MiniMaxM3SparseForConditionalGeneration"
    res, out = _table(cli, "--arch", arch, "--version", version)
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["residual:3", "residual:31", "residual:59"]  # default + 1


@pytest.mark.parametrize("arch", ["DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration"])
@pytest.mark.parametrize("version", ["0.5.14", "0.5.17", "0.5.23"])
def test_index_0_is_the_embedding_after_prepare_attn(cli, arch, version):
    res, out = _table(cli, "--arch", arch, "--version", version, "--ids", 0, 3, 31)
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["embed", "residual:3", "residual:31"]
    assert any("embedding output" in note for note in out["notes"])


@pytest.mark.parametrize(
    ("arch", "version"),
    [("DeepseekV3ForCausalLM", "0.5.13"), ("Glm4MoeLiteForCausalLM", "0.5.14")],
)
def test_index_0_is_refused_where_the_loop_adds_a_none_residual(cli, arch, version):
    res, out = _table(cli, "--arch", arch, "--version", version, "--ids", 0, 3, 31)
    assert res.returncode == 2 and out["layers"] is None
    assert "residual is None" in out["refused"]


def test_llama_loop_gives_no_embedding():
    row = table.row_for("LlamaForCausalLM", "0.5.14")
    assert row is not None and row.index0 == "error" and row.site.startswith("loop")
    assert table.apply_rule(row.rule, [0, 3, 31], 61) == [1, 4, 32]  # no id reaches index 0


def test_cuda_graph_regime_is_derived(cli):
    assert table.graph_default("0.5.10") and not table.graph_default("0.5.11")
    _, out = _table(cli, "--arch", "LlamaForCausalLM", "--version", "0.5.10", "--ids", 1, 2, 3)
    assert "EC514" in [p["code"] for p in out["problems"]]


def test_post_releases_are_read():
    # EAGLE-3 arrived in a post release: 0.4.4 has none, 0.4.4.post2 has the method
    assert table.row_for("LlamaForCausalLM", "0.4.4") is None
    assert table.row_for("LlamaForCausalLM", "0.4.4.post2") is not None
    assert table.parse_version("0.5.13.post1") > table.parse_version("0.5.13")


def test_unknown_architecture_lists_every_name_whole(cli):
    res, _ = _table(cli, "--arch", "FalconForCausalLM", "--version", "0.5.23")
    assert res.returncode == 2
    text = res.stderr.split("do:", 1)[1]
    names = {n.strip() for n in text.replace("\n", " ").split(",") if n.strip()}
    names = {n.split()[0] for n in names}
    assert names == table.SERVED_ARCHS and len(names) >= 50
    assert "Gemma3ForCausalLM" in names and "MiniMaxM3SparseForConditionalGeneration" in names


@pytest.mark.parametrize(
    ("arch", "words"),
    [
        ("LlamaForCausalLMEagle3", "never captures"),
        ("MindSporeForCausalLM", "delegates to the model it loads"),
    ],
)
def test_classes_that_cannot_capture_are_refused_with_the_reason(cli, arch, words):
    res, _ = _table(cli, "--arch", arch, "--version", "0.5.23", "--ids", 2, 30, 58)
    assert res.returncode == 2 and words in res.stderr
