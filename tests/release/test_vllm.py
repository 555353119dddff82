"""vLLM by release: which draft config keys a release reads, what its layer loop captures,
and what it refuses, through ``eagle-contract resolve --engine vllm --draft-config``; the
layout check with a vLLM version; and a pinned snapshot of the rules derived from the
releases' code (``engines/vllm_rules.json``, checked against the wheels by
tests/release/test_vllm_releases.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serving_cases import tiny_contract

from pytest_eagle_contract.checks.layout import check_layout
from pytest_eagle_contract.contract.model import load_contract
from pytest_eagle_contract.engines import vllm_rules

TOP = "eagle_aux_hidden_state_layer_ids"


def _draft(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"], **config}))
    return path


def _resolve(cli, tmp_path, version, config, *extra):
    args = ["resolve", "--engine", "vllm", "--version", version, "--num-layers", "61"]
    res = cli(*args, "--draft-config", _draft(tmp_path, config), "--json", *extra)
    return res, json.loads(res.stdout)


def _layers(*indices):
    return [f"residual:{i}" if i else "embed" for i in indices]


@pytest.mark.parametrize("version", ["0.8.5", "0.9.2", "0.10.1", "0.11.0"])
def test_early_releases_read_no_ids_and_that_is_ec508(cli, tmp_path, version):
    res, out = _resolve(cli, tmp_path, version, {TOP: [1, 29, 57]})
    assert res.returncode == 1, res.stderr
    assert out["layers"] == _layers(2, 30, 58)
    assert [p["code"] for p in out["problems"]] == ["EC508"]
    assert "does not read eagle_aux_hidden_state_layer_ids" in out["problems"][0]["message"]


@pytest.mark.parametrize("version", ["0.11.1", "0.14.0", "0.17.1", "0.21.0", "0.33.0"])
def test_the_top_level_key_is_read_from_0_11_1(cli, tmp_path, version):
    res, out = _resolve(cli, tmp_path, version, {TOP: [1, 29, 57]})
    assert res.returncode == 0, res.stderr
    assert out["layers"] == _layers(1, 29, 57) and out["problems"] == []


@pytest.mark.parametrize(("version", "read"), [("0.11.1", False), ("NESTED", True)])
def test_the_nested_key_is_read_only_from_its_release(cli, tmp_path, version, read):
    version = NESTED_SINCE if version == "NESTED" else version
    res, out = _resolve(cli, tmp_path, version, {"eagle_config": {TOP: [1, 29, 57]}})
    assert out["layers"] == (_layers(1, 29, 57) if read else _layers(2, 30, 58))
    assert res.returncode == (0 if read else 1)


def test_top_level_wins_over_nested(cli, tmp_path):
    config = {TOP: [1, 29, 57], "eagle_config": {TOP: [3, 31, 59]}}
    res, out = _resolve(cli, tmp_path, "0.33.0", config)
    assert res.returncode == 0 and out["layers"] == _layers(1, 29, 57)
    assert any("reads eagle_aux_hidden_state_layer_ids" in n for n in out["notes"])


@pytest.mark.parametrize(("version", "served"), [("0.17.1", False), ("0.18.0", True)])
def test_id_zero_is_the_embedding_only_where_the_loop_handles_a_none_residual(
    cli, tmp_path, version, served
):
    res, out = _resolve(cli, tmp_path, version, {TOP: [0, 3, 31]})
    if served:
        assert res.returncode == 0 and out["layers"] == ["embed", "residual:3", "residual:31"]
    else:
        assert res.returncode == 2 and out["layers"] is None
        assert "residual is None" in out["refused"]


@pytest.mark.parametrize(("version", "served"), [("0.17.1", False), ("0.18.0", True)])
def test_id_l_is_the_last_layers_output_only_where_the_loop_reaches_it(
    cli, tmp_path, version, served
):
    res, out = _resolve(cli, tmp_path, version, {TOP: [2, 30, 61]})
    if served:
        assert res.returncode == 0 and out["layers"] == _layers(2, 30, 61)
    else:
        assert res.returncode == 2 and out["layers"] is None
        assert "[61] lie outside [0, 60]" in out["refused"]


@pytest.mark.parametrize(
    ("arch", "version", "served"),
    [
        ("DeepseekV3ForCausalLM", "0.24.0", False),
        ("DeepseekV3ForCausalLM", "0.25.0", True),
        ("DeepseekV3ForCausalLM", "0.26.0", True),
        ("DeepseekV3ForCausalLM", "0.33.0", True),
        ("KimiK25ForConditionalGeneration", "0.24.0", False),
        ("KimiK25ForConditionalGeneration", "0.34.0", True),
    ],
)
def test_deepseek_captures_id_l_after_its_loop_from_0_25(cli, arch, version, served):
    """deepseek_v2.py's DeepseekV2Model.forward appends hidden_states + residual after the
    layer loop when self.end_layer is among the aux layers (0.25.0 on): id L = residual:L,
    the last layer's output before the final norm. The generator read only the loop."""
    res = cli("resolve", "--engine", "vllm", "--version", version, "--arch", arch,
              "--num-layers", "32", "--ids", "1", "15", "32", "--json")  # fmt: skip
    out = json.loads(res.stdout)
    if served:
        assert res.returncode == 0, out
        assert out["layers"] == ["residual:1", "residual:15", "residual:32"]
        assert "ids up to L" in out["source"] and "deepseek_v2.py" in out["source"]
    else:
        assert res.returncode == 2 and "[32] lie outside [0, 31]" in out["refused"]


