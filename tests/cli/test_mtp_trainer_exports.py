"""An MTP head exported by speculators 0.9.0's own ``MTPConverter`` (issue 38), on CPU,
randomly initialised: a tiny Qwen3 target saved by transformers with one native MTP layer
(``mtp.*``, seeded; ``tests/trainer_exports.py``'s ``speculators-mtp`` job, in a subprocess)
converted to a speculators MTP draft, beside speculators-layout shards holding the one state
speculators trains MTP on (``target_layer_ids`` = ``[num_hidden_layers]``: vLLM aux id L,
``residual:L``; hs-connectors' FP8 writer, as ``test_dflash_trainer_exports`` runs it).

Served by SGLang 0.5.23, which feeds the draft the target's final norm output on Qwen3
(docs/mtp.md), the head trained on ``residual:L`` is EC501 (found ``final_norm``); the same
contract naming ``final_norm`` passes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_dflash_shards import VOCAB, L
from test_dflash_trainer_exports import H
from test_numerics import write_fp8  # noqa: F401  (hs-connectors' own FP8 writer, a fixture)
from trainer_exports import need

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mtp_draft(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """speculators' ``MTPConverter`` run on a tiny Qwen3 target with native ``mtp.*`` weights:
    (the converted draft's folder, its config.json)."""
    need("speculators")
    root = tmp_path_factory.mktemp("mtp-export")
    job = {
        "kind": "speculators-mtp", "target": str(root / "target"), "out": str(root / "draft"),
        "num_layers": L, "hidden": H, "vocab": VOCAB,
    }  # fmt: skip
    jobs = root / "jobs.json"
    jobs.write_text(json.dumps([job]))
    res = subprocess.run(
        [sys.executable, str(TESTS / "trainer_exports.py"), str(jobs)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    (result,) = json.loads(res.stdout.strip().splitlines()[-1])
    return root / "draft", result["config"]


def mtp_shards(root: Path, write: Any) -> Path:
    """speculators' layout (``hidden_states/hs_{i}.safetensors`` + its Arrow rows) holding
    one state per token, as speculators' MTP training captures (the last layer), written by
    hs-connectors' FP8 writer; values up to 8 and one channel at 16
    (norm about 22, a residual stream's, not the final norm's sqrt(H)): FP8 clips none."""
    import torch

    from pytest_eagle_contract.shards.writing import write_speculators_dataset

    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(6):
        T = 40 + 4 * i
        ids = torch.randint(0, VOCAB, (T,), generator=g)
        state = torch.randn(T, 1, H, generator=g).clamp(-2.0, 2.0) * 4.0
        state[..., 0] = 16.0  # one outlier channel sets each token's scale, as in a residual
        write(root / "hidden_states" / f"hs_{i}.safetensors", state, ids)
        rows.append((ids, torch.ones(T, dtype=torch.long)))
    write_speculators_dataset(root, rows)
    return root


def check(cli, contract: Path) -> tuple[int, list[dict]]:
    res = cli("check", contract, "--json")
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, json.loads(res.stdout)["findings"]


def test_a_speculators_mtp_head_served_the_final_norm_is_ec501(
    cli,
    tmp_path,
    mtp_draft,
    write_fp8,  # noqa: F811
):
    draft, config = mtp_draft
    assert config["speculators_model_type"] == "mtp"
    assert config["transformer_layer_config"]["num_hidden_layers"] == L
    good = mtp_shards(tmp_path / "shards", write_fp8)
    out = tmp_path / "c.yaml"
    res = cli(
        "infer", good, "--num-layers", L, "--vocab-size", VOCAB, "--arch", "Qwen3ForCausalLM",
        "--draft", draft, "-o", out,
    )  # fmt: skip
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    import yaml

    data = yaml.safe_load(out.read_text())
    assert data["method"] == "mtp" and data["training"]["format"] == "speculators"
    assert [s["layer"] for s in data["training"]["slots"]] == [f"residual:{L}"]
    assert "serving" not in data  # infer leaves the engine to the user (docs/mtp.md)
    with out.open("a") as f:
        f.write("serving:\n  engine: sglang\n  version: '0.5.23'\n")

    rc, found = check(cli, out)
    assert rc == 1 and [f["code"] for f in found] == ["EC501"], found
    assert found[0]["expected"] == f"residual:{L}" and found[0]["found"] == "final_norm"

    final = tmp_path / "final.yaml"  # the same head, trained on the state SGLang feeds
    final.write_text(out.read_text().replace(f"layer: residual:{L},", "layer: final_norm,"))
    rc, found = check(cli, final)
    assert rc == 0 and found == [], found
