"""Topology parity from outside: ``eagle-contract compare-captures REF PROD`` on capture files
of a tiny transformers model's real states, the production side broken the ways the field's
layouts broke (vllm#36731: a later pipeline stage numbering its layers from 0; vllm#45985:
states of earlier stages dropped; context-parallel rows out of order)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch
from conftest import no_traceback, run_cli

from pytest_eagle_contract.capture.files import CaptureMeta, write_capture
from pytest_eagle_contract.capture.topology import pp_stages
from pytest_eagle_contract.layers import Layer
from pytest_eagle_contract.models.reference import capture_canonical
from pytest_eagle_contract.models.tiny import tiny_target
from pytest_eagle_contract.shells.demo import SPEC

IDS = (2, 4, 5)  # vLLM ids = residual:k; L = 8, so pp 2 splits the layers 0-3 | 4-7
Prod = Callable[[dict[Layer, torch.Tensor]], list[torch.Tensor]]


@pytest.fixture(scope="module")
def prompts():
    model = tiny_target(SPEC)
    gen = torch.Generator().manual_seed(7)
    out = []
    for n in (24, 40):
        ids = torch.randint(0, SPEC.vocab_size, (n,), generator=gen)
        out.append((ids, capture_canonical(model, ids)))
    return out


def _write(folder: Path, ids: torch.Tensor, states: Sequence[torch.Tensor]) -> Path:
    aux = torch.cat([s.to(torch.bfloat16) for s in states], dim=-1)
    meta = CaptureMeta(
        engine="vllm",
        layer_ids=IDS,
        layers=tuple(Layer(k) for k in IDS),
        hidden_size=SPEC.hidden_size,
        n_aux=len(states),
    )
    return write_capture(folder, ids, aux, meta)


def _sets(root: Path, prompts, prod: Prod, ids_of=lambda ids: ids) -> tuple[Path, Path]:
    for ids, states in prompts:
        _write(root / "ref", ids, [states[Layer(k)] for k in IDS])
        _write(root / "prod", ids_of(ids), prod(states))
    return root / "ref", root / "prod"


def _compare(ref: Path, prod: Path, *extra: object):
    res = run_cli("compare-captures", ref, prod, *extra)
    no_traceback(res)
    return res


def test_vllm_pp_stages_are_split_as_vllm_splits_them():
    # get_pp_indices (vllm/distributed/utils.py): the remainder on the stages before the last
    assert [list(r) for r in pp_stages(8, 2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [(r.start, r.stop) for r in pp_stages(10, 4)] == [(0, 2), (2, 5), (5, 8), (8, 10)]
    assert [(r.start, r.stop) for r in pp_stages(8, 3, (2, 2, 4))] == [(0, 2), (2, 4), (4, 8)]


@pytest.mark.slow
def test_the_same_states_on_both_layouts_pass(tmp_path, prompts):
    ref, prod = _sets(tmp_path, prompts, lambda s: [s[Layer(k)] for k in IDS])
    res = _compare(ref, prod)
    assert res.returncode == 0, res.stdout
    assert "ok: 2 prompt(s) compared row by row (rtol 0.03)" in res.stdout


@pytest.mark.slow
def test_a_later_stage_numbering_its_layers_from_zero_is_ec708_at_the_boundary(tmp_path, prompts):
    """vllm#36731 with pp 2 (stages 0-3, 4-7): stage 1 numbers its layers from 0, so its
    local index j matches id j: it captures layer 4 + 2 = 6 for id 2, and ids 4 and 5 are
    never matched. Here the production side feeds residual:6 where residual:4 belongs."""
    ref, prod = _sets(tmp_path, prompts, lambda s: [s[Layer(2)], s[Layer(6)], s[Layer(5)]])
    res = _compare(ref, prod, "--num-layers", 8, "--pp-size", 2)
    assert res.returncode == 1, res.stdout
    out = res.stdout
    assert (
        "EC708 topology-mismatch: position 1 (residual:4) differs from the reference "
        "at 40 of 40 tokens" in out
    )
    assert "also in: 1 other shard(s)" in out  # the 24-token prompt, the same finding
    assert "slot 1" in out and "first at token 0" in out
    assert "layer 4 is on pipeline stage 1 of 2 (layers 4-7), past a stage boundary" in out
    assert "captures layers [6] there instead" in out
    assert "position 0" not in out and "position 2" not in out
    assert "FAILED: 2 prompt(s) compared" in out


@pytest.mark.slow
def test_a_dropped_stage_state_is_ec709_naming_it(tmp_path, prompts):
    """vllm#45985: the states captured before the last stage never reach the draft."""
    ref, prod = _sets(tmp_path, prompts, lambda s: [s[Layer(4)], s[Layer(5)]])
    res = _compare(ref, prod, "--num-layers", 8, "--pp-size", 2, "--json")
    assert res.returncode == 1
    data = json.loads(res.stdout)
    assert data["pairs"] == 2 and {f["code"] for f in data["findings"]} == {"EC709"}
    found = data["findings"][0]["found"]
    assert "2 states, equal to reference positions [1, 2]; missing 0 (residual:2)" in found
    assert "layer 2 is on the first pipeline stage" in data["findings"][0]["hint"]


