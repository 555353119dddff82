"""The draft-config family: the draft's config.json as trained and as each reader parses it.

Drafts of transformers 5 are written by the installed ``LlamaConfig(...).save_pretrained``
(``rope_parameters`` only); those of transformers 4 are the JSON 4.57.1's ``save_pretrained``
writes (top-level ``rope_theta`` and ``rope_scaling``, ``torch_dtype``: read from its
``configuration_llama.py`` / ``configuration_utils.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from serving_cases import tiny_contract
from transformers import LlamaConfig

from pytest_eagle_contract.checks.draft_config import check_draft_config, context_length
from pytest_eagle_contract.contract.model import load_contract
from pytest_eagle_contract.engines.draft_settings import as_engine, as_transformers

H = 64

SLOTS = ["residual:2", "residual:4", "residual:6", "final_norm"]


def v5_draft(folder: Path, **kw: object) -> Path:
    """A draft config as transformers 5 (installed) writes it."""
    args: dict[str, object] = {
        "hidden_size": H,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
        "intermediate_size": 2 * H,
        "vocab_size": 1000,
        "max_position_embeddings": 32768,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6},
        "dtype": "bfloat16",
    }
    args.update(kw)
    config = LlamaConfig(**args)
    config.architectures = ["LlamaForCausalLMEagle3"]
    config.save_pretrained(folder)
    data = json.loads((folder / "config.json").read_text())
    assert "rope_theta" not in data and "rope_theta" in data["rope_parameters"]
    return folder


def v4_draft(folder: Path, **kw: object) -> Path:
    """A draft config as transformers 4.57.1's save_pretrained writes it."""
    data: dict[str, object] = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": H // 4,
        "hidden_act": "silu",
        "hidden_size": H,
        "initializer_range": 0.02,
        "intermediate_size": 2 * H,
        "max_position_embeddings": 131072,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": 4,
        "num_hidden_layers": 1,
        "num_key_value_heads": 2,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {
            "factor": 4.0,
            "original_max_position_embeddings": 32768,
            "rope_type": "yarn",
        },
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.57.1",
        "use_cache": True,
        "vocab_size": 1000,
    }
    data.update(kw)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(data, indent=2))
    return folder


def contract(
    tmp_path: Path,
    draft: str = "    rope_theta: 1000000.0",
    engine: str = "sglang",
    version: str = "0.5.23",
    serving: str = "",
):
    """The tiny target's contract (no shards), the draft's keys ``draft``, served by
    ``engine`` at ``version`` from the draft folder; ``serving``, more serving keys."""
    text = tiny_contract("tiny", SLOTS, engine, version, size=(H, 1000), shards=None, draft=draft)
    path = tmp_path / "c.yaml"
    path.write_text(text + "  draft_config: draft\n" + serving)
    return load_contract(path)


