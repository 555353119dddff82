"""A DFlash draft's block size, mask token and tap list against the launch line and the
contract (EC526-EC528), through ``eagle-contract check --checks layout``.

The engines' behaviour each case encodes was read from sglang 0.5.23, vLLM 0.34.0 and
speculators 0.9.0 (docs/dflash.md#block-size-and-mask-token); the expected values here come
from those rules as the docs state them (B drafts B - 1 tokens), not from the tool's output.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_dflash import CONTRACT, TINY_DRAFT, config, outputs_of, slots

LISTED = {**TINY_DRAFT, "dflash_config": {"target_layer_ids": [1, 3, 5]}, "block_size": 8}
TRAINED = slots(outputs_of([1, 3, 5]))


def run(cli, tmp_path: Path, draft: dict, *, engine="sglang", version="0.5.23",
        launch: str | None = None, training: str = TRAINED):  # fmt: skip
    config(tmp_path, draft)
    text = CONTRACT.format(method="dflash", training=training, engine=engine, version=version)
    if launch is not None:
        text += f"  launch: {json.dumps(launch)}\n"
    path = tmp_path / "c.yaml"
    path.write_text(text)
    res = cli("check", path, "--checks", "layout", "--json")
    assert "Traceback" not in res.stderr, res.stderr
    return res, json.loads(res.stdout)["findings"]


def codes(findings) -> list[tuple[str, str]]:
    return [(f["code"], f["severity"]) for f in findings]


SGLANG = "python -m sglang.launch_server --speculative-algorithm DFLASH"
VLLM = (
    "vllm serve t --speculative-config "
    """'{{"method": "dflash", "num_speculative_tokens": {k}}}'"""
)


def test_good_draft_and_launch_pass(cli, tmp_path):
    for engine, version, launch in (
        ("sglang", "0.5.23", SGLANG + " --speculative-num-draft-tokens 8"),
        ("sglang", "0.5.23", SGLANG),  # no block flag: SGLang reads block_size
        ("vllm", "0.34.0", VLLM.format(k=7)),  # B - 1
        ("vllm", "0.34.0", VLLM.format(k=4)),  # fewer is allowed
    ):
        res, found = run(cli, tmp_path, LISTED, engine=engine, version=version, launch=launch)
        assert res.returncode == 0 and found == [], (launch, found)


def test_vllm_asking_block_size_tokens_is_ec523(cli, tmp_path):
    """speculators #456: block_size 8 drafts 7; asking vLLM for 8 is the off-by-one."""
    res, found = run(cli, tmp_path, LISTED, engine="vllm", version="0.34.0",
                     launch=VLLM.format(k=8))  # fmt: skip
    assert res.returncode == 1 and codes(found) == [("EC526", "error")]
    assert found[0]["expected"] == "at most 7" and found[0]["found"] == "8"
    anchored = {**LISTED, "sample_from_anchor": True}  # speculators: the anchor drafts too
    res, found = run(cli, tmp_path, anchored, engine="vllm", version="0.34.0",
                     launch=VLLM.format(k=8))  # fmt: skip
    assert res.returncode == 0 and found == []


@pytest.mark.parametrize(
    ("flags", "severity"),
    [
        ("--speculative-num-draft-tokens 16", "error"),
        ("--speculative-dflash-block-size 16", "error"),
        ("--speculative-num-draft-tokens 4", "warning"),
        ("--speculative-num-draft-tokens 8 --speculative-dflash-block-size 16", "error"),
    ],
)
def test_sglang_block_other_than_trained_is_ec523(cli, tmp_path, flags, severity):
    res, found = run(cli, tmp_path, LISTED, launch=f"{SGLANG} {flags}")
    assert codes(found) == [("EC526", severity)]
    assert res.returncode == (1 if severity == "error" else 0)


@pytest.mark.parametrize(
    "launch",
    [
        VLLM.format(k=0),
        VLLM.format(k=-1),
        'vllm serve t --speculative-config \'{"method": "dflash"}\' --spec-tokens 0',
    ],
)
@pytest.mark.parametrize("block_size", [8, None])
def test_vllm_no_speculative_tokens_is_ec526_refusal(cli, tmp_path, launch, block_size):
    """vLLM 0.24.0-0.34.0 refuse num_speculative_tokens <= 0 at start-up (config/speculative.py:
    Field(gt=0) and _verify_args "Expected num_speculative_tokens to be greater than zero"),
    whatever the draft's block; --spec-tokens N sets the same key (engine/arg_utils.py)."""
    draft = {k: v for k, v in LISTED.items() if k != "block_size" or block_size}
    res, found = run(cli, tmp_path, draft, engine="vllm", version="0.34.0", launch=launch)
    assert res.returncode == 1 and codes(found) == [("EC526", "error")], found
    assert "refuses" in found[0]["message"] and found[0]["expected"] == "at least 1"