def test_unsorted_ids_feed_in_layer_order_and_duplicates_are_refused(cli, tmp_path):
    _, out = _resolve(cli, tmp_path, "0.14.0", {TOP: [57, 1, 29]})
    assert out["layers"] == _layers(1, 29, 57)
    assert any("not ascending" in n for n in out["notes"])
    res, out = _resolve(cli, tmp_path, "0.14.0", {TOP: [1, 1, 29]})
    assert res.returncode == 2 and "2 distinct aux states captured" in out["refused"]


def test_runner_v2_exists_only_where_it_feeds_aux_states(cli, tmp_path):
    res, out = _resolve(cli, tmp_path, "0.14.0", {TOP: [1, 29, 57]}, "--runner", "v2")
    assert res.returncode == 2 and "v2 runner feeds no EAGLE-3" in out["refused"]
    res, out = _resolve(cli, tmp_path, "0.17.0", {TOP: [1, 29, 57]}, "--runner", "v2")
    assert res.returncode == 0 and out["layers"] == _layers(1, 29, 57)


def test_a_draft_with_more_states_needs_the_fc_to_say_so(cli, tmp_path):
    ids = {TOP: [1, 20, 40, 57]}
    res, out = _resolve(cli, tmp_path, "0.33.0", ids)
    assert res.returncode == 2 and "the draft fc is built for 3" in out["refused"]
    res, out = _resolve(cli, tmp_path, "0.33.0", {**ids, "num_aux_hidden_states": 4})
    assert res.returncode == 0 and out["layers"] == _layers(1, 20, 40, 57)


def test_ids_given_directly_are_not_used_where_no_key_is_read(cli):
    args = ["resolve", "--engine", "vllm", "--num-layers", "61", "--ids", "1", "29", "57"]
    res = cli(*args, "--version", "0.10.1", "--json")
    out = json.loads(res.stdout)
    assert res.returncode == 1 and out["layers"] == _layers(2, 30, 58)
    assert "reads no ids from the draft config" in out["problems"][0]["message"]


@pytest.mark.parametrize(
    ("arch", "version", "layers", "says"),
    [
        ("Qwen3MoeForCausalLM", "0.11.1", ["embed", "residual:3", "residual:31"], None),
        ("qwen3", "0.11.1", None, "residual is None"),
        ("DeepseekV3ForCausalLM", "0.19.1", None, "residual is None"),
        ("DeepseekV3ForCausalLM", "0.17.1", None, "served in >=0.18.0"),
        ("KimiK25ForConditionalGeneration", "0.33.0", None, "residual is None"),
        ("Mistral3ForConditionalGeneration", "0.33.0", None, "text_config.architectures"),
    ],
)
def test_each_architectures_loop_decides_id_zero(cli, tmp_path, arch, version, layers, says):
    res, out = _resolve(cli, tmp_path, version, {TOP: [0, 3, 31]}, "--arch", arch)
    assert out["layers"] == layers
    assert res.returncode == (0 if layers else 2)
    assert says is None or says in out["refused"]


@pytest.mark.parametrize(
    ("version", "says"),
    [("0.8.4", "has no EAGLE-3 (first in 0.8.5)"), ("9.0.0", "newer than the built-in")],
)
def test_releases_outside_the_rules_are_refused(cli, tmp_path, version, says):
    res, out = _resolve(cli, tmp_path, version, {TOP: [1, 29, 57]})
    assert res.returncode == 2 and says in out["refused"]


