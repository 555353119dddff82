"""``eagle-contract resolve`` from the command line, for every engine and the refusals."""

from __future__ import annotations

import json
import re

import pytest
from serving_cases import DROPPED_LAST, resolve_json, served_triples

from pytest_eagle_contract.engines.fixes import ids_for, reachable


def resolve_table(cli, *args):
    res, out = resolve_json(cli, *args, "--source", "table")
    return res.returncode, out


@pytest.mark.parametrize(
    ("engine", "arch", "version", "ids", "layers"),
    [
        ("sglang", "LlamaForCausalLM", "0.5.23", [2, 30, 58], [3, 31, 59]),
        ("sglang", "deepseek_v3", "0.5.14", [2, 30, 58], [2, 30, 58]),
        ("sglang", "deepseek_v3", "0.5.9", [2, 30, 58], [3, 31, 59]),
        ("sglang", "KimiK25ForConditionalGeneration", "0.5.12", [2, 30, 58], [3, 31, 59]),
        ("sglang", "KimiK25ForConditionalGeneration", "0.5.13", [1, 29, 57], [2, 30, 58]),
        ("sglang", "Qwen3ForCausalLM", "0.5.23", None, [2, 30, 58]),
        ("sglang", "Qwen3ForCausalLM", "0.5.23", [58, 2, 30], [3, 31, 59]),
        ("sglang", "GptOssForCausalLM", "0.5.23", [1, 30, 61], [1, 30, 61]),
        ("sglang", "GptOssForCausalLM", "0.5.16", [1, 30, 59], [2, 31, 60]),
        ("sglang", "LlamaForCausalLM", "0.4.6", [5, 6, 7], [2, 30, 58]),
        ("vllm", None, None, [2, 30, 61], [2, 30, 61]),
        ("vllm", None, None, None, [2, 30, 58]),
        ("specforge", "deepseek_v3", None, None, [2, 30, 58]),
        ("speculators-v1", None, None, None, [3, 31, 59, 61]),
        ("speculators", None, None, None, [2, 30, 58, 61]),
        ("eagle", None, None, None, [2, 30, 58]),
    ],
)
def test_resolve_layers(cli, engine, arch, version, ids, layers):
    from pytest_eagle_contract.engines.names import TRAINER_NAMES

    args = ["--trainer" if engine in TRAINER_NAMES else "--engine", engine, "--num-layers", 61]
    args += ["--arch", arch] if arch else []
    args += ["--version", version] if version else []
    args += ["--ids", *ids] if ids else []
    code, out = resolve_table(cli, *args)
    assert code == (1 if out["problems"] else 0)  # a coded problem (e.g. EC514) is a finding
    assert out["layers"] == [f"residual:{k}" for k in layers]
    assert out["source"].startswith(("built-in", "SpecForge", "speculators", "SafeAILab"))


def test_hf_indices(cli):
    code, out = resolve_table(cli, "--trainer", "hf", "--num-layers", 8, "--ids", 0, 3, 8)
    assert code == 0 and out["layers"] == ["embed", "residual:3", "final_norm"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--arch", "KimiK25ForConditionalGeneration", "--version", "0.5.9"], "no EAGLE-3 capture"),
        (["--arch", "LlamaForCausalLM", "--version", "0.4.4"], "has no EAGLE-3"),
        (["--arch", "KimiVLForConditionalGeneration", "--version", "0.5.23"], "kimi_vl.py"),
        (
            ["--arch", "Qwen3MoeForCausalLM", "--version", "0.5.23", "--ids", "2", "30", "60"],
            "IndexError at start-up",
        ),
        (
            ["--arch", "DeepseekV3ForCausalLM", "--version", "0.5.23", "--ids", "2", "30", "61"],
            "fails at the first forward",
        ),
        (["--arch", "LlamaForCausalLM", "--version", "0.6.0"], "newer than the built-in table"),
        (["--arch", "FalconForCausalLM", "--version", "0.5.23"], "not in the built-in table"),
    ],
)
def test_unservable_cases_exit_2(cli, args, words):
    res = cli("resolve", "--engine", "sglang", "--num-layers", "61", *args, "--source", "table")
    assert res.returncode == 2
    assert words in res.stderr


def test_silently_dropped_layer_is_said(cli):
    code, out = resolve_table(cli, *DROPPED_LAST)
    assert code == 1 and out["layers"] == ["residual:3", "residual:31"]  # a finding: exit 1
    assert out["problems"][0]["code"] == "EC511"


