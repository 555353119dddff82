"""DFlash-family draft checkpoints (issue 38): the fc width against taps x target hidden size
(EC901, family ``draft``), and mlx-vlm's qwen3_dflash drafter, whose config defaults a missing
tap list to ``[1, 8, 15, 22, 29]`` (EC522).

The fc facts, read from released code: SGLang 0.5.23 ``srt/models/dflash.py`` builds
``fc = Linear(num_context_features * hidden_size, hidden_size)`` with ``num_context_features``
the tap list's length (else ``build_target_layer_ids``' n = the draft's ``num_hidden_layers``)
and refuses another ``fc.weight`` shape at load; vLLM 0.34.0 ``qwen3_dflash.py``
``_get_dflash_fc_input_size``: ``target_hidden_size`` (else ``hidden_size``) times the tap
count, else ``num_hidden_layers``. mlx-vlm 0.6.15-0.7.10
``speculative/drafters/qwen3_dflash/config.py``: ``target_layer_ids`` defaults to
``[1, 8, 15, 22, 29]``; ``utils.get_model_type`` routes a config with a ``dflash_config`` to
``<model_type>_dflash``. Drafts are written as safetensors files on disk.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from serving_cases import resolve_json

H, L, V = 64, 8, 512
MLX_DEFAULT = [1, 8, 15, 22, 29]
MLX_READ = ["0.6.15", "0.6.16", "0.6.17", "0.7.0", "0.7.1", "0.7.2", "0.7.3", "0.7.4", "0.7.5",
            "0.7.6", "0.7.8", "0.7.9", "0.7.10"]  # fmt: skip

CONTRACT = """\
contract: tiny
version: 1
method: {method}
target: {{arch: LlamaForCausalLM, num_hidden_layers: {L}, hidden_size: {H}, vocab_size: {V}}}
serving:
  engine: {engine}
  version: "{version}"
  draft_config: draft
