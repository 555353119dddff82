"""``eagle-contract doctor`` on a DFlash draft (issue 38): the draft config names the method,
so every seam reads it by DFlash's rules (docs/dflash.md): a guessed tap list is the
engine-rules seam's EC522, a launch block unlike the draft's block_size the serving-args
seam's EC526, a mask token past the vocabulary the method seam's EC527, a contract's
trained layers the engine does not feed the layout seam's EC501 with its every-engine
table; the draft-checkpoint seam reads a DFlash checkpoint's fc against its taps (EC901:
``[hidden_size, taps x target hidden]``, SGLang 0.5.23 models/dflash.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_eagle_contract.models.tiny import TinySpec, tiny_target

pytestmark = pytest.mark.slow

L, H, V = 8, 32, 128
TAPS = [1, 3, 5]
DRAFT = {
    "architectures": ["DFlashDraftModel"],
    "block_size": 8,
    "dflash_config": {"mask_token_id": 100, "target_layer_ids": TAPS},
    "hidden_size": H,
    "model_type": "qwen3",
    "num_hidden_layers": 3,
    "num_target_layers": L,
    "vocab_size": V,
}
SGLANG = "python -m sglang.launch_server --speculative-algorithm DFLASH"


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("dflash-doctor")
    tiny_target(TinySpec(num_layers=L, hidden_size=H, vocab_size=V)).save_pretrained(root / "t")
    return root / "t"


def draft(root: Path, data: dict) -> Path:
    folder = root / "draft"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(data))
    return folder


def doctor(cli, *args: object) -> tuple[int, dict[str, dict]]:
    res = cli("doctor", *args, "--json")
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, {s["name"]: s for s in json.loads(res.stdout)["seams"]}


def codes(seam: dict) -> list[str]:
    return [f["code"] for f in seam["findings"]]


def test_doctor_reads_a_dflash_draft_by_dflash_rules(cli, tmp_path, target):
    import torch
    from safetensors.torch import save_file

    d = draft(tmp_path, DRAFT)
    save_file({"fc.weight": torch.zeros(H, len(TAPS) * H)}, str(d / "model.safetensors"))
    _, seams = doctor(
        cli, "--draft", d, "--target-model", target, "--engine", "sglang",
        "--version", "0.5.23", "--serving-args", f"{SGLANG} --speculative-num-draft-tokens 8",
    )  # fmt: skip
    assert seams["engine-rules"]["status"] == "pass", seams["engine-rules"]
    assert seams["method"]["status"] == "pass" and seams["serving-args"]["status"] == "pass"
    assert seams["draft-checkpoint"]["status"] == "pass", seams["draft-checkpoint"]
    assert "EC507" not in json.dumps(seams)  # not read as an EAGLE-3 draft without ids


def test_doctor_dflash_failures_land_in_their_seams(cli, tmp_path, target):
    guessed = {k: v for k, v in DRAFT.items() if k != "dflash_config"}
    guessed["mask_token_id"] = V  # one past the vocabulary
    d = draft(tmp_path, guessed)
    rc, seams = doctor(
        cli, "--draft", d, "--target-model", target, "--engine", "sglang",
        "--version", "0.5.23", "--serving-args", f"{SGLANG} --speculative-num-draft-tokens 16",
    )  # fmt: skip
    assert rc == 1
    assert codes(seams["engine-rules"]) == ["EC522"]
    assert codes(seams["method"]) == ["EC527"] and seams["method"]["status"] == "fail"
    assert codes(seams["serving-args"]) == ["EC526"]


def test_doctor_layout_of_a_dflash_contract_has_the_every_engine_table(cli, tmp_path, target):
    shifted = {**DRAFT, "dflash_config": {"mask_token_id": 100, "target_layer_ids": [2, 4, 6]}}
    d = draft(tmp_path, shifted)
    contract = tmp_path / "c.yaml"
    contract.write_text(
        "contract: d\nversion: 1\nmethod: dflash\n"
        f"target: {{arch: LlamaForCausalLM, num_hidden_layers: {L}, hidden_size: {H}, "
        f"vocab_size: {V}}}\n"
        "training:\n  target_slot: null\n  slots:\n"
        + "".join(f"    - {{layer: residual:{t + 1}}}\n" for t in TAPS)
        + 'serving:\n  engine: sglang\n  version: "0.5.23"\n  draft_config: draft\n'
    )
    rc, seams = doctor(cli, "--draft", d, "--contract", contract)
    assert rc == 1 and codes(seams["layout"]) == ["EC501"]
    [f] = seams["layout"]["findings"]
    rows = {(r["title"], r["label"]): r for r in f["extra"]["matrix"]}
    assert ("vLLM", "0.22.0..0.34.0") in rows or any(t == "vLLM" for t, _ in rows)
    assert "dflash_config.target_layer_ids: [1, 3, 5]" in f["hint"]


def test_a_draft_layer_count_past_the_plausibility_bound_is_a_finding_not_a_hang(cli, tmp_path):
    """num_hidden_layers 10**8 with num_target_layers unlike the contract's: SGLang's formula
    was built for both counts (one tap per draft layer, minutes and gigabytes); the draft
    config's layer counts share the target's plausibility bound (docs/security.md)."""
    data = {**DRAFT, "num_hidden_layers": 10**8, "num_target_layers": 12}
    d = draft(tmp_path, {**data, "dflash_config": {"mask_token_id": 100}})
    contract = tmp_path / "c.yaml"
    contract.write_text(
        "contract: d\nversion: 1\nmethod: dflash\n"
        f"target: {{arch: Qwen3ForCausalLM, num_hidden_layers: {L}, hidden_size: {H}, "
        f"vocab_size: {V}}}\ntraining:\n  target_slot: null\n  slots:\n"
        "    - {layer: residual:2}\nserving:\n  engine: sglang\n  draft_config: draft\n"
    )
    res = cli("doctor", "--draft", d, "--contract", contract, "--json", timeout=60)
    assert "Traceback" not in res.stderr, res.stderr
    seams = {s["name"]: s for s in json.loads(res.stdout)["seams"]}
    found = [f["message"] for f in seams["engine-rules"]["findings"]]
    assert any("num_hidden_layers is 100000000, above 1024" in m for m in found), found
