"""A contract served by an engine whose method rules are read from source (sglang-jax DFlash
and MTP, ATOM DSpark and MTP, ollama DFlash and MTP, TensorRT-LLM DFlash and standalone
DSpark), by lmdeploy's MTP or by tpu-inference's / vllm-ascend's DFlash, driven from
outside: real shards, drafts and contracts on disk, ``eagle-contract check``, ``matrix``,
``doctor`` and ``resolve --want`` as subprocesses (issue 38).

The expected layers are docs/layers.md's statement of the engines' rules, not the tool's
output: each of these DFlash / DSpark paths captures tap t as the output of target layer t
(``residual:t+1``); sglang-jax's Llama-family targets without a tap list fall back to the
EAGLE-3 capture before layers (2, L//2, L-3); the MTP paths hand the head the final norm's
output. The shards are the tiny 8-layer target's speculators capture, its slots named
``residual:2, 4, 5`` beside ``residual:8`` unless a test names others, so taps ``[1, 3, 4]``
are the trained ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import shardgen
from test_method_engine_contracts import SLOTS, assert_shifted, codes, fold, setup

L = shardgen.L  # 8
QWEN3, LLAMA, LAGUNA = "Qwen3ForCausalLM", "LlamaForCausalLM", "LagunaForCausalLM"
QWEN35 = "Qwen3_5ForConditionalGeneration"
GOOD_TAPS = [1, 3, 4]  # residual:2, 4, 5: the shards' fc slots
SHIFTED = [2, 4, 5]  # taps written as layer numbers: fed residual:3, 5, 6


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("source-engine-shards")
    shardgen.write_good(root, "speculators", range(2))
    return root


def dflash(taps: list[int] | None, **more: object) -> dict:
    dc = {} if taps is None else {"target_layer_ids": taps}
    draft = {"architectures": ["DFlashDraftModel"], "num_hidden_layers": 3, "dflash_config": dc}
    return {**draft, **more}


def dflash2(taps: list[int]) -> dict:
    """mistral.rs takes a draft as DFlash2 by its architecture and selector keys."""
    config = dflash(taps, architectures=["DFlash2DraftModel"])
    config["dflash_config"] |= {"selector_rank": 4, "conv_group_size": 2}
    return config


def dspark(taps: list[int], **more: object) -> dict:
    """A standalone DSpark draft (no dspark_block_size: not DeepSeek-V4's inline head)."""
    return {"architectures": ["DSparkDraftModel"], "dspark_target_layer_ids": taps, **more}


def atom_dspark(taps: list[int]) -> dict:
    """ATOM routes a draft with dspark_block_size to DSpark, its ids inline."""
    return dspark(taps, dspark_block_size=8)


CASES = [  # engine, method, target arch, the draft config for taps
    ("sglang-jax", "dflash", QWEN3, dflash),
    ("sglang-jax", "dflash", LLAMA, dflash),
    ("ollama", "dflash", LAGUNA, lambda t: dflash(t, num_target_layers=L)),
    ("atom", "dspark", "DeepseekV3ForCausalLM", atom_dspark),
    ("trtllm", "dflash", QWEN3, dflash),
    ("trtllm", "dspark", QWEN3, dspark),
    ("mistralrs", "dflash", QWEN35, dflash),
    ("mistralrs", "dflash2", QWEN35, dflash2),
    ("openvino", "dflash", QWEN3, dflash),
    # read from their releases (engines/tpu.py, engines/ascend.py): a contract without
    # serving.version is the newest release read in matrix, not a release named 'any'
    ("tpu-inference", "dflash", QWEN3, dflash),
    ("vllm-ascend", "dflash", QWEN3, dflash),
]
IDS = [f"{e}-{m}-{a}" for e, m, a, _ in CASES]


@pytest.mark.parametrize("engine,method,arch,draft", CASES, ids=IDS)
def test_the_trained_taps_pass(cli, tmp_path, shards, engine, method, arch, draft):
    c = setup(tmp_path, shards, engine, method, arch, draft(GOOD_TAPS))
    rc, found, _ = codes(cli, c, "--checks", "layout")
    assert rc == 0 and found == [], found


@pytest.mark.parametrize("engine,method,arch,draft", CASES, ids=IDS)
def test_a_one_tap_shift_is_ec501(cli, tmp_path, shards, engine, method, arch, draft):
    c = setup(tmp_path, shards, engine, method, arch, draft(SHIFTED))
    rc, found, report = codes(cli, c, "--checks", "layout")
    assert rc == 1 and found == ["EC501"]
    assert_shifted(report, engine)


def test_findings_name_the_source_snapshot_read(cli, tmp_path, shards):
    """sglang-jax's DFlash is read from main alone: the finding says which commit, and that no
    release was checked; TensorRT-LLM's likewise."""
    c = setup(tmp_path, shards, "sglang-jax", "dflash", QWEN3, dflash(SHIFTED))
    _, _, report = codes(cli, c, "--checks", "layout")
    said = fold(report["findings"][0]["message"])
    assert "sglang-jax main at cddbf6f1" in said and "no release checked" in said
    c = setup(tmp_path, shards, "trtllm", "dflash", QWEN3, dflash(SHIFTED))
    _, _, report = codes(cli, c, "--checks", "layout")
    assert "trtllm main (no release checked" in fold(report["findings"][0]["message"])


def test_atom_dspark_standalone_key_in_the_fix(cli, tmp_path, shards):
    """A standalone ATOM DSpark draft (*DSparkModel) is read from its top-level
    target_layer_ids: the fix names that key."""
    config = {"architectures": ["Qwen3DSparkModel"], "target_layer_ids": SHIFTED}
    c = setup(tmp_path, shards, "atom", "dspark", "DeepseekV3ForCausalLM", config)
    rc, found, report = codes(cli, c, "--checks", "layout")
    assert rc == 1 and found == ["EC501"]
    assert "target_layer_ids: [1, 3, 4]" in report["findings"][0]["hint"]


def test_sglang_jax_llama_guessed_list_is_ec522(cli, tmp_path, shards):
    """No tap list: sglang-jax's Llama falls back to the EAGLE-3 capture before layers
    (2, L//2, L-3) = residual:2, 4, 5 on L = 8; shards trained on residual:2, 3, 5 differ."""
    slots = ("residual:2", "residual:3", "residual:5", f"residual:{L}")
    c = setup(tmp_path, shards, "sglang-jax", "dflash", LLAMA, dflash(None), slots=slots)
    rc, found, report = codes(cli, c, "--checks", "layout")
    assert rc == 1 and found == ["EC522"]
    f = report["findings"][0]
    assert f["extra"]["guessed_ids"] == [2, 4, 5]
    assert f["found"] == "residual:2, residual:4, residual:5"
    assert "[1, 2, 4]" in f["hint"]
    # the guess that names the trained layers is no finding
    c = setup(tmp_path, shards, "sglang-jax", "dflash", LLAMA, dflash(None))
    assert codes(cli, c, "--checks", "layout")[:2] == (0, [])


@pytest.mark.parametrize(
    "engine,method,arch,config,why",
    [
        ("sglang-jax", "dflash", QWEN3, dflash(None), "requires explicit target layer ids"),
        ("sglang-jax", "dflash", LLAMA, dflash([-1, 3, 4]), "residual is None"),
        ("ollama", "dflash", LAGUNA, dflash([4, 3, 1], num_target_layers=L), "ascending"),
        ("ollama", "dflash", LAGUNA, dflash(GOOD_TAPS, num_target_layers=L + 1), "trained for 9"),
        ("ollama", "dflash", QWEN3, dflash(GOOD_TAPS), "not read there as a DFlash target"),
        ("atom", "dspark", QWEN3, atom_dspark([4, 3, 1]), "strictly increasing"),
        ("trtllm", "dflash", QWEN3, dflash([1, 3, L]), "uninitialised"),
    ],
)
def test_the_engines_own_refusals_are_ec510(
    cli, tmp_path, shards, engine, method, arch, config, why
):
    c = setup(tmp_path, shards, engine, method, arch, config)
    rc, found, report = codes(cli, c, "--checks", "layout")
    assert rc == 1 and found == ["EC510"]
    assert why in fold(report["findings"][0]["message"])


MTP = [  # engine, target arch: each hands the head the final norm's output
    ("sglang-jax", "MiMoForCausalLM"),
    ("atom", "Qwen3NextForCausalLM"),
    ("ollama", "Qwen3_5ForConditionalGeneration"),
    ("lmdeploy", QWEN3),
    ("mistralrs", QWEN35),
]
MTP_DRAFT = {"architectures": ["Qwen3NextMTP"], "mtp_num_hidden_layers": 1}


@pytest.mark.parametrize("engine,arch", MTP)
def test_mtp_state_mismatch_is_ec501(cli, tmp_path, shards, engine, arch):
    """The shards' target slot is residual:8 (pre-norm); these engines feed final_norm."""
    c = setup(tmp_path, shards, engine, "mtp", arch, MTP_DRAFT)
    rc, found, report = codes(cli, c, "--checks", "layout")
    assert rc == 1 and found == ["EC501"]
    assert report["findings"][0]["found"] == "final_norm"
    slots = (*SLOTS[:3], "final_norm")
    good = setup(tmp_path, shards, engine, "mtp", arch, MTP_DRAFT, slots=slots)
    assert codes(cli, good, "--checks", "layout")[:2] == (0, [])


def test_atom_mtp_on_deepseek_v4_is_refused(cli, tmp_path, shards):
    c = setup(tmp_path, shards, "atom", "mtp", "DeepseekV4ForCausalLM", MTP_DRAFT)
    rc, found, report = codes(cli, c, "--checks", "layout")
    assert rc == 1 and found == ["EC510"]
    assert "hyper-connection stack" in fold(report["findings"][0]["message"])


@pytest.mark.parametrize(
    "engine,method",
    [("sglang-jax", "dspark"), ("ollama", "dspark"), ("atom", "dflash"), ("trtllm", "mtp")],
)
def test_a_method_they_do_not_serve_is_a_usage_error(cli, tmp_path, shards, engine, method):
    c = setup(tmp_path, shards, engine, method, QWEN3, dflash(GOOD_TAPS))
    res = cli("check", c, "--checks", "layout")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    said = fold(res.stderr)
    assert f"{engine} serves method" in said and f"not {method}" in said
    assert "read from its source" in said


# -- matrix, doctor and resolve --want ------------------------------------------------------


@pytest.mark.parametrize("engine,method,arch,draft", CASES, ids=IDS)
def test_matrix_has_their_rows(cli, tmp_path, shards, engine, method, arch, draft):
    c = setup(tmp_path, shards, engine, method, arch, draft(SHIFTED))
    res = cli("matrix", c, "--json")
    assert res.returncode == 1, res.stderr
    rows = json.loads(res.stdout)["rows"]
    own = [r for r in rows if r["own"]]
    assert own and all(r["engine"] == engine for r in own)
    assert own[-1]["feeds"] == ["residual:3", "residual:5", "residual:6"]
    assert own[-1]["fix"] == GOOD_TAPS
    good = setup(tmp_path, shards, engine, method, arch, draft(GOOD_TAPS))
    res = cli("matrix", good, "--json")
    assert res.returncode == 0, res.stdout


def test_a_dflash_matrix_carries_the_source_engines_rows(cli, tmp_path, shards):
    """An SGLang DFlash contract's matrix (and EC501's table) names sglang-jax's snapshot,
    TensorRT-LLM's main and ollama's releases beside the engines read from wheels."""
    c = setup(tmp_path, shards, "sglang", "dflash", QWEN3, dflash(SHIFTED))
    rows = json.loads(cli("matrix", c, "--json").stdout)["rows"]
    versions = {(r["engine"], v) for r in rows for v in r["versions"]}
    assert ("sglang-jax", "main@cddbf6f1") in versions
    assert ("trtllm", "main") in versions
    assert ("ollama", "v0.32.15") in versions
    assert ("lmdeploy", "0.18.0") in versions  # lmdeploy's DFlash, from its wheels
    said = fold(cli("matrix", c).stdout)  # the text names a snapshot read as such
    assert "main@cddbf6f1" in said and "no release checked" in said


def test_an_mtp_matrix_carries_lmdeploy_and_the_source_engines(cli, tmp_path, shards):
    c = setup(tmp_path, shards, "lmdeploy", "mtp", QWEN3, MTP_DRAFT, version="0.18.0")
    res = cli("matrix", c, "--json")
    rows = json.loads(res.stdout)["rows"]
    own = [r for r in rows if r["own"]]
    assert res.returncode == 1 and [r["engine"] for r in own] == ["lmdeploy"]
    assert own[0]["feeds"] == ["final_norm"]
    assert {"sglang-jax", "atom", "ollama", "lmdeploy"} <= {r["engine"] for r in rows}


@pytest.mark.parametrize(
    "engine,method,arch,config,verdict",
    [
        ("sglang-jax", "dflash", QWEN3, dflash(SHIFTED), "fail"),
        ("sglang-jax", "dflash", QWEN3, dflash(GOOD_TAPS), "pass"),
        ("ollama", "dflash", LAGUNA, dflash(GOOD_TAPS, num_target_layers=L), "pass"),
        ("trtllm", "dspark", QWEN3, dspark(SHIFTED), "fail"),
        ("ollama", "mtp", "Qwen3_5ForConditionalGeneration", MTP_DRAFT, "fail"),
    ],
)
def test_doctor_layout_seam(cli, tmp_path, shards, engine, method, arch, config, verdict):
    c = setup(tmp_path, shards, engine, method, arch, config)
    res = cli("doctor", "--draft", tmp_path / "draft", "--contract", c, "--json")
    assert "Traceback" not in res.stderr, res.stderr
    seams = {s["name"]: s for s in json.loads(res.stdout)["seams"]}
    assert seams["layout"]["status"] == verdict


def test_doctor_takes_a_snapshot_version(cli, tmp_path, shards):
    c = setup(tmp_path, shards, "sglang-jax", "dflash", QWEN3, dflash(GOOD_TAPS), version="main")
    res = cli("doctor", "--draft", tmp_path / "draft", "--contract", c, "--json")
    assert "Traceback" not in res.stderr and res.returncode in (0, 1), res.stderr
    seams = {s["name"]: s for s in json.loads(res.stdout)["seams"]}
    assert seams["layout"]["status"] == "pass"


@pytest.mark.parametrize(
    "engine,method,arch,key",
    [
        ("sglang-jax", "dflash", QWEN3, "dflash_config.target_layer_ids"),
        ("ollama", "dflash", LAGUNA, "dflash_config.target_layer_ids"),
        ("atom", "dspark", QWEN3, "dspark_target_layer_ids"),
        ("trtllm", "dspark", QWEN3, "dspark_target_layer_ids"),
        ("lmdeploy", "dflash", QWEN3, "dflash_config.target_layer_ids"),
    ],
)
def test_resolve_want(cli, engine, method, arch, key):
    res = cli(
        "resolve", "--engine", engine, "--method", method, "--arch", arch, "--num-layers", L,
        "--want", "residual:2", "residual:4", "residual:5", "--json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["taps"] == GOOD_TAPS and out["config_key"] == key


def test_resolve_want_names_the_snapshot(cli):
    res = cli(
        "resolve", "--engine", "sglang-jax", "--method", "dflash", "--arch", QWEN3,
        "--num-layers", L, "--want", "residual:2", "residual:4",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    said = fold(res.stdout)
    assert "sglang-jax main at cddbf6f1" in said and "no release checked" in said
    assert "= [1, 3]" in said


def test_resolve_want_of_mtp_is_a_usage_error(cli):
    res = cli(
        "resolve", "--engine", "ollama", "--method", "mtp", "--arch", "Qwen3NextForCausalLM",
        "--num-layers", L, "--want", "final_norm",
    )  # fmt: skip
    assert res.returncode == 2 and "no tap list" in fold(res.stderr)


def test_resolve_want_the_embedding_where_the_engine_taps_it(cli):
    """ATOM's DSpark id -1 is the embedding: --want embed answers it."""
    res = cli(
        "resolve", "--engine", "atom", "--method", "dspark", "--num-layers", L,
        "--want", "embed", "residual:4", "--json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["taps"] == [-1, 3]


def test_resolve_want_says_why_none_does(cli):
    res = cli(
        "resolve", "--engine", "ollama", "--method", "dflash", "--arch", QWEN3,
        "--num-layers", L, "--want", "residual:2", "residual:4",
    )  # fmt: skip
    assert res.returncode == 1
    assert "not read there as a DFlash target" in fold(res.stderr)