def run(tmp_path: Path, c, args: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    found = check_draft_config(
        tmp_path / "draft",
        contract=c,
        engine=c.serving.engine if c else None,
        version=c.serving.version if c else None,
        serving_args=args,
    )
    return [(f.code, f.severity) for f in found]


def test_the_two_layouts_as_each_major_reads_them(tmp_path):
    five = json.loads((v5_draft(tmp_path / "a") / "config.json").read_text())
    assert as_transformers(five, 5).rope_theta == 1e6
    assert as_transformers(five, 4).rope_theta == 10000.0  # 4.x never reads rope_parameters
    four = json.loads((v4_draft(tmp_path / "b") / "config.json").read_text())
    for major in (4, 5):
        s = as_transformers(four, major)
        assert (s.rope_theta, s.rope_type, s.rope_factor) == (1e6, "yarn", 4.0)
        assert s.original_max_position_embeddings == 32768 and s.dtype == "bfloat16"
    # transformers 5 itself agrees on the 4.x file (rope_scaling taken as rope_parameters)
    params = LlamaConfig.from_dict(four).rope_parameters
    assert params["rope_theta"] == 1e6 and params["factor"] == 4.0
    # yarn with no original max position: both take max_position_embeddings (5 fills it
    # in, 4's _compute_yarn_parameters reads "or config.max_position_embeddings")
    bare = {**four, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}
    for major in (4, 5):
        assert as_transformers(bare, major).original_max_position_embeddings == 131072
    assert LlamaConfig.from_dict(bare).rope_parameters["original_max_position_embeddings"] == 131072


def test_engine_rows():
    five = {"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}, "fc_norm": True}
    old, new = as_engine(five, "sglang", "0.5.9"), as_engine(five, "sglang", "0.5.23")
    assert old is not None and new is not None
    assert old.settings.rope_theta == 10000.0 and "fc_norm" in old.ignores
    assert new.settings.rope_theta == 1e6 and "fc_norm" not in new.ignores
    assert "fc_norm" in as_engine(five, "sglang", "0.5.11").ignores  # type: ignore[union-attr]
    assert as_engine(five, "trtllm", "1.0.0") is None  # not read: no row, no guess
    yarn = {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}}
    plain = as_engine(yarn, "vllm", "0.11.2")  # transformers 4, llama.py's own getattr
    patched = as_engine(yarn, "vllm", "0.15.0")  # transformers<5 + patch_rope_parameters
    modern = as_engine(yarn, "vllm", "0.20.0")  # transformers 5 admitted (pip takes 5.x)
    assert plain is not None and patched is not None and modern is not None
    assert (plain.settings.rope_theta, plain.settings.rope_type) == (10000.0, "default")
    assert (patched.settings.rope_theta, patched.settings.rope_type) == (10000.0, "yarn")
    assert (modern.settings.rope_theta, modern.settings.rope_factor) == (1e6, 4.0)
    assert "fc_norm" in modern.ignores and as_engine(yarn, "vllm", "0.22.0").ignores == ()  # type: ignore[union-attr]
    assert "sliding_window" in as_engine(yarn, "vllm", "0.10.0").ignores  # type: ignore[union-attr]


def test_matching_export_passes(tmp_path):
    v5_draft(tmp_path / "draft")
    c = contract(tmp_path, "    rope_theta: 1000000.0\n    max_position_embeddings: 32768")
    assert run(tmp_path, c) == []
    v4_draft(tmp_path / "draft")
    c = contract(
        tmp_path,
        "    rope_theta: 1000000.0\n    rope_type: yarn\n    rope_factor: 4\n"
        "    original_max_position_embeddings: 32768\n    dtype: bfloat16\n    head_dim: 16",
    )
    assert run(tmp_path, c) == []


def test_v5_export_on_a_transformers_4_engine_is_ec921(tmp_path):
    # SpecForge#702 / Model-Optimizer#2221: the 1e6 theta sits where 4.x does not look
    v5_draft(tmp_path / "draft")
    assert run(tmp_path, contract(tmp_path, version="0.5.9")) == [("EC921", "error")]
    assert run(tmp_path, contract(tmp_path, version="0.5.10")) == []


def test_a_converted_v5_source_is_ec921_and_ec922(tmp_path):
    # speculators 0.9.0's EAGLE-3 converter reads the source's top-level rope_theta (default
    # 10000.0) and rope_scaling: a transformers 5 source (rope_parameters only) comes out as
    # LlamaConfig(rope_theta=10000.0), written by transformers 5 as rope_parameters
    v5_draft(tmp_path / "draft", rope_parameters={"rope_type": "default", "rope_theta": 1e4})
    c = contract(tmp_path, "    rope_theta: 1000000.0\n    rope_type: yarn\n    rope_factor: 4")
    assert sorted(set(run(tmp_path, c))) == [("EC921", "error"), ("EC922", "error")]


def test_trained_on_the_fallback_theta_is_ec921(tmp_path):
    # the trainer read config.rope_theta on transformers 5 and trained with 10000
    v5_draft(tmp_path / "draft")
    c = contract(tmp_path, "    rope_theta: 10000")
    assert run(tmp_path, c) == [("EC921", "error")]


def test_dropped_rope_scaling_is_ec922(tmp_path):
    # speculators#574: a converter drops rope_scaling
    draft = "    rope_theta: 1000000.0\n    rope_type: yarn\n    rope_factor: 4"
    v4_draft(tmp_path / "draft")
    assert run(tmp_path, contract(tmp_path, draft)) == []
    v4_draft(tmp_path / "draft", rope_scaling=None)
    assert set(run(tmp_path, contract(tmp_path, draft))) == {("EC922", "error")}


def test_max_position_below_the_serving_context_is_ec923(tmp_path):
    # SpecForge#271 / vllm#48894: a draft shipped with max_position_embeddings 2048
    v5_draft(tmp_path / "draft", max_position_embeddings=2048)
    c = contract(tmp_path)
    assert run(tmp_path, c) == []
    assert run(tmp_path, c, ("--context-length", "8192")) == [("EC923", "error")]
    assert run(tmp_path, c, ("--max-model-len=2048",)) == []
    c = contract(tmp_path, serving="  context_length: 32768\n")
    assert run(tmp_path, c) == [("EC923", "error")]
    assert (
        context_length(contract(tmp_path, serving="  launch: --max-model-len 16k\n"), ()) == 16000
    )


def test_max_position_other_than_trained_is_ec923(tmp_path):
    v5_draft(tmp_path / "draft", max_position_embeddings=2048)
    c = contract(tmp_path, "    max_position_embeddings: 32768")
    assert run(tmp_path, c) == [("EC923", "error")]


def test_a_speculators_config_is_read_from_its_layer_config(tmp_path):
    # speculators' Eagle3SpeculatorConfig: the draft layer's LlamaConfig nested
    inner = {"rope_theta": 1e6, "max_position_embeddings": 32768, "hidden_size": H}
    data = {"speculators_config": {}, "transformer_layer_config": inner}
    (tmp_path / "draft").mkdir()
    (tmp_path / "draft" / "config.json").write_text(json.dumps(data))
    assert run(tmp_path, contract(tmp_path)) == []
    assert run(tmp_path, contract(tmp_path, "    rope_theta: 500000.0")) == [("EC921", "error")]


def test_sliding_window_the_engine_ignores_is_ec924(tmp_path):
    # speculators#684: SGLang never builds the draft's sliding-window attention
    v5_draft(tmp_path / "draft", sliding_window=4096, layer_types=["sliding_attention"])
    c = contract(tmp_path, "    sliding_window: 4096")
    assert run(tmp_path, c) == [("EC924", "error")]
    assert run(tmp_path, contract(tmp_path, "    sliding_window: 4096", "vllm", "0.34.0")) == []
    # no trained values: the config's own window, ignored by SGLang
    assert ("EC924", "error") in run(tmp_path, contract(tmp_path, "    {}"))


def test_head_dim_and_dtype(tmp_path):
    v5_draft(tmp_path / "draft", head_dim=32)
    c = contract(tmp_path, "    head_dim: 16\n    dtype: float16")
    assert sorted(run(tmp_path, c)) == [("EC925", "error"), ("EC926", "warning")]


def test_eagle31_flags_are_ec927(tmp_path):
    v5_draft(tmp_path / "draft")
    data = json.loads((tmp_path / "draft" / "config.json").read_text())
    (tmp_path / "draft" / "config.json").write_text(json.dumps({**data, "fc_norm": True}))
    flags = "    fc_norm: true\n    norm_output: false"
    assert run(tmp_path, contract(tmp_path, flags, version="0.5.11")) == [("EC927", "error")]
    assert run(tmp_path, contract(tmp_path, flags, version="0.5.12")) == []
    assert run(tmp_path, contract(tmp_path, "    norm_output: true")) == [("EC927", "error")]


def test_trainer_config_file(tmp_path):
    # SpecForge's own draft config (configs/*-eagle3.json: the 4.x layout)
    trainer = v4_draft(tmp_path / "trainer")
    v5_draft(tmp_path / "draft")
    c = contract(tmp_path, "    config: trainer/config.json")
    found = run(tmp_path, c)
    assert ("EC921", "error") not in found and ("EC922", "error") in found
    (trainer / "config.json").write_text("{not json")
    assert run(tmp_path, contract(tmp_path, "    config: trainer/config.json")) == [
        ("EC920", "error")
    ]


def test_no_contract_flags_layouts_that_read_differently(tmp_path):
    v5_draft(tmp_path / "draft")
    on = check_draft_config(tmp_path / "draft", contract=None, engine="sglang", version="0.5.9")
    assert [f.code for f in on] == ["EC928"] and "10000" in on[0].message
    off = check_draft_config(tmp_path / "draft", contract=None, engine="sglang", version="0.5.23")
    assert off == []


@pytest.mark.parametrize(
    "text",
    ['{"rope_theta": "1e6"}', "[1, 2]", '{"rope_scaling": 3}', '{"layer_types": 5}', "\xff"],
)
def test_bad_configs_are_ec920_not_tracebacks(tmp_path, text):
    (tmp_path / "draft").mkdir()
    (tmp_path / "draft" / "config.json").write_text(text, encoding="latin-1")
    found = check_draft_config(tmp_path / "draft", contract=None, engine="sglang", version=None)
    assert [f.code for f in found] == ["EC920"]


@pytest.mark.slow
def test_cli_checks_draft_config(tmp_path):
    v5_draft(tmp_path / "draft")
    contract(tmp_path, "    rope_theta: 1000000.0", version="0.5.9")
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_eagle_contract",
            "check",
            str(tmp_path / "c.yaml"),
            "--checks",
            "draft-config",
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 1, res.stderr
    assert "EC921" in res.stdout


@pytest.mark.slow
def test_plugin_items(tmp_path, pytester):
    # the same families as pytest items: one per family, failing with the rule code
    v5_draft(pytester.path / "draft")
    contract(pytester.path, "    rope_theta: 1000000.0", version="0.5.9")
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-q",
        "--eagle-contract",
        str(pytester.path / "c.yaml"),
        "--eagle-checks",
        "draft-config",
    )
    assert result.ret == 1, result.stdout.str()
    out = result.stdout.str()
    assert "EC921" in out and "1 failed" in out