def _halves(s: dict[Layer, torch.Tensor]) -> list[torch.Tensor]:
    """Context parallel: two ranks' halves of the sequence put back swapped."""
    return [torch.cat([x[len(x) // 2 :], x[: len(x) // 2]]) for x in (s[Layer(k)] for k in IDS)]


def _late(s: dict[Layer, torch.Tensor]) -> list[torch.Tensor]:
    out = [s[Layer(k)].clone() for k in IDS]
    out[2][16:] *= 1.5  # from token 16 on: another chunk computed differently
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("prod", "expected"),
    [
        pytest.param(
            lambda s: [s[Layer(2)], s[Layer(5)], s[Layer(4)]],
            [
                "position 1 of the production capture is the reference's position 2",
                "position 2 of the production capture is the reference's position 1",
            ],
            id="states-in-another-order-name-the-position-they-are",
        ),
        pytest.param(
            _halves,
            [
                "EC711 token-order: position 0: the production rows are the reference's",
                "first production row -> reference row: 0 -> 20, 1 -> 21",
            ],
            id="rows-out-of-token-order-are-ec711",
        ),
        pytest.param(
            _late,
            [
                "position 2 (residual:5) differs from the reference at 24 of 40 tokens",
                "diverging tokens: 16-39 of 40",
                "diverge from token 16 on",
            ],
            id="rows-diverging-from-a-token-on-name-the-span",
        ),
    ],
)
def test_a_production_side_out_of_place_is_named(tmp_path, prompts, prod: Prod, expected):
    ref, prod_set = _sets(tmp_path, prompts, prod)
    res = _compare(ref, prod_set, "-v")  # every finding in full (the default: one per code)
    assert res.returncode == 1
    for words in expected:
        assert words in res.stdout, res.stdout


@pytest.mark.slow
def test_prompts_on_one_side_only_and_ids_reordered(tmp_path, prompts):
    ref, prod = _sets(
        tmp_path, prompts, lambda s: [s[Layer(k)] for k in IDS], ids_of=lambda ids: ids.flip(0)
    )
    res = _compare(ref, prod)
    assert res.returncode == 1
    assert "EC711 token-order: the production capture holds the reference's tokens" in res.stdout
    extra = tmp_path / "more"
    _write(extra, torch.arange(5), [torch.ones(5, 64)] * 3)
    alone = _compare(ref, extra)
    assert alone.returncode == 1  # nothing compared is no verdict
    assert "warning: EC710 topology-unpaired" in alone.stdout
    assert "FAILED: 0 prompt(s) compared" in alone.stdout


def test_bad_arguments_exit_2(tmp_path):
    (tmp_path / "a").mkdir()
    for extra in (
        ("--rtol", "0"),
        ("--pp-size", "0"),
        ("--num-layers", "8", "--pp-partition", "3,3"),
    ):
        res = _compare(tmp_path / "a", tmp_path / "a", *extra)
        assert res.returncode == 2, (extra, res.stderr)
    gone = _compare(tmp_path / "nope", tmp_path / "a")
    assert gone.returncode == 2 and "does not exist" in gone.stderr


@pytest.mark.slow
def test_hostile_capture_files_on_either_side_are_ec707(tmp_path, prompts):
    """test_hostile_captures' every broken capture file, as the production set (and as the
    reference): each is EC707, the valid pair is still compared, nothing raises."""
    import test_hostile_captures as hcap

    ids, states = prompts[0]
    valid = _write(tmp_path / "ref", ids, [states[Layer(k)] for k in IDS])
    world = {
        "bytes": valid.read_bytes(),
        "aux": torch.cat([states[Layer(k)].to(torch.bfloat16) for k in IDS], dim=-1),
        "ids": ids,
        "meta": json.loads(CaptureMeta.from_json(hcap._meta_of(valid)).to_json()),
    }
    bad = tmp_path / "bad"
    bad.mkdir()
    cases = hcap._cases(world)
    for name, case in cases.items():
        hcap._write_case(world, bad, name.replace("/", "_"), case)
    (bad / "valid.safetensors").write_bytes(valid.read_bytes())
    for ref, prod in ((tmp_path / "ref", bad), (bad, tmp_path / "ref")):
        res = _compare(ref, prod, "--json")
        assert res.returncode == 1, res.stderr
        data = json.loads(res.stdout)
        assert data["pairs"] == 1  # the valid pair
        codes = [f["code"] for f in data["findings"]]
        # nearly all are EC707; the few the reader tolerates (metadata it ignores, other
        # ids that hash right) are compared or unpaired like any capture
        assert set(codes) <= {"EC707", "EC708", "EC710", "EC711"}, codes
        assert codes.count("EC707") >= len(cases) - 3, codes
