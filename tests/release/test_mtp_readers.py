"""MTP heads on lmdeploy, mlx-vlm and the trainers (issue 38): ``resolve --method mtp`` and the
layout check of a ``method: mtp`` contract by the rules ``scripts/gen_mtp_rules.py`` read from
lmdeploy 0.16.0-0.18.0, mlx-vlm 0.6.15-0.7.10, speculators 0.9.0 and specforge 0.2.0
(``engines/mtp_rules.json``; docs/mtp.md).

The expected states are the docs' statement of the rules, not copied from the tool's output:
lmdeploy hands the MTP proposer the target's ``hidden_states`` output, the final norm's;
mlx-vlm hands the drafter the final norm's output on Qwen3.5 and Gemma-4 and the last layer's
output before it on Inkling; speculators trains the head on vLLM's aux id L (``residual:L``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serving_cases import resolve_json

L = 61


def ask(cli, *args):
    return resolve_json(cli, "--method", "mtp", "--num-layers", L, *args)


@pytest.mark.parametrize(
    "engine,arch,version,state",
    [
        ("lmdeploy", "DeepseekV3ForCausalLM", "0.16.0", "final_norm"),
        ("lmdeploy", "Qwen3_5MoeForConditionalGeneration", "0.17.0", "final_norm"),
        ("lmdeploy", "HYV3ForCausalLM", "0.18.0", "final_norm"),
        ("mlx", "Qwen3_5ForConditionalGeneration", "0.7.10", "final_norm"),
        ("mlx", "gemma4", "0.6.15", "final_norm"),
        ("mlx", "Gemma4ForConditionalGeneration", "0.7.10", "final_norm"),
        ("mlx", "inkling", "0.7.10", f"residual:{L}"),
        ("mlx", "nemotron_h", "0.7.9", "final_norm"),
    ],
)
def test_resolve_names_the_state_fed(cli, engine, arch, version, state):
    res, out = ask(cli, "--engine", engine, "--arch", arch, "--version", version)
    assert res.returncode == 0, res.stderr
    assert out["layers"] == [state] and out["problems"] == [] and out["method"] == "mtp"
    assert out["source"].startswith("MTP: ") and version in out["source"]


@pytest.mark.parametrize(
    "engine,arch,version,said",
    [
        ("lmdeploy", "DeepseekV4ForCausalLM", "0.18.0", "get_logits"),
        ("lmdeploy", "NoSuchForCausalLM", "0.16.0", "was not read"),
        ("lmdeploy", "DeepseekV3ForCausalLM", "0.15.0", "not read for MTP"),
        ("mlx", "qwen4_exp", "0.7.10", "hyper-connection streams"),
        ("mlx", "deepseek_v4", "0.7.10", "hyper-connection streams"),
        ("mlx", "nemotron_h", "0.6.15", "was not read"),
        ("mlx", "glm4_moe_lite", "0.7.10", "was not read"),
    ],
)
def test_targets_not_followed_are_refused(cli, engine, arch, version, said):
    res, out = ask(cli, "--engine", engine, "--arch", arch, "--version", version)
    assert res.returncode == 2 and out["layers"] is None
    assert said in out["refused"], out["refused"]


def test_lmdeploy_reads_the_target_config(cli, tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Qwen3_5ForConditionalGeneration"],
                "model_type": "qwen3_5",
                "text_config": {"num_hidden_layers": 40, "mtp_num_hidden_layers": 1},
            }
        )
    )
    for engine, state in (("lmdeploy", "final_norm"), ("mlx", "final_norm")):
        res, out = resolve_json(
            cli, "--engine", engine, "--method", "mtp", "--target-config", tmp_path
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert out["layers"] == [state] and out["num_layers"] == 40


def test_lmdeploy_other_methods_stay_where_they_were(cli):
    """Only --method mtp on lmdeploy is answered here; EAGLE-3 is still a usage error."""
    res = cli("resolve", "--engine", "lmdeploy", "--num-layers", L, "--ids", "1", "2", "3")
    assert res.returncode == 2 and "Traceback" not in res.stderr


@pytest.mark.parametrize(
    "trainer,code,state",
    [("speculators", 0, f"residual:{L}"), ("specforge", 2, None)],
)
def test_trainers_name_the_state_they_train_on(cli, trainer, code, state):
    res, out = ask(cli, "--trainer", trainer, "--arch", "DeepseekV3ForCausalLM")
    assert res.returncode == code, res.stderr
    if state is None:
        assert out["layers"] is None and "no MTP training" in out["refused"]
    else:
        assert out["layers"] == [state] and "models/mtp/core.py" in out["source"]


def contract(tmp_path: Path, state: str, arch: str, engine: str = "mlx", version: str = "0.7.10"):
    c = tmp_path / f"mtp-{engine}-{arch}-{state.replace(':', '')}.yaml"
    c.write_text(
        "contract: x\nversion: 1\nmethod: mtp\n"
        f"target: {{arch: {arch}, num_hidden_layers: {L}, hidden_size: 4096}}\n"
        f"training:\n  slots:\n    - {{layer: '{state}'}}\n"
        f"serving:\n  engine: {engine}\n  version: '{version}'\n"
    )
    return c


def check(cli, path: Path):
    res = cli("check", path, "--checks", "layout", "--json")
    assert "Traceback" not in res.stderr, res.stderr
    return res, json.loads(res.stdout)["findings"]


@pytest.mark.parametrize(
    "state,arch",
    [
        ("final_norm", "Qwen3_5ForConditionalGeneration"),
        ("final_norm", "Gemma4ForConditionalGeneration"),
        (f"residual:{L}", "inkling"),
    ],
)
def test_check_mlx_trained_on_the_state_fed_passes(cli, tmp_path, state, arch):
    res, found = check(cli, contract(tmp_path, state, arch))
    assert res.returncode == 0 and found == [], found


@pytest.mark.parametrize(
    "state,arch,fed",
    [
        # speculators 0.9.0 trains on residual:L; mlx-vlm feeds Qwen3.5's head the final norm
        (f"residual:{L}", "Qwen3_5ForConditionalGeneration", "final_norm"),
        # a head trained on the final norm's output, served by mlx-vlm on Inkling (pre-norm)
        ("final_norm", "inkling", f"residual:{L}"),
    ],
)
def test_check_mlx_trained_on_another_state_is_ec501(cli, tmp_path, state, arch, fed):
    res, found = check(cli, contract(tmp_path, state, arch))
    assert res.returncode == 1 and [f["code"] for f in found] == ["EC501"], found
    assert found[0]["expected"] == state and found[0]["found"] == fed


def test_check_mlx_target_not_followed_is_ec510(cli, tmp_path):
    res, found = check(cli, contract(tmp_path, "final_norm", "qwen4_exp"))
    assert res.returncode == 1 and [f["code"] for f in found] == ["EC510"], found


def test_matrix_lists_mlx(cli, tmp_path):
    res = cli("matrix", contract(tmp_path, "final_norm", "inkling"), "--json")
    assert res.returncode in (0, 1), res.stderr
    rows = {(r["engine"], r["versions"][-1]): r for r in json.loads(res.stdout)["rows"]}
    assert rows[("mlx", "0.7.10")]["feeds"] == [f"residual:{L}"]


def test_table_is_folded_into_spans():
    """Each target's state is kept once per run of releases, not once per release row."""
    from pytest_eagle_contract.engines.mtp import _table, releases, row

    table = _table()
    assert releases("lmdeploy") == ["0.16.0", "0.17.0", "0.18.0"]
    assert releases("mlx")[0] == "0.6.15" and releases("mlx")[-1] == "0.7.10"
    assert table["vllm"]["targets"]["DeepseekV3ForCausalLM"] == [["0.23.0", None, "final_norm"]]
    assert all("targets" not in r for e in ("sglang", "vllm", "lmdeploy", "mlx")
               for r in table[e]["rows"])  # fmt: skip
    assert row("lmdeploy", "0.18.0")["proposers"] == ["deepseek_mtp", "hy3_mtp", "qwen3_5_mtp"]
    trainers = table["trainers"]
    assert [r["state"] for r in trainers["specforge"]["rows"]] == [None]
    assert [r["state"] for r in trainers["megatron-core"]["rows"]] == ["final_norm"]
    assert [r["state"] for r in trainers["speculators"]["rows"]] == ["residual"]
    assert trainers["nvidia-modelopt"]["releases"][-1] == "0.47.0"
