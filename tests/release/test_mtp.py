"""MTP heads (issue 38): ``resolve --method mtp`` and the layout check of a ``method: mtp``
contract, by the rules ``scripts/gen_mtp_rules.py`` read from the releases
(``engines/mtp_rules.json``; llama.cpp from ``llamacpp_rules.json``; docs/mtp.md).

An MTP head reads one target state; the expected states below are the docs' statement of
the rules (SGLang and vLLM: the final norm's output on the targets read; llama.cpp: its graph's
``t_h_nextn``), not copied from the tool's output.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serving_cases import resolve_json

L = 61


def mtp(cli, engine, arch, *more):
    return resolve_json(
        cli, "--engine", engine, "--method", "mtp", "--num-layers", L, "--arch", arch, *more
    )


@pytest.mark.parametrize(
    "engine,arch,version,state",
    [
        ("sglang", "DeepseekV3ForCausalLM", "0.5.23", "final_norm"),
        ("sglang", "Qwen3NextForCausalLM", "0.5.11", "final_norm"),
        ("sglang", "DeepseekV3ForCausalLM", "0.5.21", "final_norm"),
        ("vllm", "DeepseekV3ForCausalLM", "0.34.0", "final_norm"),
        ("vllm", "Glm4MoeForCausalLM", "0.24.0", "final_norm"),
        ("llama.cpp", "qwen35", "0.3.36", "final_norm"),
        ("llama.cpp", "mimo2", "0.3.36", f"residual:{L}"),
    ],
)
def test_resolve_names_the_one_state_fed(cli, engine, arch, version, state):
    res, out = mtp(cli, engine, arch, "--version", version)
    assert res.returncode == 0, res.stderr
    assert out["method"] == "mtp" and out["layers"] == [state] and out["problems"] == []
    assert out["source"].startswith("MTP: ") and out["ids"] is None


def test_resolve_reads_the_target_config(cli, tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["DeepseekV3ForCausalLM"],
                "model_type": "deepseek_v3",
                "num_hidden_layers": L,
                "num_nextn_predict_layers": 1,
            }
        )
    )
    res, out = resolve_json(
        cli, "--engine", "vllm", "--method", "mtp", "--target-config", target
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["final_norm"] and out["num_layers"] == L


@pytest.mark.parametrize(
    "engine,arch,said",
    [
        ("sglang", "MiMoV2FlashForCausalLM", "hidden_states_before_norm"),
        ("vllm", "DeepseekV4ForCausalLM", "get_mtp_target_hidden_states"),
        ("llama.cpp", "qwen3", "never sets t_h_nextn"),
        ("llama.cpp", "deepseek4", "hyper-connection streams"),
        ("sglang", "NoSuchForCausalLM", "was not read"),
    ],
)
def test_targets_not_followed_are_refused(cli, engine, arch, said):
    res, out = mtp(cli, engine, arch)
    assert res.returncode == 2 and out["layers"] is None
    assert said in out["refused"]


@pytest.mark.parametrize("engine", ["trtllm", "openvino"])
def test_engines_not_read_are_refused_with_a_reason(cli, engine):
    res = cli(
        "resolve", "--engine", engine, "--method", "mtp", "--num-layers", L, "--arch", "x"
    )  # fmt: skip
    text = " ".join(res.stderr.split())
    assert res.returncode == 2 and "MTP not read" in text, res.stderr


def test_a_tap_list_is_a_usage_error(cli):
    res = cli("resolve", "--engine", "sglang", "--method", "mtp", "--num-layers", L, "--ids", "1")
    assert res.returncode == 2 and "no tap list" in res.stderr


def contract(tmp_path: Path, state: str, engine: str = "sglang", version: str = "0.5.23"):
    c = tmp_path / f"mtp-{engine}-{state.replace(':', '')}.yaml"
    c.write_text(
        "contract: x\nversion: 1\nmethod: mtp\n"
        f"target: {{arch: DeepseekV3ForCausalLM, num_hidden_layers: {L}, hidden_size: 7168}}\n"
        f"training:\n  slots:\n    - {{layer: '{state}'}}\n"
        f"serving:\n  engine: {engine}\n  version: '{version}'\n"
    )
    return c


def findings(cli, path: Path):
    res = cli("check", path, "--checks", "layout", "--json")
    assert "Traceback" not in res.stderr, res.stderr
    return res, json.loads(res.stdout)["findings"]


@pytest.mark.parametrize("engine,version", [("sglang", "0.5.23"), ("vllm", ">=0.33.0")])
def test_check_trained_on_the_state_served_passes(cli, tmp_path, engine, version):
    res, found = findings(cli, contract(tmp_path, "final_norm", engine, version))
    assert res.returncode == 0 and found == [], found


def test_check_trained_on_another_state_is_ec501(cli, tmp_path):
    """Trained on the last layer's output before the final norm (speculators' vLLM id L),
    served the final norm's output by SGLang: EC501."""
    res, found = findings(cli, contract(tmp_path, f"residual:{L}"))
    assert res.returncode == 1 and [f["code"] for f in found] == ["EC501"]
    assert found[0]["expected"] == f"residual:{L}" and found[0]["found"] == "final_norm"


