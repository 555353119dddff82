"""mistral.rs and OpenVINO GenAI for the drafts that read the target's hidden states (issue 38):
``resolve --engine mistralrs|openvino --method M``, by ``engines/source_method_rules.json``
(``scripts/gen_source_method_rules.py``; docs/layers.md, "Methods read from source").

The expected layers are docs/layers.md's statement of each rule, not copied from the tool's
output: mistral.rs (v0.9.2, main 9e922623) captures a Qwen3.5 target's hidden state after
layer i's residual add for each DFlash id i (the output of layer i), in layer order; without
``dflash_config.target_layer_ids`` it computes ``1 + round(i * (T - 4) / (n - 1))`` from the
draft's ``num_target_layers`` T and ``num_hidden_layers`` n (EC522); its MTP heads read the
final norm's output. OpenVINO GenAI (main da1db864) taps id k as the value leaving decoder block
k (optimum-intel 2.2.0's annotation) or layer k's residual add (the EAGLE-3 finder): the output
of layer k, except the last layer, which the annotation maps to lm_head's input (final_norm).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serving_cases import resolve_json

QWEN35 = "Qwen3_5ForConditionalGeneration"


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


def dflash_draft(**more) -> dict:
    return {"architectures": ["DFlashDraftModel"], "num_hidden_layers": 5, **more}


# --- mistral.rs -------------------------------------------------------------------------


def test_mistralrs_dflash_taps_the_output_of_layer_t(cli, tmp_path):
    ids = [1, 9, 17, 25, 33]
    path = draft(tmp_path, dflash_draft(dflash_config={"target_layer_ids": ids}))
    res, out = ask(cli, "mistralrs", "dflash", "--draft-config", path, "--arch", QWEN35)
    assert res.returncode == 0, res.stderr
    assert out["layers"] == [f"residual:{t + 1}" for t in ids]
    assert out["problems"] == [] and out["version"] == "v0.9.2"
    assert "0.9.3-0.9.5" in " ".join(out["notes"])  # the PyPI releases are not read


def test_mistralrs_dflash_captures_in_layer_order(cli):
    res, out = ask(cli, "mistralrs", "dflash", "--ids", 20, 3, "--arch", QWEN35)
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["residual:4", "residual:21"]
    assert "not ascending" in " ".join(out["notes"])


def test_mistralrs_dflash_guesses_from_num_target_layers(cli, tmp_path):
    """No ids: evenly spaced over [1, T - 3] for the draft's 5 layers, T = 36: 1, 9, 17,
    25, 33 (z-lab's spacing), flagged EC522."""
    path = draft(tmp_path, dflash_draft(num_target_layers=36))
    res, out = ask(cli, "mistralrs", "dflash", "--draft-config", path, "--arch", QWEN35)
    assert res.returncode == 1, res.stderr
    assert out["layers"] == [
        "residual:2",
        "residual:10",
        "residual:18",
        "residual:26",
        "residual:34",
    ]
    assert [p["code"] for p in out["problems"]] == ["EC522"]


def test_mistralrs_dflash_one_layer_draft_guesses_the_middle(cli, tmp_path):
    path = draft(tmp_path, dflash_draft(num_hidden_layers=1, num_target_layers=40))
    res, out = ask(cli, "mistralrs", "dflash", "--draft-config", path, "--arch", QWEN35, layers=40)
    assert res.returncode == 1 and out["layers"] == ["residual:21"]


@pytest.mark.parametrize(
    ("config", "ids", "arch", "why"),
    [
        (dflash_draft(), None, QWEN35, "neither target_layer_ids nor num_target_layers"),
        (None, ["36"], QWEN35, "but the target has 36 layers"),
        (None, ["4", "4"], QWEN35, "proposer then returns no draft"),
        (None, ["4"], "Qwen3_5MoeForConditionalGeneration", "not read there as a DFlash target"),
        ({"architectures": ["LlamaForCausalLM"]}, None, QWEN35, "must be a DFlash draft model"),
        (dflash_draft(num_target_layers=3), None, QWEN35, "underflows"),
    ],
)
def test_mistralrs_dflash_refusals(cli, tmp_path, config, ids, arch, why):
    more = ["--ids", *ids] if ids else ["--draft-config", draft(tmp_path, config)]
    res, out = ask(cli, "mistralrs", "dflash", *more, "--arch", arch)
    assert why in refused(res, out)


def test_mistralrs_dflash2_needs_its_selector_keys(cli, tmp_path):
    good = {
        "architectures": ["DFlash2DraftModel"],
        "num_hidden_layers": 5,
        "dflash_config": {"target_layer_ids": [2, 18], "selector_rank": 8, "conv_group_size": 4},
    }
    res, out = ask(
        cli, "mistralrs", "dflash2", "--draft-config", draft(tmp_path, good), "--arch", QWEN35
    )
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["residual:3", "residual:19"]
    del good["dflash_config"]["conv_group_size"]
    res, out = ask(
        cli, "mistralrs", "dflash2", "--draft-config", draft(tmp_path, good), "--arch", QWEN35
    )
    assert "DFlash2 config has no conv_group_size" in refused(res, out)


def test_mistralrs_dflash_is_not_in_older_tags(cli):
    res, out = ask(cli, "mistralrs", "dflash", "--ids", 1, "--arch", QWEN35, "--version", "0.9.1")
    assert "has no DFlash path" in refused(res, out)
    res, out = ask(cli, "mistralrs", "dflash", "--ids", 1, "--arch", QWEN35, "--version", "0.9.5")
    assert "not read here" in refused(res, out)


@pytest.mark.parametrize(
    ("arch", "version"), [(QWEN35, None), ("Gemma4ForConditionalGeneration", "v0.8.4")]
)
def test_mistralrs_mtp_feeds_the_final_norm(cli, arch, version):
    more = ("--version", version) if version else ()
    res, out = ask(cli, "mistralrs", "mtp", "--arch", arch, *more)
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["final_norm"]


def test_mistralrs_qwen35_mtp_is_not_in_older_tags(cli):
    res, out = ask(cli, "mistralrs", "mtp", "--arch", QWEN35, "--version", "v0.9.1")
    assert "not read there as a MTP target" in refused(res, out)


def test_mistralrs_eagle3_is_a_usage_error(cli):
    res = cli("resolve", "--engine", "mistralrs", "--num-layers", 36, "--ids", 1, 2, 3)
    assert res.returncode == 2 and "no EAGLE-3 drafter" in fold(res.stderr)


# --- OpenVINO GenAI -------------------------------------------------------------------


def target_config(tmp_path: Path, model_type: str, arch: str = "Qwen3ForCausalLM") -> Path:
    return draft(
        tmp_path,
        {"architectures": [arch], "model_type": model_type, "num_hidden_layers": 36},
        "target.json",
    )


def test_openvino_dflash_taps_the_output_of_layer_k_in_list_order(cli, tmp_path):
    ids = [1, 9, 17, 25, 33]
    path = draft(tmp_path, dflash_draft(dflash_config={"target_layer_ids": ids}))
    res, out = ask(cli, "openvino", "dflash", "--draft-config", path, "--arch", "Qwen3ForCausalLM")
    assert res.returncode == 0, res.stderr
    assert out["layers"] == [f"residual:{t + 1}" for t in ids]
    assert "no release checked" in " ".join(out["notes"])
    res, out = ask(cli, "openvino", "dflash", "--ids", 20, 3, "--arch", "Qwen3ForCausalLM")
    assert out["layers"] == ["residual:21", "residual:4"]  # concatenated as listed


def test_openvino_dflash_last_layer_is_final_norm_on_an_annotated_target(cli, tmp_path):
    res, out = ask(
        cli,
        "openvino",
        "dflash",
        "--ids",
        1,
        35,
        "--target-config",
        target_config(tmp_path, "qwen3"),
    )
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["residual:2", "final_norm"]
    res, out = ask(
        cli, "openvino", "dflash", "--ids", 1, 35,
        "--target-config", target_config(tmp_path, "llama", "LlamaForCausalLM"),
    )  # fmt: skip
    assert res.returncode == 0 and out["layers"] == ["residual:2", "residual:36"]
    res, out = ask(cli, "openvino", "dflash", "--ids", 1, 35, "--arch", "Qwen3ForCausalLM")
    assert "give --target-config" in refused(res, out)


@pytest.mark.parametrize(
    ("config", "ids", "why"),
    [
        (dflash_draft(target_layer_ids=[1, 2]), None, "requires non-empty"),
        (None, ["36"], "name no layer"),
        (None, ["-1", "4"], "name no layer"),
        (None, ["4", "4"], "Duplicate producer/output locator"),
    ],
)
def test_openvino_dflash_refusals(cli, tmp_path, config, ids, why):
    more = ["--ids", *ids] if ids else ["--draft-config", draft(tmp_path, config)]
    res, out = ask(cli, "openvino", "dflash", *more, "--arch", "Qwen3ForCausalLM")
    assert why in refused(res, out)


def test_openvino_dflash_is_in_no_release(cli):
    res, out = ask(cli, "openvino", "dflash", "--ids", 1, "--version", "2026.3.0.0")
    assert "has no DFlash path" in refused(res, out)


@pytest.mark.parametrize(
    ("method", "why"),
    [("dflash2", "no DFlash2 code"), ("dspark", "no DSpark code"), ("pard", "no PARD code")],
)
def test_openvino_methods_without_code_are_refused(cli, method, why):
    res, out = ask(cli, "openvino", method, "--ids", 1)
    assert why in refused(res, out)


def test_openvino_mtp_is_not_read_and_says_why(cli):
    res, out = ask(cli, "openvino", "mtp", "--arch", "Gemma4ForConditionalGeneration")
    said = refused(res, out)
    assert "mtp_last_hidden_state" in said and "writes no such output" in said


@pytest.mark.parametrize(
    "config",
    [
        {"dflash_config": {"target_layer_ids": "1,2"}},
        {"dflash_config": [1]},
        {"architectures": "DFlash", "target_layer_ids": [True, 2]},
        {"dflash_config": {"target_layer_ids": [1.5]}},
    ],
)
@pytest.mark.parametrize(
    "engine", [("mistralrs", "dflash", "--arch", QWEN35), ("openvino", "dflash")]
)
def test_a_malformed_draft_is_refused_never_a_traceback(cli, tmp_path, config, engine):
    name, method, *more = engine
    res, out = ask(cli, name, method, "--draft-config", draft(tmp_path, config), *more, layers=40)
    assert res.returncode == 2, res.stdout + res.stderr
    assert out is None or out["layers"] is None