def test_text_output(cli):
    args = "--engine sglang --version 0.5.14 --arch deepseek_v3 --num-layers 61 --ids 2 30 58"
    res = cli("resolve", *args.split(), "--source", "table")
    assert res.returncode == 0
    assert re.search(r"^\s+0\s+2\s+2\s+residual:2$", res.stdout, re.M)
    assert "rule deepseek" in res.stdout


def test_each_engine_reads_the_draft_config_keys_it_names(tmp_path):
    from pytest_eagle_contract.contract.model import ServingSpec
    from pytest_eagle_contract.engines.draft_config import read_draft_config
    from pytest_eagle_contract.engines.resolve import ENGINES, engine_aux_ids

    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "eagle_aux_hidden_state_layer_ids": [1, 2, 3],
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": [4, 5, 6]},
            }
        )
    )
    draft = read_draft_config(tmp_path)
    assert ENGINES["sglang"].draft_ids(draft) == (4, 5, 6)
    assert ENGINES["vllm"].draft_ids(draft) == (1, 2, 3)
    serving = ServingSpec("sglang", None, None, tmp_path, (7, 8, 9), None, None)
    assert engine_aux_ids(serving) == (4, 5, 6)
    assert engine_aux_ids(serving, engine="vllm") == (1, 2, 3)
    assert engine_aux_ids(ServingSpec("vllm", None, None, None, (7, 8, 9), None, None)) == (7, 8, 9)


def test_each_engine_says_its_default_ids():
    from pytest_eagle_contract.engines.resolve import ENGINES

    assert {name: e.default_ids(61) for name, e in ENGINES.items()} == {
        "sglang": [2, 30, 58],
        "vllm": [2, 30, 58],
        "trtllm": [1, 29, 57],
        "llama.cpp": [2, 30, 58],  # what its converter bakes without ids
        "mlx": [2, 0, 0],  # mlx-vlm counts the draft's own layers (1)
        "tpu-inference": [2, 30, 58],
        "vllm-ascend": [2, 30, 58],
        "trtllm-autodeploy": [1, 29, 57],
        "sglang-jax": [2, 30, 58],
        "atom": [2, 30, 58],
        "openvino": [2, 30, 58],
        "lmdeploy": [2, 30, 58],  # fixed: configurations/llama.py, kimi_k2.py
        "specforge": [1, 29, 57],
        "speculators-v1": [2, 30, 58, 60],
        "speculators": [2, 30, 58, 61],
        "eagle": [2, 30, 58],
        "hf": None,
    }


# -- the inverse: which ids make an engine feed given layers ---------------------------------


def _layers(*names):
    from pytest_eagle_contract.layers import Layer

    return [Layer.parse(n) for n in names]


def _residual(*indices):
    return [f"residual:{k}" for k in indices]


@pytest.mark.parametrize(
    ("engine", "arch", "version", "layers", "ids"),
    [
        # the Kimi/DeepSeek case: SGLang 0.5.13+ feeds residual:2, 30, 58 for ids [2, 30, 58]
        ("sglang", "DeepseekV3ForCausalLM", "0.5.14", _residual(2, 30, 58), (2, 30, 58)),
        # before PR #25454 every id gets +1
        ("sglang", "DeepseekV3ForCausalLM", "0.5.9", _residual(2, 30, 58), (1, 29, 57)),
        ("sglang", "KimiK25ForConditionalGeneration", "0.5.23", _residual(3, 31, 59), (3, 31, 59)),
        ("sglang", "LlamaForCausalLM", "0.5.23", _residual(3, 31, 59), (2, 30, 58)),
        ("sglang", "GptOssForCausalLM", "0.5.23", _residual(1, 30, 61), (1, 30, 61)),
        # the Kimi fix on the serving side: from 0.5.14 the capture happens after prepare_attn,
        # where index 0 is the embedding output
        (
            "sglang",
            "KimiK25ForConditionalGeneration",
            "0.5.14",
            ["embed", *_residual(3, 31)],
            (0, 3, 31),
        ),
        ("vllm", None, None, ["embed", *_residual(3, 31)], (0, 3, 31)),
        ("vllm", None, None, _residual(2, 30, 61), (2, 30, 61)),
    ],
)
def test_ids_for_finds_the_ids_that_resolve_to_the_layers(engine, arch, version, layers, ids):
    from pytest_eagle_contract.engines.resolve import get_engine, resolve

    wanted = _layers(*layers)
    assert ids_for(get_engine(engine), wanted, 61, arch, version) == ids
    assert list(resolve(engine, 61, ids, arch, version).layers) == wanted


