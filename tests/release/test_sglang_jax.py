"""sglang-jax through ``eagle-contract resolve --engine sglang-jax``: its target runner reads the
ids from the target's config.json, so a draft's ids are silently not used (its default, EC508,
unless they name the same layers); architectures without its capture and the index's releases
without EAGLE-3 are refused; and a pinned snapshot of the rules read from the repository
(``engines/sglang_jax_rules.json``, checked against it by test_sglang_jax_source.py)."""

from __future__ import annotations

import json

import pytest

from pytest_eagle_contract.engines import sglang_jax

DEFAULT = ["residual:2", "residual:16", "residual:29"]


def _resolve(cli, *args):
    res = cli("resolve", "--engine", "sglang-jax", "--num-layers", "32", *map(str, args), "--json")
    assert "Traceback" not in res.stderr, res.stderr
    return res, json.loads(res.stdout)


@pytest.mark.parametrize(
    ("ids", "problems"),
    [([1, 15, 28], []), ([2, 16, 29], ["EC508"]), ([3, 9, 20], ["EC508"])],
)
def test_the_drafts_ids_are_not_read(cli, tmp_path, ids, problems):
    draft = tmp_path / "config.json"
    draft.write_text(json.dumps({"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}))
    res, out = _resolve(cli, "--draft-config", draft)
    assert out["layers"] == DEFAULT and [p["code"] for p in out["problems"]] == problems
    assert res.returncode == (1 if problems else 0)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--arch", "Gemma4ForCausalLM"], "no EAGLE-3 capture for Gemma4ForCausalLM"),
        (["--version", "0.0.1.post1"], "0.0.1.post1 has no EAGLE-3"),
    ],
)
def test_what_it_does_not_serve(cli, args, says):
    res, out = _resolve(cli, *args)
    assert res.returncode == 2 and says in out["refused"], out


def test_pinned_snapshot_of_the_rules_from_the_source():
    data = sglang_jax._data()
    assert data["snapshot"]["commit"].startswith("cddbf6f1")
    (row,) = data["rows"]  # every tag and the snapshot read alike
    assert row["refs"][0] == "v0.0.3rc0" and row["refs"][-1] == data["snapshot"]["commit"]
    assert row["reads"] == "target_config.eagle_config.eagle_aux_hidden_state_layer_ids"
    assert {m["file"]: (m["plus"], m["index0"]) for m in row["models"]} == {
        "sgl_jax/srt/models/llama.py": (1, "crash"),
        "sgl_jax/srt/models/qwen3.py": (1, "embed"),
    }
