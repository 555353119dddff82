"""The drafts that read the target's hidden states on the engines read from source (issue 38):
``resolve --engine sglang-jax|atom|ollama|trtllm|trtllm-autodeploy --method M``, by
``engines/source_method_rules.json`` (``scripts/gen_source_method_rules.py``; docs/layers.md,
"Methods per engine and release").

The expected layers are docs/layers.md's statement of each rule (sglang-jax: capture before
layer t + 1; ATOM: layer t's output, -1 the embedding; ollama: layer i's output; TensorRT-LLM:
the EAGLE-3 capture call, layer t's output), not copied from the tool's output; each rule has
a case where it applies and the draft is refused or flagged. ``tests/release/
test_source_method_rules.py`` (``tox -e source-methods``) re-derives the table from the clones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serving_cases import resolve_json


def fold(text: str) -> str:
    return " ".join(text.split())


def ask(cli, engine, method, *more, layers=36):
    return resolve_json(cli, "--engine", engine, "--method", method, "--num-layers", layers, *more)


def draft(tmp_path: Path, config: dict, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return path


def refused(res, out) -> str:
    assert res.returncode == 2, res.stdout + res.stderr
    assert out["layers"] is None
    return fold(out["refused"])


# --- sglang-jax DFlash (main cddbf6f1) ----------------------------------------------------


def test_sglang_jax_dflash_taps_the_output_of_layer_t(cli, tmp_path):
    path = draft(tmp_path, {"dflash_config": {"target_layer_ids": [1, 9, 17, 25, 33]}})
    res, out = ask(
        cli, "sglang-jax", "dflash", "--draft-config", path, "--arch", "Qwen3ForCausalLM"
    )
    assert res.returncode == 0, res.stderr
    assert out["layers"] == [f"residual:{t + 1}" for t in (1, 9, 17, 25, 33)]
    assert out["problems"] == [] and "snapshot at cddbf6f1" in " ".join(out["notes"])


def test_sglang_jax_dflash_reads_the_top_level_key_too(cli, tmp_path):
    path = draft(tmp_path, {"target_layer_ids": [2, 5]})
    res, out = ask(
        cli, "sglang-jax", "dflash", "--draft-config", path, "--arch", "LlamaForCausalLM"
    )
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["residual:3", "residual:6"]


def test_sglang_jax_dflash_llama_guesses_the_eagle3_layers(cli, tmp_path):
    path = draft(tmp_path, {"architectures": ["DFlashDraftModel"], "num_hidden_layers": 5})
    res, out = ask(
        cli, "sglang-jax", "dflash", "--draft-config", path, "--arch", "LlamaForCausalLM", layers=32
    )
    assert res.returncode == 1, res.stderr
    assert out["layers"] == ["residual:2", "residual:16", "residual:29"]
    assert [p["code"] for p in out["problems"]] == ["EC522"]


def test_sglang_jax_dflash_qwen3_refuses_a_draft_without_ids(cli, tmp_path):
    path = draft(tmp_path, {"num_hidden_layers": 5})
    res, out = ask(
        cli, "sglang-jax", "dflash", "--draft-config", path, "--arch", "Qwen3ForCausalLM"
    )
    assert "DFLASH requires explicit target layer ids" in refused(res, out)


@pytest.mark.parametrize(
    ("arch", "ids", "why"),
    [
        ("Qwen3ForCausalLM", ["35"], "captured before no layer"),
        ("LlamaForCausalLM", ["-1", "4"], "residual is None"),
        ("Qwen3ForCausalLM", ["4", "4"], "repeated ids"),
        ("MiniMaxM3ForCausalLM", ["4"], "not read there as a DFlash target"),
    ],
)
def test_sglang_jax_dflash_refusals(cli, arch, ids, why):
    res, out = ask(cli, "sglang-jax", "dflash", "--ids", *ids, "--arch", arch)
    assert why in refused(res, out)


def test_sglang_jax_dflash_minus_one_is_the_embedding_on_qwen3(cli):
    res, out = ask(cli, "sglang-jax", "dflash", "--ids", -1, 4, "--arch", "Qwen3ForCausalLM")
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["embed", "residual:5"]


def test_sglang_jax_dflash_no_tag_has_it(cli):
    res, out = ask(cli, "sglang-jax", "dflash", "--ids", 1, "--arch", "Qwen3ForCausalLM",
                   "--version", "v0.0.3rc98")  # fmt: skip
    assert "has no DFlash path" in refused(res, out)


def test_sglang_jax_mtp_feeds_the_final_norm(cli):
    res, out = ask(cli, "sglang-jax", "mtp", "--arch", "MiMoV2FlashForCausalLM", "--version", "rc0")
    assert res.returncode == 2  # "rc0" names no tag: the tags are v0.0.3rc*
    res, out = ask(
        cli, "sglang-jax", "mtp", "--arch", "MiMoV2FlashForCausalLM", "--version", "v0.0.3rc0"
    )
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["final_norm"]
    res, out = ask(cli, "sglang-jax", "mtp", "--arch", "DeepseekV3ForCausalLM")
    assert "not read there as a MTP target" in refused(res, out)


# --- ATOM DSpark (main ffdf3bb5) and MTP (v0.1.3 on) ---------------------------------------


def test_atom_dspark_standalone_reads_target_layer_ids(cli, tmp_path):
    path = draft(tmp_path, {"architectures": ["K3DSparkModel"], "target_layer_ids": [-1, 3, 30]})
    res, out = ask(cli, "atom", "dspark", "--draft-config", path, layers=61)
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["embed", "residual:4", "residual:31"]


def test_atom_dspark_inline_reads_dspark_target_layer_ids(cli, tmp_path):
    config = {"dspark_block_size": 8, "dspark_target_layer_ids": [10, 20], "target_layer_ids": [1]}
    path = draft(tmp_path, config)
    res, out = ask(cli, "atom", "dspark", "--draft-config", path, layers=61)
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["residual:11", "residual:21"]


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ({"architectures": ["K3DSparkModel"]}, "no target_layer_ids"),
        ({"architectures": ["K3DSparkModel"], "target_layer_ids": [9, 3]}, "strictly increasing"),
        ({"architectures": ["K3DSparkModel"], "target_layer_ids": [3, 61]}, "out of range"),
        ({"dspark_target_layer_ids": [3]}, "not routed to DSpark"),
    ],
)
def test_atom_dspark_refusals(cli, tmp_path, config, why):
    res, out = ask(cli, "atom", "dspark", "--draft-config", draft(tmp_path, config), layers=61)
    assert why in refused(res, out)


def test_atom_mtp(cli):
    res, out = ask(cli, "atom", "mtp", "--arch", "DeepseekV3ForCausalLM", "--version", "v0.1.3")
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["final_norm"]
    res, out = ask(cli, "atom", "mtp", "--arch", "DeepseekV4ForCausalLM")
    assert "hyper-connection stack" in refused(res, out)
    res, out = ask(cli, "atom", "mtp", "--arch", "Qwen3ForCausalLM")
    assert "not read there as a MTP target" in refused(res, out)


def test_atom_has_no_dflash_of_its_own(cli):
    res, out = ask(cli, "atom", "dflash", "--ids", 1)
    assert "no DFlash path" in refused(res, out)


# --- ollama (v0.32.7-v0.32.15, main) ----------------------------------------------------


def test_ollama_dflash_taps_the_output_of_layer_t(cli, tmp_path):
    config = {"dflash_config": {"target_layer_ids": [1, 10, 19], "num_target_layers": 40}}
    path = draft(tmp_path, config)
    res, out = ask(cli, "ollama", "dflash", "--draft-config", path, "--arch", "LagunaForCausalLM",
                   layers=40)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["residual:2", "residual:11", "residual:20"]


@pytest.mark.parametrize(
    ("config", "layers", "why"),
    [
        ({"target_layer_ids": [1, 2]}, 40, "a top-level target_layer_ids is not read"),
        ({"dflash_config": {"target_layer_ids": [4, 2]}}, 40, "ascending and non-negative"),
        ({"dflash_config": {"target_layer_ids": [4, 40]}}, 40, "out of range for 40"),
        ({"num_target_layers": 36, "dflash_config": {"target_layer_ids": [4]}}, 40, "trained for"),
    ],
)
def test_ollama_dflash_refusals(cli, tmp_path, config, layers, why):
    path = draft(tmp_path, config)
    res, out = ask(cli, "ollama", "dflash", "--draft-config", path, "--arch", "LagunaForCausalLM",
                   layers=layers)  # fmt: skip
    assert why in refused(res, out)


def test_ollama_before_dflash_and_mtp(cli):
    res, out = ask(cli, "ollama", "dflash", "--ids", 1, "--arch", "LagunaForCausalLM",
                   "--version", "0.32.6")  # fmt: skip
    assert "has no DFlash path (from v0.32.7 on)" in refused(res, out)
    res, out = ask(cli, "ollama", "dflash", "--ids", 1, "--arch", "LagunaForCausalLM",
                   "--version", "0.22.0")  # fmt: skip
    assert "not read here" in refused(res, out)
    res, out = ask(cli, "ollama", "mtp", "--arch", "Qwen3_5ForCausalLM")
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["final_norm"]


def test_ollama_is_not_an_eagle3_engine(cli):
    res = cli("resolve", "--engine", "ollama", "--num-layers", "32", "--ids", "1", "2", "3")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "ollama is read for --method dflash and mtp only" in fold(res.stderr)


# --- TensorRT-LLM (main, no release checked) ------------------------------------------------


def test_trtllm_dflash_taps_the_output_of_layer_t_sorted(cli):
    res, out = ask(cli, "trtllm", "dflash", "--ids", 33, 1, 9)
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["residual:2", "residual:10", "residual:34"]
    assert "no release checked" in " ".join(out["notes"])


def test_trtllm_dflash_reads_the_draft_config(cli, tmp_path):
    path = draft(tmp_path, {"dflash_config": {"target_layer_ids": [3, 7]}})
    res, out = ask(cli, "trtllm", "dflash", "--draft-config", path)
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["residual:4", "residual:8"]


@pytest.mark.parametrize(
    ("ids", "why"), [(["1", "36"], "uninitialised"), (["3", "3"], "repeated ids")]
)
def test_trtllm_dflash_refusals(cli, ids, why):
    res, out = ask(cli, "trtllm", "dflash", "--ids", *ids)
    assert why in refused(res, out)


def test_trtllm_dflash_without_a_list_is_not_read(cli, tmp_path):
    res, out = ask(cli, "trtllm", "dflash", "--draft-config", draft(tmp_path, {}))
    assert "was not read" in refused(res, out)


def test_trtllm_dspark_embedded_is_not_read(cli, tmp_path):
    path = draft(tmp_path, {"model_type": "deepseek_v4", "dspark_target_layer_ids": [1, 2]})
    res, out = ask(cli, "trtllm", "dspark", "--draft-config", path)
    assert "DSv4DSparkWorker" in refused(res, out)
    path = draft(tmp_path, {"dspark_target_layer_ids": [1, 2]}, "standalone.json")
    res, out = ask(cli, "trtllm", "dspark", "--draft-config", path)
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["residual:2", "residual:3"]


@pytest.mark.parametrize(
    ("engine", "method", "why"),
    [
        ("trtllm", "pard", "target-independent"),
        ("trtllm", "mtp", "not traced"),
        ("trtllm", "dflash2", "no DFlash2 decoding config"),
        ("trtllm-autodeploy", "dflash", "pytorch only"),
        ("trtllm-autodeploy", "dspark", "pytorch only"),
        ("trtllm-autodeploy", "mtp", "not read"),
        ("sglang-jax", "dflash2", "no DFlash2 code"),
        ("sglang-jax", "pard", "no PARD code"),
        ("atom", "dflash2", "no DFlash2 code"),
        ("ollama", "dspark", "no DSpark code"),
    ],
)
def test_what_is_not_served_or_not_read_is_refused_with_the_reason(cli, engine, method, why):
    more = ("--arch", "X") if method == "mtp" else ("--ids", "1")
    res, out = ask(cli, engine, method, *more)
    assert why in refused(res, out)


@pytest.mark.parametrize(
    "config",
    [
        {"dflash_config": {"target_layer_ids": "1,2"}},
        {"dflash_config": [1]},
        {"target_layer_ids": [True, 2]},
        {"architectures": ["K3DSparkModel"], "target_layer_ids": {"a": 1}},
        {"dspark_block_size": 8, "dspark_target_layer_ids": [1.5]},
    ],
)
@pytest.mark.parametrize(
    "engine",
    [
        ("sglang-jax", "dflash", "--arch", "Qwen3ForCausalLM"),
        ("ollama", "dflash", "--arch", "LagunaForCausalLM"),
        ("atom", "dspark"),
        ("trtllm", "dflash"),
        ("trtllm", "dspark"),
    ],
)
def test_a_malformed_tap_list_is_refused_never_a_traceback(cli, tmp_path, config, engine):
    name, method, *more = engine
    res, out = ask(cli, name, method, "--draft-config", draft(tmp_path, config), *more, layers=40)
    assert res.returncode == 2, res.stdout + res.stderr
    assert out is None or out["layers"] is None
