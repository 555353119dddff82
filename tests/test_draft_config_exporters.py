"""The draft-config family on drafts written by a trainer's own exporter (issue 24).

speculators' EAGLE-3 converter (``Eagle3Converter._build_eagle3_speculator_config``, the
code that builds the converted draft's config.json) takes ``rope_theta`` from the source
draft config's top level, default 10000.0. A source written by transformers 5 holds the theta
only in ``rope_parameters``, so the converted draft says 10000 where the draft trained at
1e6: ``check_draft_config`` flags it EC921 against a contract that says what was trained. A
transformers 4 source (top-level ``rope_theta``) converts correctly and passes.

Needs the ``exporters`` extra (``tox -e exporters``); skipped where speculators is absent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_draft_config import H, contract, run
from transformers import LlamaConfig

converter = pytest.importorskip(
    "speculators.convert.eagle.eagle3_converter",
    reason="speculators' EAGLE-3 converter is not importable: tox -e exporters, or pip install "
    "-e '.[exporters]' and then pip install --no-deps speculators==0.9.0",
)

pytestmark = pytest.mark.slow  # importing speculators alone takes seconds

SMALL: dict[str, Any] = {
    "hidden_size": H,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 2 * H,
    "vocab_size": 1000,
    "max_position_embeddings": 32768,
}


def target(tmp_path: Path) -> str:
    """A tiny Llama target saved by the installed transformers 5, trained at theta 1e6."""
    LlamaConfig(num_hidden_layers=8, rope_theta=1e6, **SMALL).save_pretrained(tmp_path / "t")
    saved = json.loads((tmp_path / "t" / "config.json").read_text())
    assert saved["rope_parameters"]["rope_theta"] == 1e6
    return str(tmp_path / "t")


def export(tmp_path: Path, source: dict[str, Any]) -> dict[str, Any]:
    """Run speculators' own config builder on ``source`` and write the draft's config.json."""
    source = {**source, "draft_vocab_size": 1000, "target_vocab_size": 1000}
    built = converter.Eagle3Converter()._build_eagle3_speculator_config(source, target(tmp_path))
    built.save_pretrained(tmp_path / "draft")
    data: dict[str, Any] = json.loads((tmp_path / "draft" / "config.json").read_text())
    return data


TRAINED = "    rope_theta: 1000000.0\n    max_position_embeddings: 32768"


def test_a_transformers_5_source_exports_the_fallback_theta_and_is_ec921(tmp_path):
    source = LlamaConfig(num_hidden_layers=1, rope_theta=1e6, **SMALL).to_dict()
    assert "rope_theta" not in source  # transformers 5 keeps it in rope_parameters only
    written = export(tmp_path, source)
    layer = written["transformer_layer_config"]
    assert layer["rope_parameters"]["rope_theta"] == 10000.0  # the converter's default
    found = run(tmp_path, contract(tmp_path, TRAINED))
    assert ("EC921", "error") in found
    assert {code for code, _ in found} == {"EC921"}


def test_a_top_level_theta_source_exports_correctly_and_passes(tmp_path):
    source = LlamaConfig(num_hidden_layers=1, rope_theta=1e6, **SMALL).to_dict()
    source["rope_theta"] = 1e6  # the transformers 4 layout the converter reads
    written = export(tmp_path, source)
    assert written["transformer_layer_config"]["rope_parameters"]["rope_theta"] == 1e6
    assert run(tmp_path, contract(tmp_path, TRAINED)) == []
