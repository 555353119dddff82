"""MTP on tpu-inference 0.22.1-0.32.0 (issue 38): ``resolve --engine tpu-inference --method
mtp``, by the rules ``scripts/gen_tpu_rules.py`` reads from the wheels (``tpu_rules.json``'s
``mtp``: ``runner/speculative_decoding_manager.py`` feeds the draft ``(hidden_states, )``, the
target step's output; ``mtp_targets``: what each JAX-registry model returns as it).

The expected states are the docs' statement of the rules (docs/layers.md), not copied from the
tool's output: a JAX model whose ``__call__`` ends on ``x = self.norm(x)`` feeds ``final_norm``.
"""

from __future__ import annotations

import pytest
from serving_cases import resolve_json

L = 48


def ask(cli, arch: str, *args: object):
    return resolve_json(
        cli, "--engine", "tpu-inference", "--method", "mtp", "--num-layers", L, "--arch", arch,
        *args,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("arch", "version"),
    [
        ("DeepseekV3ForCausalLM", "0.22.1"),
        ("Gemma4ForConditionalGeneration", "0.22.1"),
        ("Gemma4ForCausalLM", "0.25.0"),
        ("Qwen3ForCausalLM", "0.25.0"),
        ("Qwen3ForCausalLM", "0.32.0"),
    ],
)
def test_jax_targets_feed_the_final_norm(cli, arch, version):
    res, out = ask(cli, arch, "--version", version)
    assert res.returncode == 0, res.stderr
    assert out["layers"] == ["final_norm"] and out["engine"] == "tpu-inference"
    assert "speculative_decoding_manager.py" in out["source"] and version in out["source"]
    assert any("JAX path assumed" in n for n in out["notes"])


@pytest.mark.parametrize(
    ("arch", "version", "said"),
    [
        # its __call__ returns outputs[1] of self.model(...): not followed to the norm
        ("LlamaForCausalLM", "0.32.0", "was not read"),
        # 0.22.1's Qwen3 model is of another shape
        ("Qwen3ForCausalLM", "0.22.1", "was not read"),
        # _VLLM_PREFERRED_ARCHITECTURES: vLLM's forward, release pairing not stated
        ("Qwen3MoeForCausalLM", "0.22.1", "vLLM path"),
        ("MistralForCausalLM", "0.32.0", "not in the JAX registry"),
    ],
)
def test_targets_not_followed_are_refused(cli, arch, version, said):
    res, out = ask(cli, arch, "--version", version)
    assert res.returncode == 2 and out["layers"] is None
    assert said in out["refused"], out["refused"]


def test_releases_without_the_mtp_branch_are_refused(cli):
    res = cli("resolve", "--engine", "tpu-inference", "--method", "mtp", "--num-layers", L,
              "--arch", "DeepseekV3ForCausalLM", "--version", "0.21.0")  # fmt: skip
    assert res.returncode == 2 and "has no MTP branch" in " ".join(res.stderr.split())