def test_check_target_not_followed_is_ec510(cli, tmp_path):
    c = contract(tmp_path, "final_norm")
    c.write_text(c.read_text().replace("DeepseekV3ForCausalLM", "MiMoV2FlashForCausalLM"))
    res, found = findings(cli, c)
    assert res.returncode == 1 and [f["code"] for f in found] == ["EC510"]


def test_check_engine_not_read_is_refused(cli, tmp_path):
    res = cli("check", contract(tmp_path, "final_norm", "openvino", "2.2.0"), "--checks", "layout")
    assert res.returncode == 2 and "MTP not read" in " ".join(res.stderr.split()), res.stderr


def test_detect_names_mtp_drafts_and_targets_with_mtp_layers():
    from pytest_eagle_contract.methods import detect

    assert detect({"architectures": ["DeepseekV3ForCausalLMNextN"]}) == "mtp"
    assert detect({"architectures": ["Qwen3NextMTP"]}) == "mtp"
    assert detect({"architectures": ["X"], "num_nextn_predict_layers": 1}) == "mtp"
    assert detect({"text_config": {"mtp_num_hidden_layers": 1}}) == "mtp"
    assert detect({"architectures": ["X"], "num_nextn_predict_layers": 0}) is None
    eagle3 = {"architectures": ["LlamaForCausalLM"], "num_nextn_predict_layers": 1}
    assert detect({**eagle3, "draft_vocab_size": 32000}) is None


def test_rules_table_pins_what_the_releases_say():
    from pytest_eagle_contract.engines.mtp import _table, releases, row

    assert releases("sglang")[0] == "0.5.11" and releases("vllm")[-1] == "0.34.0"
    assert releases("llama.cpp") == ["0.3.35", "0.3.36"]
    hooks = {r["since"]: (r["hook_v1"], r["hook_v2"]) for r in _table()["vllm"]["rows"]}
    assert hooks["0.23.0"] == (True, False) and hooks["0.34.0"] == (False, True)
    assert row("vllm", "0.34.0")["targets"]["DeepseekV4ForCausalLM"] == "own"
    sg = row("sglang", "0.5.23")
    assert sg["prefers_before_norm"] and sg["drafts"]["DeepseekV3ForCausalLMNextN"] == [
        "enorm",
        "hnorm",
    ]


def test_matrix_of_an_mtp_contract(cli, tmp_path):
    """``matrix`` lists the state every engine read feeds the head, against the trained one."""
    res = cli("matrix", contract(tmp_path, "final_norm"), "--json")
    assert res.returncode in (0, 1), res.stderr
    out = json.loads(res.stdout)
    assert out["method"] == "mtp" and out["trained"] == ["final_norm"]
    rows = {(r["engine"], r["versions"][-1]): r for r in out["rows"]}
    assert rows[("sglang", "0.5.23")]["feeds"] == ["final_norm"]
    assert rows[("vllm", "0.34.0")]["feeds"] == ["final_norm"]
    assert rows[("llama.cpp", "0.3.36")]["feeds"] is None
