"""The inverse of resolve: ``eagle-contract resolve --want``, and EC501's hint built on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serving_cases import resolve_json, served_triples

CONTRACTS = Path(__file__).parents[2] / "contracts"
KIMI = ("--arch", "KimiK25ForConditionalGeneration", "--num-layers", "61")


def want(cli, engine: str, *args: str, version: str | None = None):
    head = ["--engine", engine, *(("--version", version) if version else ())]
    return resolve_json(cli, *head, *args)


@pytest.mark.slow
def test_kimi_want_gives_ids_sglang_013_and_later_serve_as_the_trained_layers(tmp_path, cli):
    args = (*KIMI, "--want", "embed", "residual:3", "residual:31")
    res, out = want(cli, "sglang", *args, version=">=0.5.13")
    assert out["config_key"] == "eagle_config.eagle_aux_hidden_state_layer_ids"
    served = [s for s in out["spans"] if s["ids"] is not None]
    assert served, out["refused"]
    # the releases whose forward captures index 0 after prepare_attn (the embedding) serve
    # it, from 0.5.13 or 0.5.14 on, and one list does for all of them
    (span,) = served
    assert span["versions"][0] in ("0.5.13", "0.5.14") and span["versions"][-1] == "0.5.23"
    ids = span["ids"]
    since = span["versions"][0]
    res, out = want(cli, "sglang", *args, version=f">={since}")
    assert res.returncode == 0 and out["ids"] == ids and out["refused"] is None
    for version in (since, "0.5.23"):  # the engine's own forward rule agrees
        fwd = cli(
            "resolve", "--engine", "sglang", "--version", version, *KIMI, "--json",
            "--ids", *map(str, ids),
        )  # fmt: skip
        assert json.loads(fwd.stdout)["layers"] == ["embed", "residual:3", "residual:31"]
    # and a contract with those ids (and its target slot named right) passes the layout check
    text = (CONTRACTS / "kimi-k2.5-eagle3.yaml").read_text()
    text = text.replace("aux_layer_ids: [2, 30, 58]", f"aux_layer_ids: {ids}")
    text = text.replace('version: ">=0.5.13"', f'version: ">={since}"')
    text = text.replace("layer: residual:59,", "layer: residual:61,")
    path = tmp_path / "kimi-ids.yaml"
    path.write_text(text)
    check = cli("check", path, "--checks", "layout")
    assert check.returncode == 0, check.stdout


def test_kimi_ec501_hint_names_the_ids(cli):
    res = cli("check", CONTRACTS / "kimi-k2.5-eagle3.yaml", "--checks", "layout", "-v")
    assert res.returncode == 1
    hints = [line for line in res.stdout.splitlines() if "hint: SGLang" in line]
    pasted = '"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 3, 31]}'
    assert any(f"..0.5.23: set {pasted}" in hint for hint in hints), hints


def test_vllm_takes_id_zero_for_the_embedding_under_its_top_level_key(cli):
    res, out = want(
        cli, "vllm", "--num-layers", "61", "--want", "embed", "residual:3", "residual:31"
    )
    assert res.returncode == 0
    assert out["ids"] == [0, 3, 31] and out["refused"] is None
    assert out["config_key"] == "eagle_aux_hidden_state_layer_ids"
    assert out["config_line"] == '"eagle_aux_hidden_state_layer_ids": [0, 3, 31]'


def test_llama_on_sglang_cannot_feed_the_embedding_and_says_what_it_can(cli):
    args = (
        "--arch",
        "LlamaForCausalLM",
        "--num-layers",
        "61",
        "--want",
        "embed",
        "residual:3",
        "residual:31",
    )
    res, out = want(cli, "sglang", *args, version="0.5.23")
    assert res.returncode == 2
    assert out["ids"] is None and "no ids make it feed embed" in out["refused"]
    (span,) = out["spans"]
    assert span["nearest"] == {
        "ids": [0, 2, 30],
        "layers": ["residual:1", "residual:3", "residual:31"],
    }
    text = cli("resolve", "--engine", "sglang", "--version", "0.5.23", *args)
    assert text.returncode == 2
    assert "SGLang 0.5.23 on LlamaForCausalLM: no ids make it feed embed" in text.stdout
    assert "nearest it feeds: residual:1, residual:3, residual:31 with ids [0, 2, 30]" in (
        text.stdout
    )


def test_an_engine_that_sorts_cannot_feed_layers_out_of_order(cli):
    for engine in ("sglang", "vllm", "trtllm"):
        res, out = want(
            cli,
            engine,
            "--arch",
            "LlamaForCausalLM",
            "--num-layers",
            "61",
            "--want",
            "residual:31",
            "residual:3",
            "residual:59",
        )
        assert res.returncode == 2, engine
        assert "ascending order" in out["refused"], out
        assert out["spans"][0]["nearest"]["layers"] == ["residual:3", "residual:31", "residual:59"]


def test_tensorrt_llm_ids_go_to_its_launch_config_and_minus_one_is_the_final_state(cli):
    res, out = want(
        cli, "trtllm", "--num-layers", "61", "--want", "residual:2", "residual:30", "final_norm"
    )
    assert res.returncode == 0
    assert out["ids"] == [1, 29, -1]
    assert out["config_key"] == "speculative_config.eagle3_layers_to_capture"


def test_one_id_list_for_every_version_is_preferred_and_spans_collapse(cli):
    # 0.5.10..0.5.12 add 1 to every id; 0.5.13+ add 1 only when the first id is 1
    args = (*KIMI, "--want", "residual:2", "residual:30", "residual:58")
    _, out = want(cli, "sglang", *args, version=">=0.5.10")
    assert out["ids"] == [1, 29, 57]
    text = cli("resolve", "--engine", "sglang", "--version", ">=0.5.10", *args)
    assert text.returncode == 0
    assert text.stdout.splitlines()[0] == (
        "set eagle_config.eagle_aux_hidden_state_layer_ids to [1, 29, 57] (SGLang "
        "0.5.10..0.5.23 serves residual:2, residual:30, residual:58 on "
        "KimiK25ForConditionalGeneration)"
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--want", "residual:x"), "not a canonical layer"),
        (("--want", "residual:99"), "beyond the target's 61 layers"),
        (("--want", "embed", "--ids", "1", "2", "3"), "without --ids"),
        (("--want", *[f"residual:{k}" for k in range(1, 8)]), "want 1 to 6 layers"),
    ],
)
def test_bad_wants_are_usage_errors(cli, args, says):
    res = cli("resolve", "--engine", "vllm", "--num-layers", "61", *args)
    assert res.returncode == 2 and says in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_the_search_is_generic_over_an_engines_own_rule():
    """A made-up engine (id k feeds residual:k+2, in the order given, never the embedding)
    is inverted by trying ids through its resolve alone."""
    from pytest_eagle_contract.engines.base import Engine, Query, Resolution, positions
    from pytest_eagle_contract.engines.fixes import inverse
    from pytest_eagle_contract.errors import Unservable
    from pytest_eagle_contract.layers import Layer

    class PlusTwo(Engine):
        name, title = "plus-two", "PlusTwo"

        def _resolve(self, q: Query) -> Resolution:
            ids = list(q.ids or [1, 2, 3])
            if any(not 0 <= i <= q.num_layers - 2 for i in ids):
                raise Unservable(f"ids {ids} out of range")
            layers = [Layer(i + 2) for i in ids]
            return Resolution(
                self.name,
                q.version,
                q.arch,
                q.num_layers,
                tuple(ids),
                positions(ids, ids, layers),
                "made up",
            )

    engine, layers = PlusTwo(), [Layer(31), Layer(3)]
    assert inverse(engine, layers, 61, None, None).ids == (29, 1)  # it keeps the order
    no = inverse(engine, [Layer(0), Layer(3)], 61, None, None)
    assert no.ids is None and no.refused == "no ids make it feed embed"
    assert [str(x) for x in no.nearest.layers] == ["residual:2", "residual:3"]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "DeepseekV3ForCausalLM", "GptOssForCausalLM"])
def test_inverse_undoes_resolve_on_every_covered_engine_version(arch):
    """Whatever layers an engine version feeds for some ids, the search finds ids that make
    it feed exactly those layers (by that version's own rule, not a hand-written inverse)."""
    from pytest_eagle_contract.engines.fixes import ANY, inverse
    from pytest_eagle_contract.engines.matrix import covered, serving_engines
    from pytest_eagle_contract.errors import EagleContractError

    tried = 0
    for engine in serving_engines():
        for version in covered(engine):
            asked = None if version == ANY else version
            id_lists = [(1, 2, 3), (2, 30, 58), (1, 29, 57), (0, 3, 31), (5, 6, 60), (3, 31, -1)]
            for ids, served in served_triples(
                engine, 61, arch, asked, id_lists, EagleContractError
            ):
                found = inverse(engine, served, 61, arch, asked)
                assert found.ids is not None, (engine.name, version, ids, found.refused)
                assert engine.resolve(61, found.ids, arch, asked).layers == served
                tried += 1
    assert tried > 50


def test_want_searches_other_id_orders_where_the_rule_looks_at_the_first_id(cli):
    """SGLang DeepSeek/Kimi 0.5.14+: +1 only when the first id is 1. residual:1 first needs
    id 1 (which adds 1 to all) or id 0 + 1 (no +1 then): no ascending list reaches
    residual:1, 5, 9; [5, 1, 9] does (as given, captured in layer order)."""
    args = ("--arch", "deepseek_v3", "--num-layers", "61", "--source", "table")
    wanted = ["residual:1", "residual:5", "residual:9"]
    res, out = want(cli, "sglang", *args, "--want", *wanted, version="0.5.14")
    assert res.returncode == 0, res.stdout
    ids = out["ids"]
    assert ids is not None and ids != sorted(ids)
    fwd = cli("resolve", "--engine", "sglang", "--version", "0.5.14", *args, "--json",
              "--ids", *map(str, ids))  # fmt: skip
    assert json.loads(fwd.stdout)["layers"] == wanted
    text = cli("resolve", "--engine", "sglang", "--version", "0.5.14", *args, "--want", *wanted)
    assert "no ids in layer order reach them" in text.stdout
    # where the rule does not look at the first id (always +1 on 0.5.9), an ascending list
    # (exit 1: 0.5.9's CUDA-graph warning, EC514)
    res, out = want(cli, "sglang", *args, "--want", *wanted, version="0.5.9")
    assert res.returncode in (0, 1) and out["ids"] == sorted(out["ids"]) == [0, 4, 8]
