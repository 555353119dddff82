"""EC501's and EC522's every-engine table for DFlash2 / DSpark contracts (issue 38): built from
the method's own rules (``engines/dflash_family.py``, ``method_rules.json``), not DFlash's,
and the fix from those rules; and doctor's draft-checkpoint seam judging a DFlash-family draft.

The expected rows are worked out from the rules as docs/dspark.md and docs/dflash2.md state
them: SGLang and vLLM feed DSpark's ``dspark_target_layer_ids`` t as ``residual:t+1``;
llama.cpp's dense converter does not read that key (refused); DFlash2 runs on every engine's
DFlash path (tap t = ``residual:t+1``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TAPS = [1, 9, 17, 25, 33]
DFLASH2 = {
    "architectures": ["DFlash2DraftModel"],
    "dflash_config": {"target_layer_ids": TAPS, "selector_rank": 64, "selector_top_k": 8},
    "num_hidden_layers": 5,
}
DSPARK = {
    "architectures": ["Qwen3DSparkModel"],
    "model_type": "qwen3",
    "dspark_target_layer_ids": TAPS,
    "dspark_markov_rank": 32,
    "num_hidden_layers": 5,
}


def outputs_of(taps: list[int]) -> list[str]:
    return [f"residual:{t + 1}" for t in taps]


def contract(tmp_path: Path, method: str, data: dict, trained: list[str]) -> Path:
    d = tmp_path / "draft"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(data))
    slots = "".join(f"    - {{layer: {x}}}\n" for x in [*trained, "final_norm"])
    c = tmp_path / "c.yaml"
    c.write_text(
        f"contract: x\nversion: 1\nmethod: {method}\n"
        "target: {arch: Qwen3ForCausalLM, num_hidden_layers: 36, hidden_size: 4096}\n"
        f"training:\n  slots:\n{slots}"
        f"serving:\n  engine: sglang\n  version: '0.5.23'\n  draft_config: {d}\n"
    )
    return c


def one(cli, path: Path, code: str) -> dict:
    res = cli("check", path, "--checks", "layout", "--json")
    assert "Traceback" not in res.stderr, res.stderr
    [f] = [f for f in json.loads(res.stdout)["findings"] if f["code"] == code]
    return f


@pytest.mark.parametrize("method,data", [("dflash2", DFLASH2), ("dspark", DSPARK)])
def test_ec501_carries_the_family_table(cli, tmp_path, method, data):
    deeper = [f"residual:{t + 2}" for t in TAPS]
    f = one(cli, contract(tmp_path, method, data, deeper), "EC501")
    rows = f["extra"]["matrix"]
    engines = {r["engine"] for r in rows}
    assert {"sglang", "vllm", "llama.cpp"} <= engines
    vllm = [r for r in rows if r["engine"] == "vllm" and "0.34.0" in r["versions"]]
    assert vllm and vllm[0]["feeds"] == outputs_of(TAPS)
    assert vllm[0]["fix"] == [t + 1 for t in TAPS]  # the taps that feed the trained layers
    assert "vllm" in f["details"].lower()
    # the fix of the contract's own engine, by the method's rules
    assert str([t + 1 for t in TAPS]) in f["hint"]


def test_dspark_table_refuses_llamacpp_by_dsparks_rules(cli, tmp_path):
    deeper = [f"residual:{t + 2}" for t in TAPS]
    f = one(cli, contract(tmp_path, "dspark", DSPARK, deeper), "EC501")
    llama = [r for r in f["extra"]["matrix"] if r["engine"] == "llama.cpp"]
    assert llama and llama[0]["feeds"] is None and llama[0]["refused"]


def test_dspark_guess_ec522_carries_the_table(cli, tmp_path):
    data = {k: v for k, v in DSPARK.items() if k != "dspark_target_layer_ids"}
    f = one(cli, contract(tmp_path, "dspark", data, outputs_of([2, 10, 18, 26, 34])), "EC522")
    assert f["severity"] == "error"
    assert {r["engine"] for r in f["extra"]["matrix"]} >= {"sglang", "vllm"}


def test_doctor_reads_a_dflash_family_checkpoint(cli, tmp_path):
    """doctor's draft-checkpoint seam runs EC901 on a DFlash-family draft (it was skipped)."""
    import torch
    from safetensors.torch import save_file

    d = tmp_path / "draft"
    d.mkdir()
    cfg = {**DFLASH2, "model_type": "qwen3", "hidden_size": 64, "vocab_size": 512}
    (d / "config.json").write_text(json.dumps(cfg))
    save_file({"fc.weight": torch.zeros(64, 4 * 64)}, str(d / "model.safetensors"))  # 5 taps
    c = tmp_path / "c.yaml"
    c.write_text(
        "contract: x\nversion: 1\nmethod: dflash2\n"
        "target: {arch: Qwen3ForCausalLM, num_hidden_layers: 36, hidden_size: 64}\n"
        f"serving:\n  engine: sglang\n  version: '0.5.23'\n  draft_config: {d}\n"
    )
    res = cli("doctor", "--draft", d, "--contract", c, "--json")
    assert "Traceback" not in res.stderr, res.stderr
    out = json.loads(res.stdout)
    [seam] = [s for s in out["seams"] if s["name"] == "draft-checkpoint"]
    assert seam["status"] == "fail", seam
    assert "EC901" in json.dumps(seam)
    good = tmp_path / "good"
    good.mkdir()
    (good / "config.json").write_text(json.dumps(cfg))
    save_file({"fc.weight": torch.zeros(64, 5 * 64)}, str(good / "model.safetensors"))
    c.write_text(c.read_text().replace(str(d), str(good)))
    out = json.loads(cli("doctor", "--draft", good, "--contract", c, "--json").stdout)
    [seam] = [s for s in out["seams"] if s["name"] == "draft-checkpoint"]
    assert seam["status"] == "pass", seam
