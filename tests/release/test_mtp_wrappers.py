"""MTP on multimodal wrappers (issue 38): SGLang's and vLLM's ``Gemma4ForConditionalGeneration``
(``models/gemma4_mm.py``) and vLLM's other wrappers that hand on what their language model
returns, by the rules ``scripts/gen_mtp_rules.py`` reads from sglang 0.5.11-0.5.23 and vllm
0.24.0-0.34.0 (``engines/mtp_rules.json``'s ``wrappers``; docs/mtp.md).

The expected state is the docs' statement of the rule: the wrapper's forward hands on its
language model's output unchanged (SGLang: through ``general_mm_embed_routine`` to the logits
processor; vLLM: ``self.language_model.model(...)`` returned), and that model ends on its final
norm, so the head is fed ``final_norm``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serving_cases import resolve_json

L = 34  # Gemma-4 31B's text model depth is larger; any depth serves the rule


def ask(cli, *args):
    return resolve_json(cli, "--method", "mtp", "--num-layers", L, *args)


@pytest.mark.parametrize(
    "engine,version,inner",
    [
        ("sglang", "0.5.11", "gemma4_causal.py"),
        ("sglang", "0.5.23", "gemma4_causal.py"),
        ("vllm", "0.24.0", "Gemma4ForCausalLM"),
        ("vllm", "0.34.0", "Gemma4ForCausalLM"),
    ],
)
def test_gemma4_multimodal_feeds_the_final_norm(cli, engine, version, inner):
    res, out = ask(
        cli, "--engine", engine, "--arch", "Gemma4ForConditionalGeneration", "--version", version
    )
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["final_norm"] and out["problems"] == []
    note = next(n for n in out["notes"] if "hands on, unchanged" in n)
    assert inner in note


def test_real_gemma4_config_names_the_multimodal_class_first(cli, tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Gemma4ForConditionalGeneration"],
                "model_type": "gemma4",
                "text_config": {"model_type": "gemma4_text", "num_hidden_layers": 60},
            }
        )
    )
    for engine in ("sglang", "vllm"):
        res, out = resolve_json(
            cli, "--engine", engine, "--method", "mtp", "--target-config", tmp_path
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert out["layers"] == ["final_norm"] and out["num_layers"] == 60


@pytest.mark.parametrize(
    "arch",
    ["Qwen2_5_VLForConditionalGeneration", "KimiK25ForConditionalGeneration", "Phi3VForCausalLM"],
)
def test_vllm_other_wrappers_are_read_the_same_way(cli, arch):
    res, out = ask(cli, "--engine", "vllm", "--arch", arch, "--version", "0.34.0")
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["final_norm"]


def test_a_wrapper_not_read_is_refused(cli):
    res, out = ask(
        cli, "--engine", "sglang", "--arch", "NoSuchForConditionalGeneration", "--version", "0.5.23"
    )
    assert res.returncode == 2 and out["layers"] is None and "was not read" in out["refused"]


def contract(tmp_path: Path, state: str, engine: str, version: str) -> Path:
    c = tmp_path / f"mtp-{engine}-{state.replace(':', '')}.yaml"
    c.write_text(
        "contract: x\nversion: 1\nmethod: mtp\n"
        f"target: {{arch: Gemma4ForConditionalGeneration, num_hidden_layers: {L}, "
        "hidden_size: 2048}\n"
        f"training:\n  slots:\n    - {{layer: '{state}'}}\n"
        f"serving:\n  engine: {engine}\n  version: '{version}'\n"
    )
    return c


@pytest.mark.parametrize("engine,version", [("sglang", "0.5.23"), ("vllm", "0.34.0")])
def test_check_a_head_trained_before_the_norm_is_ec501(cli, tmp_path, engine, version):
    res = cli("check", contract(tmp_path, f"residual:{L}", engine, version), "--checks", "layout",
              "--json")  # fmt: skip
    assert "Traceback" not in res.stderr, res.stderr
    found = json.loads(res.stdout)["findings"]
    assert res.returncode == 1 and [f["code"] for f in found] == ["EC501"], found
    assert found[0]["found"] == "final_norm"
    res = cli("check", contract(tmp_path, "final_norm", engine, version), "--checks", "layout",
              "--json")  # fmt: skip
    assert res.returncode == 0 and json.loads(res.stdout)["findings"] == []
