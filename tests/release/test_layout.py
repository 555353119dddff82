"""The training-vs-serving layout check: every EC5xx rule made to fail, and the Kimi case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from serving_cases import tiny_contract
from test_evidence import EVIDENCE_CODES
from test_rules import CASES as SHARD_CASES

from pytest_eagle_contract.checks.layout import check_layout
from pytest_eagle_contract.contract.model import load_contract
from pytest_eagle_contract.findings import RULES
from pytest_eagle_contract.shards import synthetic
from pytest_eagle_contract.shards.writing import write_shard

CONTRACTS = Path(__file__).parents[2] / "contracts"

BASE = tiny_contract(
    "tiny", ["residual:2", "residual:4", "residual:5", "final_norm"], "sglang", ">=0.5.13"
)


def draft_dir(tmp_path: Path, config: dict, tensors: dict | None = None) -> Path:
    d = tmp_path / "draft"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(config))
    if tensors:
        save_file(tensors, str(d / "model.safetensors"))
    return d


def nested(ids, **extra):
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": 64,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids},
        **extra,
    }


def findings_of(tmp_path: Path, text: str, serving_args: str | None = None):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return check_layout(load_contract(path), serving_args)


def codes(findings, severity="error"):
    return {f.code for f in findings if f.severity == severity}


def test_matching_layout_passes(tmp_path):
    assert findings_of(tmp_path, BASE + "  aux_layer_ids: [1, 3, 4]\n") == []


def test_draft_config_with_nested_ids_passes(tmp_path):
    draft_dir(tmp_path, nested([1, 3, 4]))
    found = findings_of(tmp_path, BASE + "  draft_config: draft/config.json\n")
    assert found == []


def _case(tmp_path, edit=None, serving="  aux_layer_ids: [1, 3, 4]\n", args=None):
    text = BASE + serving
    if edit and edit[0].startswith("engine: sglang"):  # another engine: its architecture name
        text = text.replace("arch: LlamaForCausalLM", "arch: qwen3_5")
    if edit:
        text = text.replace(*edit)
    return findings_of(tmp_path, text, args)


CASES = {
    "EC501": lambda t: _case(t, serving="  aux_layer_ids: [2, 4, 5]\n"),
    "EC502": lambda t: _case(t, serving="  aux_layer_ids: [0, 1, 3, 4]\n"),
    "EC503": lambda t: (
        draft_dir(
            t, nested([1, 3, 4], num_aux_hidden_states=3), {"fc.weight": torch.zeros(64, 4 * 64)}
        ),
        _case(t, serving="  draft_config: draft\n"),
    )[1],
    "EC504": lambda t: _case(t, ("{layer: residual:4}", "{layer: residual:4, dtype: float16}")),
    "EC505": lambda t: _case(t, ("{layer: final_norm}", "{layer: residual:8}")),
    "EC506": lambda t: _case(
        t,
        (
            "    - {layer: residual:2}\n    - {layer: residual:4}\n",
            "    - {layer: residual:4}\n    - {layer: residual:2}\n",
        ),
        serving="  aux_layer_ids: [3, 1, 4]\n",
    ),
    "EC507": lambda t: (
        draft_dir(t, {"hidden_size": 64}),
        _case(t, serving="  draft_config: draft/config.json\n"),
    )[1],
    "EC508": lambda t: (
        draft_dir(t, {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}),
        _case(t, serving="  draft_config: draft/config.json\n"),
    )[1],
    "EC509": lambda t: (
        draft_dir(
            t,
            nested([1, 3, 4], draft_vocab_size=4, vocab_size=512),
            {
                "fc.weight": torch.zeros(64, 192),
                "d2t": torch.tensor([0, 0, 5, 1]),
                "t2d": torch.zeros(512, dtype=torch.bool).index_fill_(
                    0, torch.tensor([0, 1, 2, 3]), True
                ),
            },
        ),
        _case(t, serving="  draft_config: draft/config.json\n"),
    )[1],
    "EC510": lambda t: _case(t, ("arch: LlamaForCausalLM", "arch: KimiVLForConditionalGeneration")),
    "EC511": lambda t: _case(t, serving="  aux_layer_ids: [1, 3, 7]\n"),
    "EC516": lambda t: _case(  # mlx-vlm: id 0 becomes capture index 0, residual:1
        t,
        ('engine: sglang\n  version: ">=0.5.13"', 'engine: mlx\n  version: "0.7.10"'),
        serving="  aux_layer_ids: [0, 4, 5]\n",
    ),
    "EC512": lambda t: _case(
        t,
        args="python -m sglang.launch_server --speculative-algorithm "
        "EAGLE3 --speculative-eagle-topk 1 --speculative-num-steps 1 "
        "--speculative-num-draft-tokens 16",
    ),
    "EC514": lambda t: _version_case(t, "0.5.9", [1, 2, 3]),
    "EC515": lambda t: (
        draft_dir(t, nested([1, 3, 4])),
        _case(t, serving="  draft_config: draft/config.json\n  aux_layer_ids: [2, 3, 4]\n"),
    )[1],
}


def _version_case(tmp_path, version, ids):
    text = BASE.replace('">=0.5.13"', f'"{version}"') + f"  aux_layer_ids: {ids}\n"
    return findings_of(tmp_path, text)


SEVERITY = {"EC507": "warning", "EC508": "error"}


def test_every_rule_code_has_a_failing_case():
    # EC513: test_missing_contract_shards_fail_as_ec513_and_layout_still_runs below;
    # EC701-EC707: tests/unit/test_capture.py; EC708-EC711: tests/cli/test_compare_captures.py;
    # EC8xx: tests/unit/test_sharpness.py
    capture = {f"EC70{i}" for i in range(1, 8)} | {"EC708", "EC709", "EC710", "EC711"}
    sharpness = {code for code in RULES if code.startswith("EC8")}
    arrow = {"EC206"}  # tests/unit/test_arrow_rows.py
    not_run = {"EC009"}  # tests/hostile/test_model_inputs.py
    # tests/unit/test_draft.py; EC920-EC935: tests/unit/test_draft_config.py,
    # tests/unit/test_vocabulary.py
    draft = {code for code in RULES if code.startswith("EC9")}
    identity = {"EC620", "EC621", "EC622", "EC623"}  # tests/unit/test_target_identity.py
    identity |= {"EC625"}  # tests/unit/test_probe.py: the probe's target is not the shards'
    tokens = {code for code in RULES if code[:4] in ("EC33", "EC34")}  # tests/unit/test_tokens.py
    fp8 = {"EC207", "EC310", "EC311", "EC312", "EC313", "EC624"}  # tests/unit/test_numerics.py
    measured = {"EC712", "EC713", "EC714", "EC715", "EC716"}  # tests/cli/test_measure.py
    # EC517-EC520: tests/cli/test_serving_knobs.py; EC521: tests/cli/test_launch_method.py;
    # EC523, EC524: tests/cli/test_drafter_kind.py (mlx-vlm's drafter kind)
    knobs = {"EC517", "EC518", "EC519", "EC520", "EC521", "EC523", "EC524"}
    # EC720-EC727: tests/cli/test_acceptance_profiles.py
    profiles = {code for code in RULES if code.startswith("EC72")}
    covered = (
        set(CASES)
        | set(SHARD_CASES)
        | EVIDENCE_CODES
        | {"EC513"}
        | capture
        | sharpness
        | arrow
        | not_run
        | draft
        | identity
        | tokens
        | fp8
        | measured
        | knobs
        | profiles
        | {"EC522"}  # tests/release/test_dflash.py: guessed DFlash taps
    )
    assert covered == set(RULES)


@pytest.mark.parametrize("code", sorted(CASES))
def test_layout_rule_fails(tmp_path, code):
    found = CASES[code](tmp_path)
    assert code in codes(found, SEVERITY.get(code, "error")), found


@pytest.mark.slow
def test_missing_contract_shards_fail_as_ec513_and_layout_still_runs(tmp_path, cli):
    (tmp_path / "c.yaml").write_text(BASE + "  aux_layer_ids: [2, 4, 5]\n")
    res = cli("check", tmp_path / "c.yaml")
    assert res.returncode == 1
    assert "EC513 missing-shards" in res.stdout and "EC501 layout-mismatch" in res.stdout
    res = cli("check", tmp_path / "c.yaml", tmp_path / "nowhere")  # an argument: exit 2
    assert res.returncode == 2 and "does not exist" in res.stderr


def test_ec507_is_an_error_through_ec501_when_the_default_differs(tmp_path):
    draft_dir(tmp_path, {"hidden_size": 64})
    text = BASE.replace("residual:4}", "residual:3}") + "  draft_config: draft/config.json\n"
    found = findings_of(tmp_path, text)
    assert {"EC507", "EC501"} <= {f.code for f in found}


def test_unsorted_ids_trained_in_sorted_order_is_only_a_warning(tmp_path):
    found = _case(tmp_path, serving="  aux_layer_ids: [3, 1, 4]\n")
    assert codes(found) == set() and codes(found, "warning") == {"EC506"}


# -- the Kimi-K2.5 case -----------------------------------------------------------------


def kimi_shards(tmp_path: Path, medians=synthetic.KIMI_MEDIANS) -> Path:
    ids, mask, slots = synthetic.kimi_like_sample(seed=0, medians=medians)
    write_shard(tmp_path / "shards", "speculators-v1", 0, ids, mask, slots)
    return tmp_path / "shards"


@pytest.mark.slow
def test_kimi_real_bug_fails_with_side_by_side_table_and_evidence(tmp_path, cli):
    shards = kimi_shards(tmp_path)
    # -v: every finding in full, each on its line (the default view wraps its prose)
    res = cli("check", CONTRACTS / "kimi-k2.5-eagle3.yaml", shards, "--checks", "layout", "-v")
    assert res.returncode == 1
    out = res.stdout
    assert (
        "EC501 layout-mismatch: the draft's fc is trained on embed, residual:3, residual:31 "
        "but sglang 0.5.13..0.5.23 feeds it residual:2, residual:30, residual:58"
    ) in out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1] in "012"]
    assert rows[0][:7] == ["0", "slot", "0", "=", "embed", "id", "2"]
    assert rows[0][-1] == "DIFFERS" and rows[1][4] == "residual:3" and rows[2][-3] == "="
    assert "slot 0 looks like the embedding: median norm 1.04" in out
    assert "the trainer's layers sit 1 above the engine's" in out


def fixed_kimi(tmp_path: Path, version: str = ">=0.5.13") -> Path:
    text = (CONTRACTS / "kimi-k2.5-eagle3.yaml").read_text()
    text = text.replace(
        "{layer: embed,       norm: {median: 1.04,   rtol: 0.2}}", "{layer: residual:2}"
    )
    text = text.replace("layer: residual:3,", "layer: residual:30,")
    text = text.replace("layer: residual:31,", "layer: residual:58,")
    text = text.replace("layer: residual:59,", "layer: residual:61,")
    text = text.replace('version: ">=0.5.13"', f'version: "{version}"')
    path = tmp_path / "kimi-fixed.yaml"
    path.write_text(text)
    return path


def test_kimi_fixed_to_the_right_slots_passes(tmp_path, cli):
    res = cli("check", fixed_kimi(tmp_path), "--checks", "layout")
    assert res.returncode == 0, res.stdout
    assert "ok: 1 checks" in res.stdout


@pytest.mark.slow
def test_kimi_sglang_versions_resolve_differently_and_the_check_says_so(tmp_path, cli):
    ok = cli("check", fixed_kimi(tmp_path, "0.5.13"), "--checks", "layout")
    assert ok.returncode == 0, ok.stdout
    old = cli("check", fixed_kimi(tmp_path, "0.5.12"), "--checks", "layout", "-v")
    assert old.returncode == 1
    assert "sglang 0.5.12 feeds it residual:3, residual:31, residual:59" in old.stdout
    span = cli("check", fixed_kimi(tmp_path, ">=0.5.10"), "--checks", "layout", "-v")
    assert span.returncode == 1
    # 0.5.10 also captures CUDA graphs with the default ids (EC514), so it is its own span
    assert "sglang 0.5.10 feeds it residual:3, residual:31, residual:59" in span.stdout
    assert "sglang 0.5.11..0.5.12 feeds it residual:3, residual:31, residual:59" in span.stdout
    assert "EC514" in span.stdout
    assert "0.5.13..0.5.23" not in span.stdout  # those versions agree with training
    absent = cli("check", fixed_kimi(tmp_path, "0.5.9"), "--checks", "layout", "-v")
    assert absent.returncode == 1 and "EC510" in absent.stdout
    assert "has no EAGLE-3 capture for KimiK25ForConditionalGeneration" in absent.stdout


# -- EC501's fix: the ids to paste, or what to retrain on ------------------------------------


def _ec501(found):
    return [f for f in found if f.code == "EC501"]


def test_ec501_names_the_ids_that_serve_the_trained_layers(tmp_path):
    # Llama 0.5.13+: id k feeds residual:k+1, so residual 2, 4, 5 need ids [1, 3, 4]
    (ec501,) = _ec501(_case(tmp_path, serving="  aux_layer_ids: [2, 4, 5]\n"))
    assert ec501.hint == (
        'SGLang 0.5.13..0.5.23: set "eagle_config": {"eagle_aux_hidden_state_layer_ids": '
        "[1, 3, 4]} in the draft's config.json and aux_layer_ids: [1, 3, 4] in serving "
        "(the same ids on every SGLang version in >=0.5.13)"
    )


def test_ec501_fix_from_the_engine_default_goes_into_the_draft_config(tmp_path):
    draft_dir(tmp_path, {"hidden_size": 64})
    text = BASE.replace("residual:4}", "residual:3}") + "  draft_config: draft/config.json\n"
    (ec501,) = _ec501(findings_of(tmp_path, text))
    assert '"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 4]}' in ec501.hint
    assert "aux_layer_ids" not in ec501.hint.replace("eagle_aux_hidden_state_layer_ids", "")


def test_ec501_says_what_to_retrain_on_when_no_ids_can(tmp_path):
    text = BASE.replace("{layer: residual:2}", "{layer: embed}") + "  aux_layer_ids: [1, 3, 4]\n"
    (ec501,) = _ec501(findings_of(tmp_path, text))
    assert ec501.hint.startswith(
        "SGLang 0.5.13..0.5.23 on LlamaForCausalLM: no ids make it feed embed; retrain on "
        "residual:1, residual:4, residual:5 (the nearest it can feed), then set "
        '"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 3, 4]}'
    )


def test_ec501_on_vllm_finds_the_embedding_id(tmp_path):
    text = BASE.replace("{layer: residual:2}", "{layer: embed}").replace(
        'engine: sglang\n  version: ">=0.5.13"', "engine: vllm"
    )
    (ec501,) = _ec501(findings_of(tmp_path, text + "  aux_layer_ids: [2, 4, 5]\n"))
    assert ec501.hint == (
        'vLLM: set "eagle_aux_hidden_state_layer_ids": [0, 4, 5] in the draft\'s config.json '
        "and aux_layer_ids: [0, 4, 5] in serving"
    )


def test_kimi_ec501_end_to_end_says_what_to_retrain_on(tmp_path, cli):
    res = cli("check", CONTRACTS / "kimi-k2.5-eagle3.yaml", "--checks", "layout", "-v")
    assert res.returncode == 1
    hint = next(line for line in res.stdout.splitlines() if "no ids make it feed" in line)
    # 0.5.13's loop adds a None residual before layer 0; from 0.5.14 the capture happens
    # after prepare_attn, where index 0 is the embedding output (engines/sglang_rules.json)
    assert hint.strip() == (
        "hint: SGLang 0.5.13 on KimiK25ForConditionalGeneration: no ids make it feed "
        "embed; retrain on residual:2, residual:3, residual:31 (the nearest it can feed), then "
        'set "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 3, 31]} in the '
        "draft's config.json and aux_layer_ids: [2, 3, 31] in serving; SGLang 0.5.14..0.5.23: "
        'set "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 3, 31]} in the '
        "draft's config.json and aux_layer_ids: [0, 3, 31] in serving"
    )


@pytest.mark.slow
def test_kimi_fix_per_version_prefers_ids_that_serve_every_version(tmp_path, cli):
    # 0.5.10..0.5.12 add 1 to every id; 0.5.13+ add 1 only when the first id is 1:
    # [1, 29, 57] feeds residual 2, 30, 58 on both, [2, 30, 58] only on 0.5.13+
    res = cli("check", fixed_kimi(tmp_path, ">=0.5.10"), "--checks", "layout", "-v")
    pasted = '"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57]}'
    every = "(the same ids on every SGLang version in >=0.5.10)"
    for label in ("0.5.10", "0.5.11..0.5.12"):
        assert f"hint: SGLang {label}: set {pasted} in the draft's config.json" in res.stdout
    assert res.stdout.count(every) == 2
    one = cli("check", fixed_kimi(tmp_path, "0.5.12"), "--checks", "layout", "-v")
    assert f"hint: SGLang 0.5.12: set {pasted} in the draft's config.json and aux" in one.stdout
