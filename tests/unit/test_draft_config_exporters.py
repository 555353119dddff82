"""The draft-config family on drafts written by the trainers' own exporters (issue 24).

speculators' EAGLE-3 converter (``Eagle3Converter._build_eagle3_speculator_config``, the
code that builds the converted draft's config.json) takes ``rope_theta`` from the source
draft config's top level, default 10000.0. A source written by transformers 5 holds the theta
only in ``rope_parameters``, so the converted draft says 10000 where the draft trained at
1e6: ``check_draft_config`` flags it EC921 against a contract that says what was trained. A
transformers 4 source (top-level ``rope_theta``) converts correctly and passes.

SpecForge 0.2.0's exporter (``specforge export --to sglang``:
``specforge.export.to_sglang.export_to_sglang``) builds the draft from the ``--draft-config``
file, ``save_pretrained``s it (transformers 5: ``rope_parameters`` only) and then
``apply_legacy_rope_scaling`` copies the theta to the top level for transformers 4 readers.
On a transformers 5 target at theta 1e6 the export says 1e6 in both places, the theta the
draft trains with (its rotary embedding's base, built by SpecForge from the same config), and
passes on SGLang 0.5.9 (transformers 4) and 0.5.23 (transformers 5). Two exports that are
wrong, made by the same exporter: with SpecForge's own opt-out of the copy
(``SPECFORGE_DISABLE_LEGACY_ROPE_SCALING=1``) a transformers 4 engine reads 10000 (EC921);
and the checkpoint does not carry the draft config, so an export given a config without the
theta (SpecForge 0.1.0's shipped llama3-8B config had none) says 10000 (EC921 everywhere).

Needs the ``exporters`` extra and the trainers installed with ``--no-deps`` (.ci/run, ``tox -e
exporters``); each trainer's tests skip where it is absent (fail under .ci/run).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from test_draft_config import H, contract, run
from trainer_exports import trainer_module
from transformers import LlamaConfig

pytestmark = pytest.mark.slow  # importing speculators or SpecForge alone takes seconds

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


TRAINED = "    rope_theta: 1000000.0\n    max_position_embeddings: 32768"


# speculators 0.9.0: Eagle3Converter


@pytest.fixture
def converter() -> Any:
    return trainer_module("speculators.convert.eagle.eagle3_converter")


def export(converter: Any, tmp_path: Path, source: dict[str, Any]) -> dict[str, Any]:
    """Run speculators' own config builder on ``source`` and write the draft's config.json."""
    source = {**source, "draft_vocab_size": 1000, "target_vocab_size": 1000}
    built = converter.Eagle3Converter()._build_eagle3_speculator_config(source, target(tmp_path))
    built.save_pretrained(tmp_path / "draft")
    data: dict[str, Any] = json.loads((tmp_path / "draft" / "config.json").read_text())
    return data


def test_a_transformers_5_source_exports_the_fallback_theta_and_is_ec921(
    converter: Any, tmp_path: Path
) -> None:
    source = LlamaConfig(num_hidden_layers=1, rope_theta=1e6, **SMALL).to_dict()
    assert "rope_theta" not in source  # transformers 5 keeps it in rope_parameters only
    written = export(converter, tmp_path, source)
    layer = written["transformer_layer_config"]
    assert layer["rope_parameters"]["rope_theta"] == 10000.0  # the converter's default
    found = run(tmp_path, contract(tmp_path, TRAINED))
    assert ("EC921", "error") in found
    assert {code for code, _ in found} == {"EC921"}


def test_a_top_level_theta_source_exports_correctly_and_passes(
    converter: Any, tmp_path: Path
) -> None:
    source = LlamaConfig(num_hidden_layers=1, rope_theta=1e6, **SMALL).to_dict()
    source["rope_theta"] = 1e6  # the transformers 4 layout the converter reads
    written = export(converter, tmp_path, source)
    assert written["transformer_layer_config"]["rope_parameters"]["rope_theta"] == 1e6
    assert run(tmp_path, contract(tmp_path, TRAINED)) == []


# SpecForge 0.2.0: specforge export --to sglang


@pytest.fixture
def specforge() -> dict[str, ModuleType]:
    names = {
        "to_sglang": "specforge.export.to_sglang",
        "auto": "specforge.modeling.auto",
        "loading": "specforge.training.model_loading",
        "config": "specforge.config",
        "eagle3": "specforge.algorithms.eagle3.providers",
    }
    return {key: trainer_module(name) for key, name in names.items()}


def shipped_config(tmp_path: Path, **drop_or_set: Any) -> Path:
    """A draft config in the layout of SpecForge's own configs/qwen3-8b-eagle3.json (written
    by transformers 4: top-level ``rope_theta``, ``"rope_scaling": null``), tiny sizes."""
    data: dict[str, Any] = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "num_hidden_layers": 1,
        "head_dim": H // 4,
        "rms_norm_eps": 1e-06,
        "hidden_act": "silu",
        "rope_scaling": None,
        "rope_theta": 1000000,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0",
        "draft_vocab_size": 32000,  # as SpecForge's configs, and the default it generates
        **SMALL,
    }
    for key, value in drop_or_set.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    path = tmp_path / "shipped.json"
    path.write_text(json.dumps(data, indent=2))
    return path


def train(sf: dict[str, ModuleType], tmp_path: Path, draft_config: Path | None) -> float:
    """What SpecForge trains: the run's draft config resolved by SpecForge itself
    (``resolve_draft_config``: from ``draft_config``, or generated from the target when it is
    None), the draft built from it, saved as the trainer's runtime checkpoint
    (``training_state.pt``: strategy and the draft weights, embeddings left out) in
    ``tmp_path/ckpt``. Returns the theta the draft trains with (its rotary base)."""
    model: dict[str, Any] = {"target_model_path": target(tmp_path)}
    if draft_config is not None:
        model["draft_model_config"] = str(draft_config)
    cfg = sf["config"].Config.model_validate(
        {"model": model, "data": {"hidden_states_path": str(tmp_path / "hs")}}
    )
    provider = sf["eagle3"].algorithm_providers().model.draft_config
    resolved = sf["loading"].resolve_draft_config(cfg, provider=provider)
    draft = sf["auto"].AutoDraftModel.from_config(resolved)
    weights = {k: v for k, v in draft.state_dict().items() if "embed" not in k.lower()}
    (tmp_path / "ckpt").mkdir()
    torch.save(
        {"strategy": "eagle3", "draft_state_dict": weights}, tmp_path / "ckpt" / "training_state.pt"
    )
    if draft_config is None:  # the file an export needs: the resolved config as saved
        resolved.save_pretrained(tmp_path / "generated")
    return float(draft.midlayer.self_attn.rotary_emb.base)


def export_specforge(
    sf: dict[str, ModuleType], tmp_path: Path, draft_config: Path
) -> dict[str, Any]:
    """``specforge export --to sglang --checkpoint ckpt --draft-config ... --output-dir draft``."""
    sf["to_sglang"].export_to_sglang(
        str(tmp_path / "ckpt"), str(draft_config), str(tmp_path / "draft")
    )
    data: dict[str, Any] = json.loads((tmp_path / "draft" / "config.json").read_text())
    return data


@pytest.mark.parametrize("source", ["shipped", "generated"])
def test_specforge_exports_the_theta_it_trained_and_passes(
    specforge: dict[str, ModuleType], tmp_path: Path, source: str
) -> None:
    shipped = shipped_config(tmp_path) if source == "shipped" else None
    assert train(specforge, tmp_path, shipped) == 1e6
    draft_config = shipped or tmp_path / "generated" / "config.json"
    written = export_specforge(specforge, tmp_path, draft_config)
    assert written["rope_parameters"]["rope_theta"] == 1e6
    assert written["rope_theta"] == 1e6  # apply_legacy_rope_scaling's copy
    for version in ("0.5.9", "0.5.23"):  # transformers 4.57.1, 5.19.0
        assert run(tmp_path, contract(tmp_path, TRAINED, version=version)) == []


def test_specforge_without_its_legacy_copy_is_ec921_on_a_transformers_4_engine(
    specforge: dict[str, ModuleType], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert train(specforge, tmp_path, None) == 1e6
    monkeypatch.setenv("SPECFORGE_DISABLE_LEGACY_ROPE_SCALING", "1")
    written = export_specforge(specforge, tmp_path, tmp_path / "generated" / "config.json")
    assert written["rope_parameters"]["rope_theta"] == 1e6 and "rope_theta" not in written
    assert run(tmp_path, contract(tmp_path, TRAINED, version="0.5.9")) == [("EC921", "error")]
    assert run(tmp_path, contract(tmp_path, TRAINED, version="0.5.23")) == []


def test_specforge_exported_with_a_config_without_the_theta_is_ec921(
    specforge: dict[str, ModuleType], tmp_path: Path
) -> None:
    assert train(specforge, tmp_path, None) == 1e6  # generated from the 1e6 target
    written = export_specforge(specforge, tmp_path, shipped_config(tmp_path, rope_theta=None))
    assert written["rope_parameters"]["rope_theta"] == 10000.0
    for version in ("0.5.9", "0.5.23"):
        found = run(tmp_path, contract(tmp_path, TRAINED, version=version))
        assert found == [("EC921", "error")]
