"""``resolve --method dflash`` and DFlash contracts on tpu-inference and vllm-ascend (issue
38), by the rules gen_tpu_rules.py / gen_ascend_rules.py read from their releases:
tpu-inference 0.25.0 on (JAX Llama / Qwen3 targets: ``dflash_config.target_layer_ids`` alone,
else ``range(L - n, L)``, layer i's output for id i), vllm-ascend 0.23.0 on (its own proposer,
vLLM 0.23.0's V1 rules for the taps); a guessed tap list is EC522, a contract trained one layer
off is EC501, and what is not served or not read is refused with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

L = 36
TAPS = [1, 9, 17, 25, 33]
FED = [f"residual:{t + 1}" for t in TAPS]


def resolve(cli, *args: object) -> tuple[int, dict]:
    res = cli("resolve", "--method", "dflash", "--num-layers", L, *args, "--json")
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, json.loads(res.stdout)


def draft(root: Path, data: dict) -> Path:
    folder = root / "draft"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(data))
    return folder


def test_tpu_inference_feeds_layer_t_s_output_for_tap_t(cli):
    ids = [str(t) for t in TAPS]
    rc, out = resolve(cli, "--engine", "tpu-inference", "--arch", "Qwen3ForCausalLM", "--ids", *ids)
    assert rc == 0, out
    assert out["layers"] == FED and out["problems"] == []
    assert out["version"] == "0.32.0"
    assert "models/jax/qwen3.py" in out["source"]
    assert "get_dflash_aux_hidden_state_layers" in out["source"]


def test_vllm_ascend_says_it_runs_the_paired_vllm_release_s_rules(cli):
    ids = [str(t) for t in TAPS]
    rc, out = resolve(cli, "--engine", "vllm-ascend", "--version", "0.23.0", "--ids", *ids)
    assert rc == 0, out
    assert out["layers"] == FED and out["problems"] == []
    assert "runs vLLM 0.23.0's DFlash rules (V1 runner)" in out["source"]
    assert "AscendDflashProposer" in out["source"]
    assert out["assumed"]["vllm"]["value"] == "0.23.0"
    rc, vllm = resolve(
        cli, "--engine", "vllm", "--version", "0.23.0", "--runner", "v1", "--ids", *ids
    )
    assert rc == 0 and vllm["layers"] == out["layers"]


def test_a_missing_tap_list_is_tpu_inference_s_guess_ec522(cli, tmp_path):
    d = draft(
        tmp_path,
        {
            "architectures": ["DFlashDraftModel"],
            "num_hidden_layers": 5,
            "num_target_layers": 5,
            "dflash_config": {"mask_token_id": 1},
        },
    )
    rc, out = resolve(cli, "--engine", "tpu-inference", "--draft-config", d)
    assert rc == 1
    assert [p["code"] for p in out["problems"]] == ["EC522"]
    assert out["layers"] == [f"residual:{i}" for i in range(L - 4, L + 1)]
    assert "range(L - n, L)" in out["problems"][0]["message"]


def test_tpu_inference_refuses_what_it_would_not_serve(cli):
    rc, out = resolve(cli, "--engine", "tpu-inference", "--version", "0.24.0", "--ids", "1", "9")
    assert rc == 2 and "builds no DFlashProposer" in out["refused"]
    rc, out = resolve(cli, "--engine", "tpu-inference", "--arch", "GptOssForCausalLM", "--ids", "1")
    assert rc == 2 and "must match target model" in out["refused"]
    rc, out = resolve(cli, "--engine", "tpu-inference", "--arch", "Qwen2ForCausalLM", "--ids", "1")
    assert rc == 2 and "no get_dflash_aux_hidden_state_layers" in out["refused"]
    rc, out = resolve(cli, "--engine", "tpu-inference", "--ids", "1", "40")
    assert rc == 2 and "ids [40] lie outside [0, 36)" in out["refused"]
    rc, out = resolve(cli, "--engine", "tpu-inference", "--draft-model-impl", "vllm", "--ids", "1")
    assert rc == 2 and "must match target model" in out["refused"]


def test_vllm_ascend_before_0_23_has_no_dflash_proposer(cli):
    rc, out = resolve(cli, "--engine", "vllm-ascend", "--version", "0.18.0", "--ids", "1", "9")
    assert rc == 2 and "builds no DFlash proposer" in out["refused"]


@pytest.mark.parametrize("engine", ["tpu-inference", "vllm-ascend"])
@pytest.mark.parametrize(
    ("method", "why"), [("dflash2", "no DFlash2 code"), ("dspark", "no DSpark code")]
)
def test_dflash2_and_dspark_are_refused_with_the_reason(cli, engine, method, why):
    res = cli("resolve", "--engine", engine, "--method", method, "--num-layers", L, "--ids", "1")
    assert res.returncode == 2 and why in " ".join(res.stderr.split())


@pytest.mark.parametrize(
    ("engine", "why"),
    [
        # 0.22.1 on is read (tests/release/test_tpu_mtp.py); 0.21.0 has no MTP branch
        ("tpu-inference", "tpu-inference 0.21.0: MTP not read: runner/speculative_decoding"),
        # vllm-ascend 0.23.0 is read (tests/release/test_ascend_mtp.py); 0.18.0's path is not
        ("vllm-ascend", "vllm-ascend 0.18.0: MTP not read: its AscendEagleProposer path"),
    ],
)
def test_mtp_is_refused_with_what_was_read(cli, engine, why):
    version = ["--version", "0.18.0" if engine == "vllm-ascend" else "0.21.0"]
    res = cli("resolve", "--engine", engine, "--method", "mtp", "--num-layers", L, *version)
    assert res.returncode == 2 and why in " ".join(res.stderr.split())


@pytest.mark.parametrize("engine", ["tpu-inference", "vllm-ascend"])
@pytest.mark.parametrize(("trained", "rc"), [([2, 4, 6], 0), ([1, 3, 5], 1)])
def test_a_contract_trained_one_layer_off_is_ec501(cli, tmp_path, engine, trained, rc):
    draft(
        tmp_path,
        {
            "architectures": ["DFlashDraftModel"],
            "block_size": 8,
            "dflash_config": {"mask_token_id": 100, "target_layer_ids": [1, 3, 5]},
            "hidden_size": 32,
            "model_type": "qwen3",
            "num_hidden_layers": 3,
            "num_target_layers": 8,
            "vocab_size": 128,
        },
    )
    contract = tmp_path / "c.yaml"
    contract.write_text(
        "contract: d\nversion: 1\nmethod: dflash\n"
        "target: {arch: Qwen3ForCausalLM, num_hidden_layers: 8, hidden_size: 32, "
        "vocab_size: 128}\ntraining:\n  target_slot: null\n  slots:\n"
        + "".join(f"    - {{layer: residual:{k}}}\n" for k in trained)
        + f"serving:\n  engine: {engine}\n  draft_config: draft\n"
    )
    res = cli("doctor", "--draft", tmp_path / "draft", "--contract", contract, "--json")
    assert "Traceback" not in res.stderr, res.stderr
    seams = {s["name"]: s for s in json.loads(res.stdout)["seams"]}
    found = [f["code"] for f in seams["layout"]["findings"]]
    assert found == ([] if rc == 0 else ["EC501"]), seams["layout"]
    if rc:
        assert (
            f"{engine} feeds the DFlash draft residual:2, residual:4, residual:6"
            in (seams["layout"]["findings"][0]["message"])
        )


def test_tpu_inference_reads_the_top_level_num_target_layers_only(cli, tmp_path):
    """models/jax/llama3.py: ``getattr(draft_hf_config, "num_target_layers", L)``: a copy
    under dflash_config is not read, so the fallback captures all L layers while the draft's
    fc (num_hidden_layers) takes 5."""
    d = draft(
        tmp_path,
        {
            "architectures": ["DFlashDraftModel"],
            "num_hidden_layers": 5,
            "dflash_config": {"mask_token_id": 1, "num_target_layers": 5},
        },
    )
    rc, out = resolve(cli, "--engine", "tpu-inference", "--draft-config", d)
    assert rc == 2
    assert "36 distinct states captured" in out["refused"]
    assert "dflash_config.num_target_layers 5 is not read" in out["refused"]


@pytest.mark.parametrize("n", [L + 4, 10**12])
def test_tpu_inference_fallback_past_the_target_is_a_refusal_whatever_its_size(cli, tmp_path, n):
    """``range(L - n, L)`` with the draft's top-level num_target_layers n above L holds ids
    below 0 (no layer): a refusal naming them, never a list of n ids built (10**12 ran out of
    memory in a traceback). The top-level value is tpu-inference's alone: the dflash_config
    copy (read first by the draft parser, within its bound) is not what it reads."""
    d = draft(
        tmp_path,
        {
            "architectures": ["DFlashDraftModel"],
            "num_hidden_layers": 3,
            "num_target_layers": n,
            "dflash_config": {"num_target_layers": 3},
        },
    )
    res = cli(
        "resolve", "--method", "dflash", "--engine", "tpu-inference", "--arch",
        "LlamaForCausalLM", "--num-layers", L, "--draft-config", d, "--json", timeout=60,
    )  # fmt: skip
    assert "Traceback" not in res.stderr, res.stderr
    out = json.loads(res.stdout)
    assert res.returncode == 2, out
    low = f"[{L - n}, ..., -1]" if n > L + 16 else str(list(range(L - n, 0)))
    assert f"ids {low} lie outside [0, {L})" in out["refused"]
    assert f"the draft's fc (models/jax/dflash.py) takes {n}" in out["refused"]


def test_tpu_inference_fallback_over_a_huge_target_is_a_usage_error(cli, tmp_path):
    """No tap list and no num_target_layers: the fallback captures all L layers; an L no
    model has is exit 2 with what to give, not a hang building range(0, L) (resolve's
    --num-layers bound, 1024, answers first)."""
    d = draft(tmp_path, {"architectures": ["DFlashDraftModel"], "num_hidden_layers": 3})
    res = cli(
        "resolve", "--method", "dflash", "--engine", "tpu-inference", "--arch",
        "LlamaForCausalLM", "--num-layers", 10**11, "--draft-config", d, timeout=60,
    )  # fmt: skip
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 2
    said = " ".join(res.stderr.split())
    assert "--num-layers is 100000000000, above 1024: this tool's limit" in said