"""


def draft_config(**extra: object) -> dict[str, object]:
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": H,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 2 * H,
        "vocab_size": V,
        "block_size": 16,
        "dflash_config": {"mask_token_id": 500, "target_layer_ids": [1, 3, 5]},
        **extra,
    }


def write(
    tmp_path: Path,
    cfg: dict[str, object],
    fc_in: int,
    *,
    method: str = "dflash",
    engine: str = "sglang",
    version: str = "0.5.23",
    fc_name: str = "fc.weight",
) -> Path:
    d = tmp_path / "draft"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    weights = {
        fc_name: torch.zeros(H, fc_in),
        "hidden_norm.weight": torch.ones(H),
        "norm.weight": torch.ones(H),
        "layers.0.input_layernorm.weight": torch.ones(H),
    }
    save_file(weights, str(d / "model.safetensors"))
    path = tmp_path / "c.yaml"
    path.write_text(CONTRACT.format(method=method, engine=engine, version=version, L=L, H=H, V=V))
    return path


def draft_findings(cli, path: Path) -> list[dict]:
    res = cli("check", path, "--checks", "draft", "--json")
    assert "Traceback" not in res.stderr, res.stderr
    return [f for f in json.loads(res.stdout)["findings"] if f["code"].startswith("EC9")]


@pytest.mark.parametrize("engine,version", [("sglang", "0.5.23"), ("vllm", "0.34.0")])
def test_fc_as_wide_as_the_taps_passes(cli, tmp_path, engine, version):
    path = write(tmp_path, draft_config(), 3 * H, engine=engine, version=version)
    assert draft_findings(cli, path) == []


@pytest.mark.parametrize("engine,version", [("sglang", "0.5.23"), ("vllm", "0.34.0")])
def test_fc_for_another_tap_count_is_ec901(cli, tmp_path, engine, version):
    path = write(tmp_path, draft_config(), 4 * H, engine=engine, version=version)
    [f] = draft_findings(cli, path)
    assert f["code"] == "EC901"
    assert f["expected"] == str([H, 3 * H]) and f["found"] == str([H, 4 * H])
    assert "dflash_config.target_layer_ids lists 3" in " ".join(f["message"].split())


def test_fc_under_the_native_export_name_is_checked(cli, tmp_path):
    path = write(tmp_path, draft_config(), 2 * H, fc_name="encoder.fc.weight")
    [f] = draft_findings(cli, path)
    assert f["code"] == "EC901" and "encoder.fc.weight" in f["message"]


def test_without_a_tap_list_the_fc_takes_one_state_per_draft_layer(cli, tmp_path):
    cfg = draft_config(dflash_config={"mask_token_id": 500}, num_hidden_layers=4)
    assert draft_findings(cli, write(tmp_path, cfg, 4 * H)) == []
    [f] = draft_findings(cli, write(tmp_path, cfg, 3 * H))
    assert f["code"] == "EC901" and f["expected"] == str([H, 4 * H])


def test_an_eagle3_sized_fc_on_a_five_tap_draft_is_no_false_alarm(cli, tmp_path):
    # the EAGLE-3 rule (3 aux states on vLLM) must not judge a DFlash draft
    cfg = draft_config(dflash_config={"mask_token_id": 500, "target_layer_ids": [0, 1, 3, 5, 6]})
    path = write(tmp_path, cfg, 5 * H, engine="vllm", version="0.34.0")
    assert draft_findings(cli, path) == []


def test_dspark_counts_its_own_tap_key(cli, tmp_path):
    cfg = draft_config(dspark_target_layer_ids=[1, 3, 5, 6], dspark_markov_rank=1)
    assert draft_findings(cli, write(tmp_path, cfg, 4 * H, method="dspark")) == []
    [f] = draft_findings(cli, write(tmp_path, cfg, 3 * H, method="dspark"))
    assert f["code"] == "EC901" and "dspark_target_layer_ids lists 4" in f["message"]


def test_mlx_default_list_sets_the_fc_width(cli, tmp_path):
    cfg = draft_config(dflash_config={"mask_token_id": 500})
    path = write(tmp_path, cfg, 3 * H, engine="mlx", version="0.7.10")
    [f] = draft_findings(cli, path)
    assert f["code"] == "EC901" and f["expected"] == str([H, 5 * H])
    assert str(MLX_DEFAULT) in f["message"]


# --- mlx-vlm's qwen3_dflash drafter: a missing tap list is its default, a guess (EC522)


def mlx_draft(tmp_path: Path, dflash_config: dict | None, **extra: object) -> Path:
    d = tmp_path / "mlxdraft"
    d.mkdir(exist_ok=True)
    data: dict[str, object] = {"model_type": "qwen3", "num_hidden_layers": 5, **extra}
    if dflash_config is not None:
        data["dflash_config"] = dflash_config
    (d / "config.json").write_text(json.dumps(data))
    return d


def mlx(cli, draft: Path, version: str = "0.7.10"):
    return resolve_json(
        cli, "--method", "dflash", "--engine", "mlx", "--version", version, "--arch",
        "qwen3_5", "--num-layers", 64, "--draft-config", draft,
    )  # fmt: skip


@pytest.mark.parametrize("version", MLX_READ)
def test_mlx_guesses_its_default_taps_ec522(cli, tmp_path, version):
    res, out = mlx(cli, mlx_draft(tmp_path, {"mask_token_id": 1}), version)
    assert res.returncode == 1
    assert out["layers"] == [f"residual:{t + 1}" for t in MLX_DEFAULT]
    [problem] = out["problems"]
    assert problem["code"] == "EC522"
    assert str(MLX_DEFAULT) in problem["message"] and "qwen3_dflash/config.py" in problem["message"]
    assert f"mlx-vlm {version}" in problem["message"]


def test_mlx_reads_the_listed_taps(cli, tmp_path):
    listed = {"target_layer_ids": [3, 15, 31]}
    for data, extra in ((listed, {}), ({}, listed)):  # under dflash_config, then top level
        res, out = mlx(cli, mlx_draft(tmp_path, data, **extra))
        assert res.returncode == 0, res.stdout
        assert out["layers"] == ["residual:4", "residual:16", "residual:32"]
        assert out["problems"] == []


@pytest.mark.parametrize(
    "dflash_config,extra,words",
    [
        # utils.get_model_type: no dflash_config, no DFlash drafter
        (None, {}, "has a dflash_config object; this one has none"),
        ({"projector_type": "dspark"}, {}, "DSpark drafter"),
        ({}, {"architectures": ["DFlash2DraftModel"]}, "DFlash2 drafter"),
        ({}, {"model_type": "llama"}, "no llama_dflash drafter in this release"),
    ],
)
def test_mlx_routes_other_drafts_elsewhere(cli, tmp_path, dflash_config, extra, words):
    res, _ = mlx(cli, mlx_draft(tmp_path, dflash_config, **extra))
    assert res.returncode != 0
    assert words in " ".join(res.stdout.split() + res.stderr.split())


def test_mlx_0_6_15_routes_every_dflash_config_to_a_dflash_drafter(cli, tmp_path):
    """0.6.15's utils.get_model_and_args appends _dflash to any draft with a dflash_config:
    a DSpark marker does not route it elsewhere."""
    res, out = mlx(
        cli, mlx_draft(tmp_path, {"projector_type": "dspark", "target_layer_ids": [3]}), "0.6.15"
    )
    assert res.returncode == 0, res.stdout
    assert out["layers"] == ["residual:4"]


def test_check_mlx_default_against_other_trained_layers_is_ec522_error(cli, tmp_path):
    d = tmp_path / "draft"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(
            {"model_type": "qwen3", "num_hidden_layers": 5, "dflash_config": {"mask_token_id": 1}}
        )
    )
    slots = "".join(f"    - {{layer: residual:{k}}}\n" for k in (3, 10, 17, 24, 31))
    path = tmp_path / "c.yaml"
    path.write_text(
        "contract: tiny\nversion: 1\nmethod: dflash\n"
        "target: {arch: qwen3_5, num_hidden_layers: 40, hidden_size: 64, vocab_size: 512}\n"
        f"training:\n  slots:\n{slots}    - {{layer: final_norm}}\n"
        'serving:\n  engine: mlx\n  version: "0.7.10"\n  draft_config: draft\n'
    )
    res = cli("check", path, "--checks", "layout", "--json")
    assert "Traceback" not in res.stderr, res.stderr
    codes = [(f["code"], f["severity"]) for f in json.loads(res.stdout)["findings"]]
    assert ("EC522", "error") in codes
    [f] = [f for f in json.loads(res.stdout)["findings"] if f["code"] == "EC522"]
    assert "mlx-vlm 0.7.10" in f["message"] and str(MLX_DEFAULT) in f["message"]