def test_bad_runner_version_and_arch_are_usage_errors_or_refusals(cli, tmp_path, monkeypatch):
    path = _draft(tmp_path, {TOP: [1, 2, 3]})
    base = ["resolve", "--engine", "vllm", "--num-layers", "61", "--draft-config", path]
    res = cli(*base, "--version", "not-a-version")
    assert res.returncode == 2 and "not a vLLM version" in res.stderr
    res = cli(*base, "--runner", "v3")
    assert res.returncode == 2 and "invalid choice" in res.stderr
    res = cli(*base, "--engine", "sglang", "--runner", "v1", "--arch", "llama")
    assert res.returncode == 2 and "--runner is for --engine vllm" in res.stderr
    res = cli(*base, "--arch", "NotAModelForCausalLM", "--json")
    assert (
        res.returncode == 2
        and "no EAGLE-3 capture in any vLLM" in json.loads(res.stdout)["refused"]
    )
    res = cli(*base, "--ids", "1", "2", "3")
    assert res.returncode == 2 and "not both" in res.stderr
    (tmp_path / "bad.json").write_text("[1, 2")
    res = cli(*base[:-1], tmp_path / "bad.json")
    assert res.returncode == 2 and "cannot read draft config" in res.stderr
    assert all("Traceback" not in r.stderr for r in [res])
    (tmp_path / "endless.json").symlink_to("/dev/zero")  # a device: never read
    res = cli(*base[:-1], tmp_path / "endless.json")
    assert res.returncode == 2 and "not a regular file" in res.stderr
    (tmp_path / "big.json").write_text("[" + "1, " * 2000 + "1]")  # read no further than the cap
    monkeypatch.setenv("EAGLE_TARGET_JSON_MAX_BYTES", "4096")
    res = cli(*base[:-1], tmp_path / "big.json")
    assert res.returncode == 2 and "larger than 4096 bytes" in res.stderr


CONTRACT = (
    tiny_contract(
        "tiny-vllm", ["residual:1", "residual:4", "residual:6", "final_norm"], "vllm", "VERSION"
    )
    + "  draft_config: config.json\n"
)


@pytest.mark.parametrize(
    ("version", "config", "codes"),
    [
        ("0.11.1", {TOP: [1, 4, 6]}, set()),
        ("0.10.1", {TOP: [1, 4, 6]}, {"EC508", "EC501"}),
        (">=0.10.1,<0.11.2", {TOP: [1, 4, 6]}, {"EC508", "EC501"}),
        ("0.11.1", {"eagle_config": {TOP: [1, 4, 6]}}, {"EC508", "EC501"}),
    ],
)
def test_layout_check_with_a_vllm_version(tmp_path, version, config, codes):
    _draft(tmp_path, config)
    path = tmp_path / "c.yaml"
    path.write_text(CONTRACT.replace("VERSION", version))
    found = check_layout(load_contract(path))
    assert {f.code for f in found if f.severity == "error"} == codes, [str(f) for f in found]
    if version.startswith(">="):  # releases that resolve alike are one span
        assert all("vllm 0.10.1..0.11.0" in f.message for f in found)


# the releases these tests pin (tests/release/test_vllm_releases.py checks the file against the
# wheels)
NESTED_SINCE = "0.22.0"


def test_pinned_snapshot_of_the_rules_from_the_releases():
    assert vllm_rules.releases()[0] == "0.8.5" and vllm_rules.releases()[-1] == "0.34.0"
    assert len(vllm_rules.releases()) == 46
    reads = {v: vllm_rules.release(v).runners for v in ("0.11.0", "0.11.1", NESTED_SINCE)}
    assert reads["0.11.0"] == {"v1": ()}
    assert reads["0.11.1"] == {"v1": ((TOP, 0),)}
    assert reads[NESTED_SINCE]["v1"][:2] == ((TOP, 0), (f"eagle_config.{TOP}", 0))
    choice = {v: vllm_rules.release(v).choice for v in vllm_rules.releases()}
    assert [choice[v].how for v in ("0.11.1", "0.17.0", "0.22.0", "0.29.0", "0.34.0")] == [
        "only", "env", "auto", "auto", "only"
    ]  # fmt: skip
    # VLLM_USE_V2_MODEL_RUNNER unset: V1 by default up to 0.24, V2 from 0.25 (MoE and hybrid
    # targets V1 until 0.29), V2 only from 0.34
    assert [choice[v].default for v in ("0.24.0", "0.25.0", "0.33.0", "0.34.0")] == [
        "v1", "v2", "v2", "v2"
    ]  # fmt: skip
    assert choice["0.28.0"].others["DeepseekV3ForCausalLM"] == "v1:moe"
    assert not choice["0.29.0"].others
    assert "parallel drafting for EAGLE speculative decoding" in choice["0.33.0"].fallbacks
    kimi = vllm_rules.capture("KimiK25ForConditionalGeneration", "0.33.0")
    assert kimi is not None and kimi.via == "DeepseekV2ForCausalLM" and kimi.id0 == "crash"
    assert {vllm_rules.release(v).default_ids for v in vllm_rules.releases()} == {"2,L//2,L-3"}
    deepseek = [vllm_rules.capture("DeepseekV3ForCausalLM", v) for v in ("0.24.0", "0.25.0")]
    assert [(c.plus, c.id0, c.last) for c in deepseek if c] == [(0, "crash", 0), (0, "crash", 1)]
    llama = [vllm_rules.capture("LlamaForCausalLM", v) for v in ("0.17.1", "0.18.0")]
    assert [(c.plus, c.id0, c.last) for c in llama if c] == [(0, "crash", 0), (0, "embed", 1)]


