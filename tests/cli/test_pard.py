"""A PARD draft (docs/pard.md) through ``doctor`` and ``infer``.

In every release read here a PARD draft reads no hidden state of the target: vLLM 0.16.0,
0.19.0 and 0.23.0-0.33.0 serve it as ``method: draft_model`` with ``parallel_drafting: true``
(``v1/spec_decode/draft_model.py`` builds the proposer with ``pass_hidden_states_to_model=
False``), its mask token the draft config.json's ``pard_token`` (``v1/spec_decode/eagle.py``
in 0.16.0, ``llm_base_proposer.py`` from 0.23.0). So there are no taps to check: the draft
config's ``pard_token`` names the method, and the tap seams say so instead of reading the
draft by EAGLE-3's rules (which warned EC507, "the engine uses its default ids", for a draft
that reads no ids at all).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_eagle_contract.models.tiny import TinySpec, tiny_target

pytestmark = pytest.mark.slow

L, H, V = 8, 32, 128
# The shape vLLM reads: a plain causal LM plus pard_token (the mask token of its K - 1
# parallel slots), as AMD's PARD drafts ship it.
PARD = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": H,
    "num_hidden_layers": 2,
    "vocab_size": V,
    "pard_token": V - 1,
}
# vLLM 0.33.0's launch for it: config/speculative.py's slot table names the row "PARD,
# draft_model, parallel: yes".
VLLM = (
    "vllm serve t --speculative-config "
    '\'{"model": "draft", "method": "draft_model", "parallel_drafting": true, '
    '"num_speculative_tokens": 8}\''
)


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pard")
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


def test_doctor_skips_the_tap_seams_of_a_pard_draft(cli, tmp_path, target):
    d = draft(tmp_path, PARD)
    rc, seams = doctor(
        cli, "--draft", d, "--target-model", target, "--engine", "vllm", "--version", "0.33.0",
        "--serving-args", VLLM,
    )  # fmt: skip
    assert rc == 0
    for name in ("layout", "engine-rules"):
        assert seams[name]["status"] == "skipped", seams[name]
        assert "PARD: no taps: the draft reads no target hidden state" in seams[name]["reason"]
    assert "EC507" not in json.dumps(seams)
    assert seams["method"]["status"] == "pass"


def test_a_plain_draft_without_pard_token_is_still_read_as_eagle3(cli, tmp_path, target):
    """The good case's other side: without ``pard_token`` nothing names PARD, so the draft
    is read by EAGLE-3's rules as before (no ids: the engine's default, EC507)."""
    plain = {k: v for k, v in PARD.items() if k != "pard_token"}
    d = draft(tmp_path, plain)
    _, seams = doctor(
        cli, "--draft", d, "--target-model", target, "--engine", "vllm", "--version", "0.33.0"
    )  # fmt: skip
    assert [f["code"] for f in seams["engine-rules"]["findings"]] == ["EC507"]


def test_infer_names_a_pard_draft_and_writes_no_serving_section(cli, tmp_path):
    import torch
    import yaml

    from pytest_eagle_contract.shards.writing import save, shard_dict, shard_name

    root = tmp_path / "shards"
    g = torch.Generator().manual_seed(0)
    for i in range(3):
        ids = torch.randint(0, 64, (24,), generator=g)
        slots = [(torch.randn(24, 16, generator=g) * (k + 1)).bfloat16() for k in range(3)]
        save(
            root / shard_name("specforge", i),
            shard_dict("specforge", ids, torch.ones(24, dtype=torch.long), slots),
        )
    contract = tmp_path / "c.yaml"
    res = cli(
        "infer", root, "--layers", "residual:2", "residual:5", "final_norm", "--num-layers", 8,
        "--vocab-size", 64, "--arch", "LlamaForCausalLM", "--draft", draft(tmp_path, PARD),
        "-o", contract,
    )  # fmt: skip
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    text = contract.read_text()
    data = yaml.safe_load(text)
    assert data["method"] == "pard" and "serving" not in data
    assert "reads no target hidden state" in " ".join(text.split())
