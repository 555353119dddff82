"""MTP on vllm-ascend 0.23.0 / 0.23.0.post1 (issue 38): ``resolve --engine vllm-ascend --method
mtp``, by the rules ``scripts/gen_ascend_rules.py`` reads from the sdists (``ascend_rules.json``'s
``mtp``: the runner hands its own ``AscendEagleProposer`` the target forward's
``hidden_states``; ``routes``: the proposers another test picks) and ``scripts/gen_mtp_rules.py``
from vLLM 0.23.0's wheel (``mtp_rules.json``: the state each target returns, and the draft
``model_type`` ``SpeculativeConfig`` gives each target).

The expected states are the docs' statement of the rules (docs/mtp.md, docs/layers.md), not
copied from the tool's output.
"""

from __future__ import annotations

import pytest
from serving_cases import resolve_json

L = 61


def ask(cli, arch: str, *args: object):
    return resolve_json(
        cli, "--engine", "vllm-ascend", "--method", "mtp", "--num-layers", L, "--arch", arch, *args
    )


@pytest.mark.parametrize("version", ["0.23.0", "0.23.0.post1"])
@pytest.mark.parametrize("arch", ["DeepseekV3ForCausalLM", "Qwen3NextForCausalLM"])
def test_vllm_0_23_targets_feed_the_final_norm(cli, version, arch):
    res, out = ask(cli, arch, "--version", version)
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["final_norm"] and out["engine"] == "vllm-ascend"
    assert out["version"] == version
    assert "AscendEagleProposer" in out["source"] and "vLLM 0.23.0" in out["source"]


@pytest.mark.parametrize(
    ("arch", "said"),
    [
        # vllm-ascend registers its own class over vLLM's (models/__init__.py)
        ("DeepseekV4ForCausalLM", "vllm-ascend's own class"),
        # vLLM 0.23.0 makes the draft step3p5_mtp: AscendStep3p5MTPProposer, not read
        ("Step3p5ForCausalLM", "AscendStep3p5MTPProposer"),
        ("NoSuchForCausalLM", "was not read"),
    ],
)
def test_targets_not_followed_are_refused(cli, arch, said):
    res, out = ask(cli, arch)
    assert res.returncode == 2 and out["layers"] is None
    assert said in out["refused"], out["refused"]


def test_vllm_0_23_itself_is_read_for_mtp(cli):
    res, out = resolve_json(
        cli, "--engine", "vllm", "--method", "mtp", "--num-layers", L, "--arch",
        "DeepseekV3ForCausalLM", "--version", "0.23.0",
    )  # fmt: skip
    assert res.returncode == 0 and out["layers"] == ["final_norm"]


def test_a_release_before_is_still_refused(cli):
    res = cli("resolve", "--engine", "vllm-ascend", "--method", "mtp", "--num-layers", L,
              "--arch", "DeepseekV3ForCausalLM", "--version", "0.13.0")  # fmt: skip
    assert res.returncode == 2 and "MTP not read" in " ".join(res.stderr.split())