def _assumed(out):
    return out["assumed"]["runner"]["value"], out["assumed"]["runner"]["why"]


@pytest.mark.parametrize(
    ("version", "arch", "runner", "says"),
    [
        ("0.33.0", "LlamaForCausalLM", "v2", "VLLM_USE_V2_MODEL_RUNNER unset"),
        ("0.29.0", "DeepseekV3ForCausalLM", "v2", "none of use_v2_model_runner's exceptions"),
        ("0.27.0", "LlamaForCausalLM", "v2", "VLLM_USE_V2_MODEL_RUNNER unset"),
        ("0.27.0", "DeepseekV3ForCausalLM", "v1", "taken as MoE"),
        ("0.27.0", "Qwen3_5ForConditionalGeneration", "v1", "hybrid (IsHybrid)"),
        ("0.34.0", "LlamaForCausalLM", "v2", "the V1 runner is removed"),
        ("0.17.0", "LlamaForCausalLM", "v1", "VLLM_USE_V2_MODEL_RUNNER defaults to 0"),
        ("0.11.1", "LlamaForCausalLM", "v1", "only V1 sets aux layers"),
    ],
)
def test_auto_takes_the_runner_the_release_starts_and_says_why(
    cli, tmp_path, version, arch, runner, says
):
    res, out = _resolve(cli, tmp_path, version, {TOP: [1, 29, 57]}, "--arch", arch)
    assert res.returncode in (0, 1), out
    assert _assumed(out)[0] == runner and says in _assumed(out)[1], _assumed(out)
    text = cli("resolve", "--engine", "vllm", "--version", version, "--arch", arch,
               "--num-layers", "61", "--ids", "1", "29", "57")  # fmt: skip
    assert f"assumed: runner {runner}: " in text.stdout


def test_a_nested_key_only_v1_reads_is_ignored_by_the_v2_runner_newer_releases_start(cli, tmp_path):
    """0.29.0 on start the V2 runner for a default EAGLE-3 launch; it never reads
    eagle_config.eagle_aux_hidden_state_layer_ids, so the draft's layers are silently
    replaced by the default (EC508); the V1 runner would have read them."""
    nested = {"eagle_config": {TOP: [1, 29, 57]}}
    res, out = _resolve(cli, tmp_path, "0.33.0", nested)
    assert res.returncode == 1 and _assumed(out)[0] == "v2"
    assert out["layers"] == _layers(2, 30, 58)
    assert [p["code"] for p in out["problems"]] == ["EC508"]
    assert any("v1 runner would read eagle_config" in n for n in out["notes"])
    res, out = _resolve(cli, tmp_path, "0.33.0", nested, "--runner", "v1")
    assert res.returncode == 0 and out["layers"] == _layers(1, 29, 57)
    assert _assumed(out) == ("v1", "given (--runner)")
    # where V1 is what starts (a MoE target on 0.27), the nested key is read
    res, out = _resolve(cli, tmp_path, "0.27.0", nested, "--arch", "DeepseekV3ForCausalLM")
    assert res.returncode == 0 and out["layers"] == _layers(1, 29, 57)


def test_the_v1_runner_is_refused_where_it_is_removed(cli, tmp_path):
    res, out = _resolve(cli, tmp_path, "0.34.0", {TOP: [1, 29, 57]}, "--runner", "v1")
    assert res.returncode == 2 and "v1 removed" in out["refused"]


def test_kimi_k25_is_served_through_its_language_model(cli, tmp_path):
    """KimiK25ForConditionalGeneration builds DeepseekV2ForCausalLM as its language model and
    passes the ids to it: that loop's rule (id 0 fails: residual None)."""
    args = ("--arch", "KimiK25ForConditionalGeneration")
    res, out = _resolve(cli, tmp_path, "0.33.0", {TOP: [2, 30, 58]}, *args)
    assert res.returncode == 0 and out["layers"] == _layers(2, 30, 58)
    assert any("language model DeepseekV2ForCausalLM" in n for n in out["notes"])
    assert "deepseek_v2.py" in out["source"]
    res = cli("resolve", "--engine", "vllm", "--version", ">=0.18.0", *args, "--num-layers",
              "61", "--want", "residual:2", "residual:30", "residual:58", "--json")  # fmt: skip
    assert res.returncode == 0, res.stdout
    assert json.loads(res.stdout)["ids"] == [2, 30, 58]
