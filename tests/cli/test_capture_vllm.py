"""Captures from vLLM: the files an ``extract_hidden_states`` server writes (the stand-in
writer of tests/vllm_standin.py, byte-identical to vLLM's own: tests/release/test_vllm_writer.py),
turned into capture files by ``eagle-contract record --vllm-files`` and checked against
shards with ``check --captures`` (EC701 for a shifted set), driven from outside."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from capture_sets import check_captures, write_demo_sets
from conftest import no_traceback, run_cli
from vllm_standin import aux_list, write_vllm_file

from pytest_eagle_contract.capture.files import load_captures
from pytest_eagle_contract.models.tiny import tiny_target
from pytest_eagle_contract.shards.discovery import discover
from pytest_eagle_contract.shards.reading import read_sample
from pytest_eagle_contract.shells.demo import SPEC, shipped_contract

LAUNCH = [2, 4, 5, 8]  # speculators' launch_vllm.py default for L = 8: [2, L//2, L-3, L]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The demo's good shards, a set shifted by one layer, and vLLM's files of their ids."""
    root = tmp_path_factory.mktemp("vllm")
    demo = write_demo_sets(root)
    for i, sample in enumerate(demo.samples):
        ids, model = sample.input_ids, demo.model
        write_vllm_file(root / "vllm", f"cmpl-{i:04d}-0", ids, aux_list(model, ids, LAUNCH))
        shifted = aux_list(model, ids, [k + 1 for k in LAUNCH[:3]]) + aux_list(model, ids, [8])
        write_vllm_file(root / "vllm-shifted", f"cmpl-{i:04d}-0", ids, shifted)
    return root


def _record(root: Path, out: str, files: str, *extra: object):
    return run_cli(
        "record",
        shipped_contract(),
        "--vllm-files",
        root / files,
        "--layer-ids",
        *LAUNCH,
        "--fc-ids",
        2,
        4,
        5,
        "--vllm-version",
        "0.34.0",
        "-o",
        root / out,
        *extra,
    )


def _record_from_server(world: Path, tmp_path: Path, mode: str):
    """``record --vllm-url`` of the good set from the stand-in server in ``mode``, into
    ``tmp_path/caps``."""
    from vllm_standin import VllmServer

    with VllmServer(tiny_target(SPEC), LAUNCH, tmp_path / "storage", mode=mode) as url:
        return run_cli(
            "record",
            shipped_contract(),
            world / "good",
            "--vllm-url",
            url,
            *("--layer-ids", *LAUNCH, "--fc-ids", 2, 4, 5, "-o", tmp_path / "caps"),
        )


@pytest.mark.slow
def test_vllm_files_become_captures_that_gate_shards(world):
    res = _record(world, "captures", "vllm")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "recorded 3 capture file(s)" in res.stdout
    index = load_captures(world / "captures")
    assert len(index) == 3 and not index.problems
    cap = index.find(read_sample(next(iter(discover(world / "good"))), "specforge").input_ids)
    assert cap is not None
    assert (cap.meta.engine, cap.meta.mode, cap.meta.layer_ids) == (
        "vllm",
        "extract-hidden-states",
        (2, 4, 5),
    )
    assert [str(x) for x in cap.meta.layers or ()] == ["residual:2", "residual:4", "residual:5"]
    assert cap.aux.dtype == torch.bfloat16 and tuple(cap.aux.shape[1:]) == (3 * 64,)
    good = check_captures(world / "good", world / "captures")
    assert good.returncode == 0, good.stdout
    assert "ok: 3 checks on 3 shard(s)" in good.stdout
    bad = check_captures(world / "shifted", world / "captures")
    assert bad.returncode == 1, bad.stdout
    assert "EC701 capture-mismatch" in bad.stdout
    assert "slot 1 equals server position 2 = residual:5" in bad.stdout
    assert "vllm 0.34.0" in bad.stdout


@pytest.mark.slow
def test_a_shifted_vllm_capture_fails_ec701(world):
    """The server's side shifted by one layer (ids + 1): the good shards fail EC701."""
    res = _record(world, "captures-shifted", "vllm-shifted")
    assert res.returncode == 0, res.stdout + res.stderr
    bad = check_captures(world / "good", world / "captures-shifted")
    assert bad.returncode == 1, bad.stdout
    found = re.findall(r"EC701 capture-mismatch: fc position (\d)", bad.stdout)
    assert set(found) == {"0", "1", "2"}, bad.stdout
    assert "slot 2 equals server position 1" in bad.stdout  # residual:5 where it feeds 4


