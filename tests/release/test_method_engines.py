"""The method-only engines (issue 38): ``resolve --engine onnxruntime-genai --method
dflash2|dspark|mtp`` and ``resolve --engine lmdeploy --method dflash``, by the rules
``scripts/read_engine_wheels.py --rules`` read from their wheels
(``engines/method_engines_rules.json``; docs/layers.md).

The expected layers are docs/layers.md's statement of the rules (onnxruntime-genai 0.16.0 on
and lmdeploy 0.18.0: tap t is the output of target layer t, ``residual:t+1``), not copied
from the tool's output. ``tests/release/test_engine_wheel_reads.py`` (``tox -e engine-wheels``)
re-derives the committed table from the wheels.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serving_cases import resolve_json

from pytest_eagle_contract.engines import method_engines
from pytest_eagle_contract.methods import METHOD_ENGINES, METHOD_ONLY_ENGINES, SOURCE_READ

L = 32
QWEN35 = "Qwen3_5ForConditionalGeneration"
ORTG = "onnxruntime-genai"


def fold(text: str) -> str:
    return " ".join(text.split())


def ask(cli, engine, method, *more, layers=L):
    return resolve_json(cli, "--engine", engine, "--method", method, "--num-layers", layers, *more)


def draft(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("method", ["dflash2", "dspark"])
@pytest.mark.parametrize("version", ["0.16.0", "0.17.1", "0.18.0"])
def test_onnxruntime_genai_taps_the_output_of_layer_t(cli, method, version):
    res, out = ask(cli, ORTG, method, "--ids", 1, 15, 30, "--arch", QWEN35, "--version", version)
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["residual:2", "residual:16", "residual:31"]
    assert out["problems"] == [] and "target_layer_ids" in out["source"]


def test_onnxruntime_genai_reads_dflash_config_not_dspark_ids(cli, tmp_path):
    path = draft(tmp_path, {"dflash_config": {"target_layer_ids": [3, 9]}})
    res, out = ask(cli, ORTG, "dspark", "--draft-config", path, "--arch", QWEN35)
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["residual:4", "residual:10"]
    only = draft(tmp_path, {"dspark_target_layer_ids": [3, 9], "dflash_config": {}})
    res, out = ask(cli, ORTG, "dspark", "--draft-config", only, "--arch", QWEN35)
    assert res.returncode == 2 and out["layers"] is None
    assert "dspark_target_layer_ids is not read there" in fold(out["refused"])


@pytest.mark.parametrize("ids", [[L - 1], [2, L - 1]])
def test_onnxruntime_genai_refuses_a_tap_on_the_last_layer(cli, ids):
    res, out = ask(cli, ORTG, "dflash2", "--ids", *ids, "--arch", QWEN35)
    assert res.returncode == 2 and out["layers"] is None
    assert f"[{L - 1}]" in out["refused"] and f"[0, {L - 1})" in out["refused"]


def test_onnxruntime_genai_one_off_tap_moves_the_layer(cli):
    """A draft trained on residual:16 (tap 15) but written 16 is fed residual:17."""
    res, out = ask(cli, ORTG, "dflash2", "--ids", 16, "--arch", QWEN35)
    assert res.returncode == 0 and out["layers"] == ["residual:17"]


def test_onnxruntime_genai_refuses_an_empty_list(cli, tmp_path):
    path = draft(tmp_path, {"dflash_config": {"target_layer_ids": []}})
    res, out = ask(cli, ORTG, "dflash2", "--draft-config", path, "--arch", QWEN35)
    assert res.returncode == 2 and "at least one target_layer_ids" in fold(out["refused"])
    none = draft(tmp_path, {"num_hidden_layers": 4, "dflash_config": {}})
    res, out = ask(cli, ORTG, "dflash2", "--draft-config", none, "--arch", QWEN35)
    assert res.returncode == 2 and "no fallback" in out["refused"]


@pytest.mark.parametrize("method", ["dflash2", "dspark", "mtp"])
def test_onnxruntime_genai_refuses_other_targets(cli, method):
    more = () if method == "mtp" else ("--ids", 1)
    res, out = ask(cli, ORTG, method, *more, "--arch", "Qwen3ForCausalLM")
    assert res.returncode == 2 and out["layers"] is None
    assert "not a" in out["refused"] and QWEN35 in out["refused"]


@pytest.mark.parametrize("arch", [QWEN35, "Qwen3_5MoeForConditionalGeneration"])
def test_onnxruntime_genai_mtp_reads_the_final_norm(cli, arch):
    res, out = ask(cli, ORTG, "mtp", "--arch", arch)
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["final_norm"] and out["problems"] == []


def test_onnxruntime_genai_before_0_16_serves_none(cli):
    res, out = ask(cli, ORTG, "dflash2", "--ids", 1, "--arch", QWEN35, "--version", "0.15.2")
    assert res.returncode == 2 and "no DFlash2 path (from 0.16.0 on)" in out["refused"]


@pytest.mark.parametrize("arch", ["Qwen3ForCausalLM", QWEN35, "Qwen3_5MoeForConditionalGeneration"])
def test_lmdeploy_taps_the_output_of_layer_t(cli, tmp_path, arch):
    path = draft(
        tmp_path, {"num_target_layers": L, "dflash_config": {"target_layer_ids": [1, 15, 29]}}
    )
    res, out = ask(cli, "lmdeploy", "dflash", "--draft-config", path, "--arch", arch)
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["residual:2", "residual:16", "residual:30"]
    assert out["problems"] == []


def test_lmdeploy_ids_alone_say_the_depth_was_not_checked(cli):
    """lmdeploy 0.18.0 refuses a draft whose num_target_layers is not the target's; --ids
    give no draft config to read it from, so the answer says it was not checked."""
    res, out = ask(cli, "lmdeploy", "dflash", "--ids", 1, 15, 29, "--arch", "Qwen3ForCausalLM")
    assert res.returncode == 0 and out["layers"] == ["residual:2", "residual:16", "residual:30"]
    said = [n for n in out["notes"] if "num_target_layers" in n]
    assert len(said) == 1 and "not checked" in said[0] and f"{L}" in said[0], out["notes"]
    text = cli("resolve", "--engine", "lmdeploy", "--method", "dflash", "--num-layers", L,
               "--ids", 1, 15, 29, "--arch", "Qwen3ForCausalLM")  # fmt: skip
    assert "note: num_target_layers not checked" in text.stdout


def test_lmdeploy_guessed_list_is_ec522(cli, tmp_path):
    path = draft(tmp_path, {"num_target_layers": L, "num_hidden_layers": 5, "dflash_config": {}})
    res, out = ask(cli, "lmdeploy", "dflash", "--draft-config", path, "--arch", "Qwen3ForCausalLM")
    assert res.returncode == 1
    # SGLang's formula: round(1 + i * (L - 4) / (n - 1)) for L = 32, n = 5
    assert out["ids"] == [1, 8, 15, 22, 29]
    assert out["layers"] == [f"residual:{t + 1}" for t in (1, 8, 15, 22, 29)]
    assert [p["code"] for p in out["problems"]] == ["EC522"]
    one = draft(tmp_path, {"num_target_layers": L, "num_hidden_layers": 1, "dflash_config": {}})
    res, out = ask(cli, "lmdeploy", "dflash", "--draft-config", one, "--arch", "Qwen3ForCausalLM")
    assert out["ids"] == [L // 2] and out["layers"] == [f"residual:{L // 2 + 1}"]


def test_lmdeploy_fallback_refused_on_shallow_targets(cli, tmp_path):
    path = draft(tmp_path, {"num_target_layers": 3, "num_hidden_layers": 2, "dflash_config": {}})
    res, out = ask(
        cli, "lmdeploy", "dflash", "--draft-config", path, "--arch", "Qwen3ForCausalLM", layers=3
    )
    assert res.returncode == 2 and ">= 4" in out["refused"]


@pytest.mark.parametrize(
    "config,why",
    [
        ({"num_target_layers": L, "dflash_config": {"target_layer_ids": [5, 2]}}, "increasing"),
        ({"num_target_layers": L, "dflash_config": {"target_layer_ids": [2, 2]}}, "increasing"),
        ({"num_target_layers": L, "dflash_config": {"target_layer_ids": [2, L]}}, "outside"),
        ({"num_target_layers": L + 1, "dflash_config": {"target_layer_ids": [2]}}, "depth"),
        ({"num_target_layers": L, "dflash_config": {"target_layer_ids": []}}, "empty"),
    ],
)
def test_lmdeploy_refusals(cli, tmp_path, config, why):
    path = draft(tmp_path, config)
    res, out = ask(cli, "lmdeploy", "dflash", "--draft-config", path, "--arch", "Qwen3ForCausalLM")
    assert res.returncode == 2 and out["layers"] is None
    assert why in out["refused"]


def test_lmdeploy_refuses_other_targets_and_releases(cli):
    res, out = ask(cli, "lmdeploy", "dflash", "--ids", 1, "--arch", "LlamaForCausalLM")
    assert res.returncode == 2 and "not a DFlash target" in out["refused"]
    res, out = ask(cli, "lmdeploy", "dflash", "--ids", 1, "--arch", "Qwen3ForCausalLM",
                   "--version", "0.17.0")  # fmt: skip
    assert res.returncode == 2 and "no DFlash path" in out["refused"]


@pytest.mark.parametrize(
    "engine,method,served",
    [
        (ORTG, "eagle3", "dflash2 / dspark / mtp"),
        (ORTG, "dflash", "dflash2 / dspark / mtp"),
        ("lmdeploy", "dspark", "eagle3 / dflash / mtp"),  # mtp: engines/mtp_rules.json
    ],
)
def test_other_methods_are_usage_errors(cli, engine, method, served):
    res = cli("resolve", "--engine", engine, "--method", method, "--num-layers", L, "--ids", 1)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"only for --method {served}" in fold(res.stderr)


def test_eagle3_commands_refuse_them(cli):
    res = cli("resolve", "--engine", ORTG, "--num-layers", L, "--ids", 1, 2, 3)
    assert res.returncode == 2 and "only for --method" in fold(res.stderr)
    res = cli("probe", "--engine", ORTG, "--help")
    assert res.returncode == 2 and "invalid choice" in res.stderr


def test_the_table_names_what_methods_py_does():
    table = method_engines.table()
    for engine, methods in METHOD_ENGINES.items():
        if engine in SOURCE_READ:
            continue
        served = {m for row in table[engine]["releases"].values() if row for m in row["methods"]}
        assert served == set(methods)


def test_the_source_read_engines_serve_what_methods_py_says():
    """methods.METHOD_ENGINES names, for each engine read from source, exactly the methods
    source_methods.py answers for it (the others it refuses with the reason)."""
    from pytest_eagle_contract.engines import source_methods

    for engine in SOURCE_READ:
        answered = {
            m
            for m in ("dflash", "dflash2", "dspark", "pard", "mtp")
            if source_methods.refusal(engine, m) is None
            and (  # DFlash2 is read on DFlash's rows (mistral.rs)
                engine == "trtllm"
                or source_methods.releases(engine, "dflash" if m == "dflash2" else m)
            )
        }
        assert answered == set(METHOD_ENGINES[engine]), engine
    assert set(METHOD_ONLY_ENGINES) == {ORTG, "ollama", "mistralrs"}


@pytest.mark.parametrize("engine,method", [("lmdeploy", "dspark"), (ORTG, "dflash")])
def test_a_contract_takes_them_for_their_methods_only(cli, tmp_path, engine, method):
    """A contract naming one as its serving.engine with a method whose rules for it are not
    read is a usage error at load, never a traceback (with one they serve, it is checked:
    tests/cli/test_method_engine_contracts.py)."""
    path = draft(tmp_path, {"num_target_layers": L, "dflash_config": {"target_layer_ids": [1]}})
    c = tmp_path / "c.yaml"
    c.write_text(
        f"contract: x\nversion: 1\nmethod: {method}\n"
        f"target: {{arch: {QWEN35}, num_hidden_layers: {L}, hidden_size: 64}}\n"
        "training:\n  slots:\n    - {layer: residual:2}\n    - {layer: final_norm}\n"
        f"serving:\n  engine: {engine}\n  draft_config: {path}\n"
    )
    res = cli("check", c, "--checks", "layout")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"{engine} serves method" in fold(res.stderr) and f"not {method}" in res.stderr