@pytest.mark.parametrize(
    ("arch", "version", "nearest", "ids"),
    [
        # no SGLang id captures index 0 where the loop adds a None residual before layer 0
        # (DeepSeek 0.5.13, the last with that loop); DeepSeek 0.5.13+ uses ascending ids as
        # given unless the first is 1 (then +1): residual:1 is out too
        ("DeepseekV3ForCausalLM", "0.5.13", _residual(2, 3, 31), (2, 3, 31)),
        ("KimiK25ForConditionalGeneration", "0.5.12", _residual(1, 3, 31), (0, 2, 30)),
        ("LlamaForCausalLM", "0.5.23", _residual(1, 3, 31), (0, 2, 30)),
    ],
)
def test_no_sglang_ids_feed_the_embedding_and_the_nearest_is_named(arch, version, nearest, ids):
    from pytest_eagle_contract.engines.resolve import get_engine

    sglang, trained = get_engine("sglang"), _layers("embed", "residual:3", "residual:31")
    assert ids_for(sglang, trained, 61, arch, version) is None
    best = reachable(sglang, trained, 61, arch, version)[0]
    assert list(best.layers) == _layers(*nearest) and best.ids == ids


def test_ids_for_respects_sorting_dedup_and_the_layer_loop():
    from pytest_eagle_contract.engines.resolve import get_engine

    sglang, vllm = get_engine("sglang"), get_engine("vllm")
    llama = (61, "LlamaForCausalLM", "0.5.23")
    assert ids_for(sglang, _layers("residual:31", "residual:3", "residual:59"), *llama) is None
    assert ids_for(sglang, _layers("residual:3", "residual:3", "residual:59"), *llama) is None
    assert ids_for(vllm, _layers("residual:3", "residual:3", "residual:59"), 61, None, None) is None
    # residual:61 (pre-norm last layer) is past SGLang's generic loop; vLLM serves it
    assert ids_for(sglang, _layers("residual:2", "residual:30", "residual:61"), *llama) is None
    assert [str(x) for x in reachable(sglang, _layers("final_norm"), *llama)[0].layers] == [
        "residual:60"
    ]
    assert ids_for(vllm, _layers("residual:2", "residual:30", "final_norm"), 61, None, None) is None


@pytest.mark.parametrize(
    ("engine", "arch", "version"),
    [
        ("sglang", "LlamaForCausalLM", "0.5.23"),
        ("sglang", "DeepseekV3ForCausalLM", "0.5.14"),
        ("sglang", "DeepseekV3ForCausalLM", "0.5.9"),
        ("sglang", "GptOssForCausalLM", "0.5.23"),
        ("sglang", "Qwen3MoeForCausalLM", "0.5.23"),
        ("vllm", None, None),
    ],
)
def test_ids_for_inverts_resolve(engine, arch, version):
    from pytest_eagle_contract.engines.base import Engine
    from pytest_eagle_contract.engines.resolve import get_engine
    from pytest_eagle_contract.errors import Unservable

    side: Engine = get_engine(engine)
    id_lists = [(1, 2, 3), (1, 10, 20), (2, 16, 29), (5, 6, 30), (0, 15, 31), (3, 17, 32)]
    for _, served in served_triples(side, 32, arch, version, id_lists, Unservable):
        found = ids_for(side, served, 32, arch, version)
        assert found is not None and side.resolve(32, found, arch, version).layers == served


def test_config_line_is_the_key_each_engine_reads():
    from pytest_eagle_contract.engines.resolve import get_engine

    assert get_engine("sglang").config_line([2, 3, 31]) == (
        '"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 3, 31]}'
    )
    assert get_engine("vllm").config_line((0, 3, 31)) == (
        '"eagle_aux_hidden_state_layer_ids": [0, 3, 31]'
    )


def test_the_clis_engine_names_are_the_engines():
    """`--engine`'s choices come from a list that loads no engine (engines/names.py)."""
    from pytest_eagle_contract.engines.names import ENGINE_NAMES
    from pytest_eagle_contract.engines.resolve import ENGINES

    assert ENGINE_NAMES == tuple(ENGINES)