def test_sglang_non_positive_block_is_ec526_refusal(cli, tmp_path):
    """SGLang 0.5.11-0.5.23 refuse --speculative-dflash-block-size <= 0 ("DFLASH requires
    --speculative-dflash-block-size to be positive"), not run it with a warning."""
    for value in ("0", "-1"):
        launch = f"{SGLANG} --speculative-dflash-block-size {value}"
        res, found = run(cli, tmp_path, LISTED, launch=launch)
        assert res.returncode == 1 and codes(found) == [("EC526", "error")], found
        assert "refuses" in found[0]["message"] and found[0]["found"] == value


def test_sglang_launch_lint_runs_for_dflash_where_it_applies(cli, tmp_path):
    """The DFlash layout check lints the SGLang launch line as the EAGLE-3 one does (EC512):
    a line no shell could parse is named. The EAGLE family's rule (--speculative-eagle-topk 1
    resets --speculative-num-draft-tokens to steps + 1) is not SGLang's under DFLASH: 0.5.23
    dispatches DFLASH to _handle_dflash (speculative/spec_info.py), which forces steps and
    topk to 1 and takes the draft-token count as the block (arg_groups/speculative_hook.py)."""
    res, found = run(cli, tmp_path, LISTED, launch=SGLANG + " --speculative-num-draft-tokens '8")
    assert res.returncode == 1 and codes(found) == [("EC512", "error")], found
    assert "cannot be parsed" in found[0]["message"]
    topk = " --speculative-eagle-topk 1 --speculative-num-steps 3 --speculative-num-draft-tokens 8"
    res, found = run(cli, tmp_path, LISTED, launch=SGLANG + topk)
    assert res.returncode == 0 and found == [], found


def test_sglang_default_block_without_block_size_is_ec523_warning(cli, tmp_path):
    draft = {k: v for k, v in LISTED.items() if k != "block_size"}
    res, found = run(cli, tmp_path, draft, launch=SGLANG)
    assert res.returncode == 0 and codes(found) == [("EC526", "warning")]
    assert "16" in found[0]["found"]


@pytest.mark.parametrize(
    ("mask", "engine", "expected"),
    [
        (None, "vllm", ("EC527", "error")),  # vLLM refuses a draft without one
        (None, "sglang", ("EC527", "warning")),  # SGLang looks <|MASK|> up in the tokenizer
        (512, "sglang", ("EC527", "error")),  # the contract's vocab_size is 512
        (-1, "sglang", ("EC527", "error")),
    ],
)
def test_mask_token_ec524(cli, tmp_path, mask, engine, expected):
    draft = {k: v for k, v in LISTED.items() if k != "mask_token_id"}
    if mask is not None:
        draft["dflash_config"] = {**draft["dflash_config"], "mask_token_id": mask}
    version = "0.34.0" if engine == "vllm" else "0.5.23"
    res, found = run(cli, tmp_path, draft, engine=engine, version=version)
    assert expected in codes(found), found
    assert res.returncode == (1 if expected[1] == "error" else 0)


def test_mask_token_in_dflash_config_passes(cli, tmp_path):
    draft = {k: v for k, v in LISTED.items() if k != "mask_token_id"}
    draft["dflash_config"] = {**draft["dflash_config"], "mask_token_id": 511}
    res, found = run(cli, tmp_path, draft, engine="vllm", version="0.34.0")
    assert res.returncode == 0 and found == []


def test_duplicate_taps_are_ec525(cli, tmp_path):
    """ModelOpt's formula on a shallow target repeats a layer ([1, 1, 1, 1])."""
    draft = {**LISTED, "dflash_config": {"target_layer_ids": [1, 1, 1, 1]}}
    res, found = run(cli, tmp_path, draft, training=slots(outputs_of([1, 1, 1, 1])))
    assert res.returncode == 1 and ("EC528", "error") in codes(found)
    [f] = [f for f in found if f["code"] == "EC528"]
    assert f["expected"] == "distinct taps" and f["found"] == "[1, 1, 1, 1]"


def test_negative_taps_are_ec525_and_say_where_they_wrap(cli, tmp_path):
    draft = {**LISTED, "dflash_config": {"target_layer_ids": [1, 3, -2]}}
    res, found = run(cli, tmp_path, draft)
    assert res.returncode == 1 and ("EC528", "error") in codes(found)
    [f] = [f for f in found if f["code"] == "EC528"]
    # hidden_states[-2 + 1] = hidden_states[-1]: HF's last entry, the final-norm state
    assert "-2 -> final_norm" in f["message"] and f["found"] == "[-2]"


def test_other_target_depth_is_ec525(cli, tmp_path):
    """No tap list, num_target_layers 12 on an 8-layer target: the trainer's spread and
    SGLang's differ; with a tap list the depth alone is a warning."""
    guessed = {k: v for k, v in TINY_DRAFT.items()} | {"num_target_layers": 12, "block_size": 8}
    res, found = run(cli, tmp_path, guessed, training="")
    trained = [round(1 + i * (12 - 4) / 2) for i in range(3)]  # [1, 5, 9]
    assert ("EC528", "error") in codes(found)
    [f] = [f for f in found if f["code"] == "EC528"]
    assert str(trained) in f["message"] and f["found"] == "num_target_layers 12"
    res, found = run(cli, tmp_path, {**LISTED, "num_target_layers": 12})
    assert res.returncode == 0 and codes(found) == [("EC528", "warning")]
