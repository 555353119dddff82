"""docs/layers.md's onnxruntime-genai, lmdeploy and optimum-intel findings against the wheels
(never part of the default run).

``scripts/read_engine_wheels.py`` re-reads the folder EAGLE_CONTRACT_ENGINE_WHEELS names
(``pip download --no-deps`` of onnxruntime-genai 0.14.1 0.15.2 0.16.0 0.17.1 0.18.0, lmdeploy
0.16.0 0.17.0 0.18.0 and optimum-intel 2.0.0 2.1.0 2.2.0) with zipfile and ast; each test
holds one claim of docs/layers.md ("Methods per engine and release") to what they hold.
"""

from __future__ import annotations

import pytest
from release_helpers import wheel_folder

DIR = wheel_folder(
    "EAGLE_CONTRACT_ENGINE_WHEELS", "onnxruntime-genai/lmdeploy/optimum-intel", "engine-wheels"
)

import read_engine_wheels as reader  # noqa: E402

READ = reader.read(DIR)
ORTG = READ.get("onnxruntime-genai", {})
LMD = READ.get("lmdeploy", {})
OI = READ.get("optimum-intel", {})
ORTG_SERVING = ("0.16.0", "0.17.1", "0.18.0")


def _need(table: dict[str, dict[str, object]], release: str) -> dict[str, object]:
    if release not in table:
        pytest.fail(f"{release}'s wheel is not in {DIR}")
    return table[release]


@pytest.mark.parametrize("release", ["0.14.1", "0.15.2"])
def test_onnxruntime_genai_before_0_16_has_no_drafter(release):
    found = _need(ORTG, release)
    assert not any(found[m] for m in ("dflash", "dflash2", "dspark", "eagle3", "mtp"))


@pytest.mark.parametrize("release", ORTG_SERVING)
def test_onnxruntime_genai_taps_the_output_of_target_layer_t(release):
    found = _need(ORTG, release)
    assert found["dflash2"] and found["dspark"] and found["mtp"]
    assert not found["dflash"] and not found["eagle3"]
    # aux entry i = the residual entering layer i, in [1, L); the draft's id t needs i = t + 1
    assert found["aux_entry_is_input_of_layer"] and found["aux_range"]
    assert found["aux_is_target_layer_ids_plus"] == 1
    assert found["targets"] == [
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
    ]
    assert found["mtp_state_final_norm"]


@pytest.mark.parametrize("release", ["0.16.0", "0.17.0", "0.18.0"])
def test_lmdeploy_eagle3_feeds_fixed_layers_whatever_the_draft_says(release):
    found = _need(LMD, release)
    assert found["eagle3_fixed_ids"] and found["eagle3_captures_layer_input"]
    assert not found["eagle3_reads_draft_ids"]


@pytest.mark.parametrize("release", ["0.16.0", "0.17.0", "0.18.0"])
def test_lmdeploy_eagle3_targets_and_drafters(release):
    """The targets whose configuration builder sets the fixed taps: Llama (by
    architectures[0]) in every release, Kimi-K2 (model_type kimi_k2, kimi_k25 through it) from
    0.17.0, captured as the state entering layer i; the drafters' fc takes 3 states."""
    found = _need(LMD, release)
    assert found["eagle3_llama_archs"] == ["LlamaForCausalLM"]
    assert found["eagle3_llama_draft_fc"] == 3
    kimi = release != "0.16.0"
    assert found["eagle3_kimi_k2"] == kimi and found["eagle3_kimi_k25_as_k2"] == kimi
    assert found["eagle3_kimi_captures_layer_input"] == kimi
    assert found["eagle3_kimi_min_layers"] == (5 if kimi else None)
    assert found["eagle3_kimi_draft_ids_counted_only"] == kimi


def test_lmdeploy_eagle3_rules_are_what_the_wheels_say():
    """engines/lmdeploy_rules.json (what ``resolve --engine lmdeploy`` answers EAGLE-3 by) is
    ``read_engine_wheels.py --eagle3-rules`` of these wheels."""
    from pytest_eagle_contract.engines import lmdeploy

    assert reader.eagle3_rules(READ) == lmdeploy.table()


@pytest.mark.parametrize("release", ["0.16.0", "0.17.0"])
def test_lmdeploy_before_0_18_has_no_dflash(release):
    found = _need(LMD, release)
    assert not (found["dflash"] or found["dflash2"] or found["dspark"])


def test_lmdeploy_0_18_dflash_taps_the_output_of_target_layer_t():
    found = _need(LMD, "0.18.0")
    assert found["dflash"] and not found["dflash2"] and not found["dspark"]
    assert "target_layer_ids" in found["keys"] and not found["top_level_target_layer_ids"]
    assert found["fallback"]
    assert found["captures_layer_output"] == {"qwen3": True, "qwen3_5": True, "llama": False}


@pytest.mark.parametrize("release", ["2.0.0", "2.1.0"])
def test_optimum_intel_before_2_2_exports_no_dflash_or_mtp(release):
    found = _need(OI, release)
    assert not any(found.values())


def test_optimum_intel_2_2_copies_the_ids_into_rt_info():
    found = _need(OI, "2.2.0")
    assert found["dflash_export"] and found["rt_info_ids_as_is"] and found["mtp_export"]
    assert not found["dflash2"] and not found["dspark"]


def test_method_engines_rules_are_what_the_wheels_say():
    """engines/method_engines_rules.json (what ``resolve --engine onnxruntime-genai|lmdeploy``
    answers by) is ``read_engine_wheels.py --rules`` of these wheels."""
    from pytest_eagle_contract.engines import method_engines

    assert reader.rules(READ) == method_engines.table()