@pytest.mark.slow
def test_fc_ids_default_from_a_vllm_contract(world, tmp_path):
    """A contract served on vLLM without ids: vLLM's default (2, L//2, L-3) picks the states."""
    text = Path(shipped_contract()).read_text("utf-8")
    text = text.replace("engine: sglang", "engine: vllm")
    text = re.sub(r"\n  (aux_layer_ids|version): .*", "", text)
    text = text.replace("../eagle-demo/good", str(world / "good"))
    contract = tmp_path / "vllm.yaml"
    contract.write_text(text, "utf-8")
    args = ("--vllm-files", world / "vllm", "--layer-ids", *LAUNCH, "-o", tmp_path / "caps")
    res = run_cli("record", contract, *args)
    assert res.returncode == 0, res.stdout + res.stderr
    ok = run_cli("check", contract, "--captures", tmp_path / "caps", "--checks", "capture")
    assert ok.returncode == 0, ok.stdout


def test_usage_errors_say_what_is_missing(world, tmp_path):
    no_ids = run_cli(
        "record", shipped_contract(), "--vllm-files", world / "vllm", "-o", tmp_path / "a"
    )
    assert no_ids.returncode == 2 and "--layer-ids" in no_ids.stderr
    assert "2 4 5 8" in no_ids.stderr  # speculators' default for this L, offered
    no_fc = run_cli(
        "record",
        shipped_contract(),
        "--vllm-files",
        world / "vllm",
        "--layer-ids",
        *LAUNCH,
        "-o",
        tmp_path / "b",
    )
    assert no_fc.returncode == 2 and "--fc-ids" in no_fc.stderr and "sglang" in no_fc.stderr
    not_captured = _record(world, "c", "vllm", "--fc-ids", 1, 4, 5)
    assert not_captured.returncode == 2 and "missing [1]" in not_captured.stderr
    wrong_count = run_cli(
        "record",
        shipped_contract(),
        "--vllm-files",
        world / "vllm",
        "--layer-ids",
        2,
        4,
        5,
        "--fc-ids",
        2,
        4,
        5,
        "-o",
        tmp_path / "d",
    )
    assert wrong_count.returncode == 1 and "EC707" in wrong_count.stderr
    assert "4 states, and --layer-ids names 3" in wrong_count.stderr
    for res in (no_ids, no_fc, not_captured, wrong_count):
        no_traceback(res)


def test_record_refuses_to_write_into_the_files_it_reads(world):
    res = _record(world, "vllm", "vllm")
    assert res.returncode == 2, res.stdout + res.stderr
    no_traceback(res)


def test_json_of_a_vllm_capture_names_its_launch(world, tmp_path):
    res = _record(world, "json-caps", "vllm")
    assert res.returncode == 0, res.stderr
    meta = load_captures(world / "json-caps")
    paths = [p for ps in meta.by_key.values() for p in ps]
    from safetensors import safe_open

    with safe_open(str(paths[0]), framework="pt") as f:
        data = json.loads(f.metadata()["eagle_contract_capture"])
    assert data["source"] == "vllm-file" and data["shard"].startswith("cmpl-")
    assert "captured layer ids [2, 4, 5, 8]" in " ".join(data["notes"])


@pytest.mark.slow
def test_record_from_a_running_vllm(world, tmp_path):
    """--vllm-url: the stand-in server writes each shard's file; record reads and converts
    it; the captures gate the good set and fail the shifted one."""
    res = _record_from_server(world, tmp_path, "ok")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "recorded 3 capture file(s)" in res.stdout and "vLLM 0.34.0" in res.stdout
    cap = next(iter(load_captures(tmp_path / "caps").by_key.values()))[0]
    from pytest_eagle_contract.capture.files import read_capture

    meta = read_capture(cap).meta
    assert (meta.source, meta.version) == ("vllm-http", "0.34.0")
    assert meta.shard.startswith("data_")
    bad = run_cli("check", shipped_contract(), world / "shifted", "--captures", tmp_path / "caps")
    assert bad.returncode == 1 and "EC701 capture-mismatch" in bad.stdout


@pytest.mark.parametrize(
    ("mode", "code", "words"),
    [
        ("no-params", "EC702", "without kv_transfer_params.hidden_states_path"),
        ("other-ids", "EC705", "other prompt ids"),
        ("elsewhere", "EC705", "not on this machine"),
        ("garbage", "EC705", "not a vLLM hidden-state file"),
    ],
)
def test_a_vllm_that_cannot_answer_stops_record_with_the_code(world, tmp_path, mode, code, words):
    res = _record_from_server(world, tmp_path, mode)
    no_traceback(res)
    assert res.returncode == 1, res.stdout + res.stderr
    assert code in res.stderr and words in res.stderr, res.stderr
