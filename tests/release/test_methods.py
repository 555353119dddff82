"""DFlash2 and DSpark drafts (issue 38): ``resolve --method dflash2|dspark`` per engine, from
the command line, by the rules ``scripts/gen_method_rules.py`` read from the releases
(``engines/method_rules.json``; docs/dflash2.md, docs/dspark.md).

The expected layers are computed here from the rules as the docs state them (tap t = the
output of layer t = residual:t+1), not copied from the tool's output.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serving_cases import resolve_json

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


def config(tmp_path: Path, data: dict, name: str = "draft") -> Path:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(data, indent=2))
    return d


def run(cli, method: str, *args: object):
    return resolve_json(
        cli, "--method", method, "--arch", "Qwen3ForCausalLM", "--num-layers", 36, *args
    )


@pytest.mark.parametrize(
    "engine,version", [("sglang", "0.5.19"), ("sglang", "0.5.23"), ("vllm", "0.28.0"),
                       ("vllm", "0.34.0"), ("llama.cpp", "0.3.36")],
)  # fmt: skip
def test_dflash2_runs_on_the_dflash_path(cli, tmp_path, engine, version):
    res, out = run(
        cli, "dflash2", "--engine", engine, "--version", version,
        "--draft-config", config(tmp_path, DFLASH2),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert out["layers"] == outputs_of(TAPS)
    assert out["problems"] == [] and out["method"] == "dflash2"
    assert out["source"].startswith("DFlash2")


@pytest.mark.parametrize("engine,version", [("sglang", "0.5.18"), ("vllm", "0.27.1")])
def test_dflash2_before_the_release_that_has_it_is_refused(cli, tmp_path, engine, version):
    res, out = run(
        cli, "dflash2", "--engine", engine, "--version", version,
        "--draft-config", config(tmp_path, DFLASH2),
    )  # fmt: skip
    assert res.returncode == 2 and out["layers"] is None
    assert "no DFlash2 path" in out["refused"]


def test_dflash2_without_taps_is_the_guessed_list_ec522(cli, tmp_path):
    data = {k: v for k, v in DFLASH2.items() if k != "dflash_config"}
    res, out = run(
        cli, "dflash2", "--engine", "sglang", "--draft-config", config(tmp_path, data)
    )  # fmt: skip
    spread = [round(1 + i * 32 / 4) for i in range(5)]
    assert res.returncode == 1
    assert out["layers"] == outputs_of(spread)
    assert [p["code"] for p in out["problems"]] == ["EC522"]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_dspark_reads_its_own_key_as_layer_outputs(cli, tmp_path, engine):
    res, out = run(cli, "dspark", "--engine", engine, "--draft-config", config(tmp_path, DSPARK))
    assert res.returncode == 0, res.stderr
    assert out["layers"] == outputs_of(TAPS) and out["method"] == "dspark"


def test_dspark_key_wins_over_the_dflash_key_on_sglang(cli, tmp_path):
    data = {**DSPARK, "dflash_config": {"target_layer_ids": [2, 10, 18, 26, 34]}}
    res, out = run(cli, "dspark", "--engine", "sglang", "--draft-config", config(tmp_path, data))
    assert res.returncode == 0 and out["layers"] == outputs_of(TAPS)


def test_dspark_without_a_markov_head_is_refused_by_sglang(cli, tmp_path):
    data = {k: v for k, v in DSPARK.items() if k != "dspark_markov_rank"}
    res, out = run(cli, "dspark", "--engine", "sglang", "--draft-config", config(tmp_path, data))
    assert res.returncode == 2 and "markov_rank > 0" in out["refused"]


def test_dspark_target_with_its_own_hook_is_refused(cli, tmp_path):
    res, out = resolve_json(
        cli, "--method", "dspark", "--engine", "sglang", "--arch", "DeepseekV4ForCausalLM",
        "--num-layers", 43, "--draft-config", config(tmp_path, DSPARK),
    )  # fmt: skip
    assert res.returncode == 2 and "set_dspark_layers_to_capture" in out["refused"]


def test_dspark_on_vllm_before_0_25_is_refused(cli, tmp_path):
    res, out = run(
        cli, "dspark", "--engine", "vllm", "--version", "0.24.0",
        "--draft-config", config(tmp_path, DSPARK),
    )  # fmt: skip
    assert res.returncode == 2 and "no DSpark path" in out["refused"]


def test_dspark_llamacpp_converter_reads_target_layer_ids_not_the_dspark_key(cli, tmp_path):
    """The dense DSpark converter (conversion/qwen.py DSparkModel) copies the top-level
    target_layer_ids (or speculators' aux ids - 1) into dflash_config; a draft holding only
    dspark_target_layer_ids gets no dflash.target_layers."""
    res, out = run(
        cli, "dspark", "--engine", "llama.cpp", "--draft-config", config(tmp_path, DSPARK)
    )  # fmt: skip
    assert res.returncode == 2 and "no tap list" in out["refused"]
    listed = {**DSPARK, "target_layer_ids": TAPS}
    res, out = run(
        cli, "dspark", "--engine", "llama.cpp", "--draft-config", config(tmp_path, listed, "b")
    )  # fmt: skip
    assert res.returncode == 0 and out["layers"] == outputs_of(TAPS)
    aux = {"architectures": ["DSparkSpeculator"], "aux_hidden_state_layer_ids": [2, 10, 18]}
    res, out = run(
        cli, "dspark", "--engine", "llama.cpp", "--draft-config", config(tmp_path, aux, "c")
    )  # fmt: skip
    assert res.returncode == 0 and out["layers"] == ["residual:2", "residual:10", "residual:18"]


def test_want_gives_the_dspark_taps(cli):
    res, out = resolve_json(
        cli, "--method", "dspark", "--engine", "vllm", "--version", ">=0.25.0",
        "--num-layers", 36, "--want", "residual:2", "residual:18", "residual:34",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert out["taps"] == [1, 17, 33] and out["config_key"] == "dspark_target_layer_ids"


@pytest.mark.parametrize(
    ("method", "words"), [("pard", "reads no target hidden state in any release read")]
)
def test_methods_without_rules_are_usage_errors(cli, method, words):
    res = cli(
        "resolve", "--engine", "vllm", "--method", method, "--num-layers", "36", "--ids", "1"
    )  # fmt: skip
    assert res.returncode == 2 and words in " ".join(res.stderr.split())


def test_engine_without_rules_for_the_method_is_a_usage_error(cli):
    res = cli(
        "resolve", "--engine", "openvino", "--method", "dspark", "--num-layers", "36", "--ids", "1"
    )  # fmt: skip
    assert res.returncode == 2 and "no DSpark code" in res.stderr


def contract(tmp_path: Path, method: str, draft: Path, trained: list[str], engine="sglang"):
    c = tmp_path / f"{method}-{engine}.yaml"
    slots = "".join(f"    - {{layer: {x}}}\n" for x in [*trained, "final_norm"])
    c.write_text(
        f"contract: x\nversion: 1\nmethod: {method}\n"
        "target: {arch: Qwen3ForCausalLM, num_hidden_layers: 36, hidden_size: 4096}\n"
        f"training:\n  slots:\n{slots}"
        f"serving:\n  engine: {engine}\n  version: '0.5.23'\n  draft_config: {draft}\n"
    )
    return c


def findings(cli, path: Path):
    res = cli("check", path, "--checks", "layout", "--json")
    return res, [(f["code"], f["severity"]) for f in json.loads(res.stdout)["findings"]]


@pytest.mark.parametrize("method,data", [("dflash2", DFLASH2), ("dspark", DSPARK)])
def test_check_layout_of_a_family_contract(cli, tmp_path, method, data):
    """The layout check resolves the taps by the method's rules: the draft's taps against
    the trained layers pass, trained one layer deeper is EC501."""
    draft = config(tmp_path, data)
    res, codes = findings(cli, contract(tmp_path, method, draft, outputs_of(TAPS)))
    assert res.returncode == 0 and codes == [], res.stdout
    deeper = [f"residual:{t + 2}" for t in TAPS]
    res, codes = findings(cli, contract(tmp_path / "..", method, draft, deeper))
    assert res.returncode == 1 and codes == [("EC501", "error")]


def test_check_dspark_guess_against_other_trained_layers_is_ec522(cli, tmp_path):
    data = {k: v for k, v in DSPARK.items() if k != "dspark_target_layer_ids"}
    draft = config(tmp_path, data)
    res, codes = findings(cli, contract(tmp_path, "dspark", draft, outputs_of([2, 10, 18, 26, 34])))
    assert res.returncode == 1 and codes == [("EC522", "error")]


def test_check_dspark_without_a_markov_head_is_ec510(cli, tmp_path):
    data = {k: v for k, v in DSPARK.items() if k != "dspark_markov_rank"}
    draft = config(tmp_path, data)
    res, codes = findings(cli, contract(tmp_path, "dspark", draft, outputs_of(TAPS)))
    assert res.returncode == 1 and ("EC510", "error") in codes


def test_matrix_of_a_dspark_contract(cli, tmp_path):
    """``matrix`` answers by the DSpark rules of every engine read: SGLang and vLLM feed the
    draft's dspark_target_layer_ids + 1; llama.cpp's dense converter ignores that key
    (refused), and names the target_layer_ids that would fix it."""
    draft = config(tmp_path, DSPARK)
    res = cli("matrix", contract(tmp_path, "dspark", draft, outputs_of(TAPS)), "--json")
    assert res.returncode == 0, res.stderr  # the contract's own engine, SGLang, feeds them
    out = json.loads(res.stdout)
    assert out["method"] == "dspark"
    rows = {(r["engine"], r["versions"][-1]): r for r in out["rows"]}
    assert rows[("sglang", "0.5.23")]["feeds"] == outputs_of(TAPS)
    assert rows[("vllm", "0.34.0")]["feeds"] == outputs_of(TAPS)
    llama = rows[("llama.cpp", "0.3.36")]
    assert llama["feeds"] is None and "has no tap list (target_layer_ids)" in llama["refused"]
    assert llama["fix"] == TAPS  # the docstring's claim: the target_layer_ids that fix it


def test_infer_detection_names_the_methods():
    from pytest_eagle_contract.methods import detect

    assert detect(DFLASH2) == "dflash2"
    assert detect(DSPARK) == "dspark"
    assert detect({"dspark_config": {"markov_rank": 8}}) == "dspark"


# A PARD draft as vLLM 0.16.0-0.33.0 serve it: a plain causal LM whose config.json carries
# pard_token, the mask token v1/spec_decode/eagle.py (0.16.0) and llm_base_proposer.py
# (0.23.0-0.33.0) read for method draft_model with parallel_drafting.
PARD = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "pard_token": 128256}


def test_a_pard_draft_is_detected_by_its_pard_token():
    from pytest_eagle_contract.methods import detect

    assert detect(PARD) == "pard"
    assert detect({**PARD, "pard_token": True}) is None  # not a token id
    assert detect({"architectures": ["LlamaForCausalLM"]}) is None
    # vLLM 0.33.0's Qwen3-Omni DSpark reads pard_token as its noise token: still DSpark
    assert detect({**PARD, "architectures": ["Qwen3OmniDSparkModel"]}) == "dspark"
    assert detect({**DFLASH2, "pard_token": 5}) == "dflash2"


def test_rules_table_pins_what_the_releases_say():
    from pytest_eagle_contract.engines.method_table import releases, table

    assert releases("sglang", "dflash2")[0] == "0.5.19"
    assert releases("sglang", "dspark")[0] == "0.5.16"
    assert releases("vllm", "dflash2")[0] == "0.28.0"
    assert releases("vllm", "dspark")[0] == "0.25.0"
    rows = table()["vllm"]["rows"]
    shifts = {r["since"]: r["dspark"]["dspark_target_layer_ids"] for r in rows if r["dspark"]}
    assert shifts["0.25.0"]["deepseek_v41"] == 1 and shifts["0.34.0"]["deepseek_v41"] == 0


# mlx-vlm routes a draft by its model_type first (KeyError('model_type') without one)
MLX_DFLASH2 = {**DFLASH2, "model_type": "qwen3", "dflash_config": {"target_layer_ids": [1, 9, 17]}}
MLX_DSPARK = {
    "architectures": ["DSparkDraftModel"],
    "model_type": "qwen3",
    "dflash_config": {"target_layer_ids": [1, 9, 17], "projector_type": "dspark"},
}


@pytest.mark.parametrize("method,data", [("dflash2", MLX_DFLASH2), ("dspark", MLX_DSPARK)])
def test_mlx_reads_the_dflash_config_taps_as_layer_outputs(cli, tmp_path, method, data):
    res, out = resolve_json(
        cli, "--method", method, "--engine", "mlx", "--arch", "qwen3_5", "--num-layers", 36,
        "--draft-config", config(tmp_path, data),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert out["layers"] == outputs_of([1, 9, 17])


def test_mlx_routes_a_dspark_draft_without_a_markov_head_as_dflash(cli, tmp_path):
    data = {
        "architectures": ["DSparkDraftModel"],
        "model_type": "qwen3",
        "dflash_config": {"target_layer_ids": [1]},
    }
    res, out = resolve_json(
        cli, "--method", "dspark", "--engine", "mlx", "--arch", "qwen3_5", "--num-layers", 36,
        "--draft-config", config(tmp_path, data),
    )  # fmt: skip
    assert res.returncode == 2 and "loads as DFlash" in out["refused"]


def test_mlx_refuses_unordered_taps_and_uncaptured_targets(cli, tmp_path):
    data = {**MLX_DFLASH2, "dflash_config": {"target_layer_ids": [9, 1]}}
    res, out = resolve_json(
        cli, "--method", "dflash2", "--engine", "mlx", "--arch", "qwen3_5", "--num-layers", 36,
        "--draft-config", config(tmp_path, data),
    )  # fmt: skip
    assert res.returncode == 2 and "strictly increasing" in out["refused"]
    res, out = resolve_json(
        cli, "--method", "dflash2", "--engine", "mlx", "--arch", "deepseek_v4", "--num-layers", 43,
        "--ids", 1, 9,
    )  # fmt: skip
    assert res.returncode == 2 and "not followed" in out["refused"]


def test_a_modelopt_dspark_export_is_detected_as_dspark():
    """nvidia-modelopt 0.47.0's DSparkExporter keeps DFlash's architectures and adds the head's
    fields to dflash_config (torch/export/plugins/hf_spec_export.py)."""
    from pytest_eagle_contract.methods import detect

    exported = {
        "architectures": ["DFlashDraftModel"],
        "dflash_config": {"target_layer_ids": [1, 9], "projector_type": "dspark", "markov_rank": 8},
    }
    assert detect(exported) == "dspark"
    plain = {"architectures": ["DFlashDraftModel"], "dflash_config": {"target_layer_ids": [1]}}
    assert detect(plain) == "dflash"


@pytest.mark.slow
def test_infer_names_dflash2_and_drafts_its_serving_section(cli, tmp_path):
    """``infer --draft`` with a DFlash2 draft writes ``method: dflash2`` and a serving section
    (SGLang, from its first release with DFlash2) whose taps the layout check resolves by
    DFlash2's rules: the trained taps pass, a draft config one tap off is EC501."""
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
    draft = config(tmp_path, {**DFLASH2, "dflash_config": {"target_layer_ids": [1, 4]}})
    contract = tmp_path / "c.yaml"
    res = cli(
        "infer", root, "--layers", "residual:2", "residual:5", "final_norm", "--num-layers", 8,
        "--vocab-size", 64, "--arch", "LlamaForCausalLM", "--draft", draft, "-o", contract,
    )  # fmt: skip
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    data = yaml.safe_load(contract.read_text())
    assert data["method"] == "dflash2" and data["serving"]["engine"] == "sglang"
    assert data["serving"]["version"] == ">=0.5.19"
    checked = cli("check", contract)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config(tmp_path, {**DFLASH2, "dflash_config": {"target_layer_ids": [2, 5]}})  # one off
    shifted = cli("check", contract, "--json")
    codes = {f["code"] for f in json.loads(shifted.stdout)["findings"]}
    assert shifted.returncode == 1 and "EC501" in codes, shifted.stdout


@pytest.mark.parametrize(
    "body",
    [
        {**DSPARK, "dspark_target_layer_ids": "abc"},
        {**DSPARK, "dspark_target_layer_ids": [True, 2]},
        {**DSPARK, "dspark_markov_rank": [1]},
        {**DSPARK, "dspark_target_layer_ids": []},
    ],
)
def test_hostile_dspark_configs_end_in_a_finding(cli, tmp_path, body):
    """A malformed key the method reads is EC510 in the layout check, never a traceback."""
    draft = config(tmp_path, body)
    res, codes = findings(cli, contract(tmp_path, "dspark", draft, outputs_of(TAPS)))
    assert "Traceback" not in res.stderr
    assert res.returncode == 1 and ("EC510", "error") in codes


def test_both_keys_sglang_reads_the_dspark_key_vllm_the_dflash_key(cli, tmp_path):
    """SGLang's parse_dspark_draft_config reads dspark_target_layer_ids first; vLLM's V2
    reader reaches dflash_config.target_layer_ids before it: one draft, two layer lists."""
    other = [2, 10, 18, 26, 34]
    data = {**DSPARK, "dflash_config": {"target_layer_ids": other}}
    draft = config(tmp_path, data)
    _, sgl = run(cli, "dspark", "--engine", "sglang", "--draft-config", draft)
    _, vll = run(cli, "dspark", "--engine", "vllm", "--draft-config", draft)
    assert sgl["layers"] == outputs_of(TAPS)
    assert vll["layers"] == outputs_of(other)


def test_each_method_bound_shard_format_is_a_format_and_names_its_method():
    """The registry's ``shard_formats`` (what a contract is checked against at load, below
    the shard readers) name real formats, and each format's ``method`` is read from it."""
    from pytest_eagle_contract.shards.formats import FORMATS

    said = {name: f.method for name, f in FORMATS.items() if f.method}
    assert said == {"specforge-dflash": "dflash", "specforge-dspark": "dspark"}


@pytest.mark.parametrize(
    "method,data",
    [
        ("dflash", {"dflash_config": {"target_layer_ids": [1, 9, 17]}}),
        ("dflash", {**MLX_DFLASH2, "model_type": None}),
        ("dflash2", {k: v for k, v in MLX_DFLASH2.items() if k != "model_type"}),
        ("dspark", {k: v for k, v in MLX_DSPARK.items() if k != "model_type"}),
    ],
)
def test_mlx_refuses_a_draft_without_model_type_in_its_words(cli, tmp_path, method, data):
    """mlx-vlm 0.6.15 to 0.7.10 (utils.get_model_and_args) route a draft by model_type before
    anything else and raise KeyError('model_type') without one; the refusal said "the
    none_dflash drafter"."""
    res, out = resolve_json(
        cli, "--method", method, "--engine", "mlx", "--arch", "qwen3_5", "--num-layers", 36,
        "--draft-config", config(tmp_path, data),
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    said = " ".join(out["refused"].split())
    assert "a draft config without model_type" in said and "KeyError('model_type')" in said
    assert "none_dflash" not in said.lower()
