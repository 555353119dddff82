"""Issue 10, "Shown by": a new user's first-contract journey on a pipeline built here.

A random tiny Qwen2 target saved with ``save_pretrained``, SpecForge shards written as
SpecForge writes them (SGLang's aux ids [1, 3, 4] + 1: residual:2, 4, 5, then the post-norm
last state). ``infer --target-model`` drafts the contract from good shards; ``check`` and
``pytest --eagle-contract`` (sharpness included) pass on fresh shards of the same pipeline
beside the user's own test, and fail on shifted, swapped and embedding-in-front shards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import yaml

from pytest_eagle_contract.layers import Layer
from pytest_eagle_contract.models.reference import capture_canonical
from pytest_eagle_contract.shards.writing import write_shard

L, H, VOCAB = 8, 64, 256
GOOD = [Layer(2), Layer(4), Layer(5), Layer(-1)]
BAD = {
    "shifted": [Layer(3), Layer(5), Layer(6), Layer(-1)],
    "swapped": [Layer(4), Layer(2), Layer(5), Layer(-1)],
    "embed-in-front": [Layer(0), Layer(2), Layer(4), Layer(-1)],
}
USER_TEST = "def test_users_own():\n    assert 1 + 1 == 2\n"


def _target() -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=H,
        intermediate_size=2 * H,
        num_hidden_layers=L,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    return Qwen2ForCausalLM(config).eval()


def _write(model: torch.nn.Module, root, layers: list[Layer], seeds: range) -> None:
    for seed in seeds:  # the seed names the file: data_{seed}.ckpt
        g = torch.Generator().manual_seed(seed)
        tokens = int(torch.randint(24, 48, (1,), generator=g))
        ids = torch.randint(0, VOCAB, (tokens,), generator=g)
        mask = torch.ones(tokens, dtype=torch.long)
        mask[: tokens // 3] = 0  # the prompt
        states = capture_canonical(model, ids)
        slots = [states[layer].to(torch.bfloat16) for layer in layers]
        write_shard(root, "specforge", seed, ids, mask, slots)


def _run(*args, cwd=None) -> subprocess.CompletedProcess[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "eagle-contract")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "pytest_eagle_contract"]
    if args[0] == "pytest":
        cmd, args = [sys.executable, "-m", "pytest"], args[1:]
    return subprocess.run(
        [*cmd, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    root = tmp_path_factory.mktemp("journey")
    model = _target()
    model.save_pretrained(root / "target")
    _write(model, root / "good", GOOD, range(0, 4))
    _write(model, root / "fresh", GOOD, range(100, 103))
    for k, (name, layers) in enumerate(BAD.items()):
        _write(model, root / name, layers, range(200 + 10 * k, 202 + 10 * k))
    return root


@pytest.mark.slow
def test_first_contract_journey(pipeline):
    contract = pipeline / "contracts" / "mine.yaml"
    drafted = _run(
        "infer", pipeline / "good", "--target-model", pipeline / "target", "-o", contract
    )
    assert drafted.returncode == 0, drafted.stderr
    data = yaml.safe_load(contract.read_text())
    assert data["target"]["num_hidden_layers"] == L
    assert data["target"]["vocab_size"] == VOCAB
    assert data["target"]["arch"] == "Qwen2ForCausalLM"
    assert [s["layer"] for s in data["training"]["slots"]] == [str(x) for x in GOOD]
    assert data["serving"]["engine"] == "sglang"

    fresh = _run("check", contract, pipeline / "fresh", "--sample", "all")
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    report = pipeline / "bad.json"
    bad = _run(
        "check", contract, *(pipeline / name for name in BAD), "--sample", "all", "--json", report
    )
    assert bad.returncode == 1, bad.stdout + bad.stderr
    failed = {
        f["file"] for f in json.loads(report.read_text())["findings"] if f["severity"] == "error"
    }
    for k in range(len(BAD)):  # every bad shard fails
        assert {f"rows_0-2000/data_{200 + 10 * k + i}.ckpt" for i in range(2)} <= failed, failed

    (pipeline / "test_users_own.py").write_text(USER_TEST)
    gate = _run(
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rA",
        "test_users_own.py",
        f"--eagle-contract={contract}",
        "--eagle-shards",
        pipeline / "fresh",
        "--eagle-sample",
        "all",
        cwd=pipeline,
    )
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "PASSED test_users_own.py::test_users_own" in gate.stdout, gate.stdout
    assert "PASSED contracts/mine.yaml::sharpness" in gate.stdout, gate.stdout
