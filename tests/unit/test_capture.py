"""Live capture from a server speaking SGLang's wire format, capture files, offline checks.

The server is ``tests/sglang_standin.py``: a stand-in, not SGLang (tests/live/test_sglang_live.py
runs the same path against the real engine, on CPU).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
import torch
from capture_sets import write_demo_sets
from sglang_standin import Launch, SGLangStandin

from pytest_eagle_contract.capture import sglang_client, transport
from pytest_eagle_contract.capture.compare import verify_against_capture, verify_live
from pytest_eagle_contract.capture.files import (
    CaptureMeta,
    load_captures,
    read_capture,
    write_capture,
)
from pytest_eagle_contract.capture.fixture import aux_for_shard
from pytest_eagle_contract.capture.record import record
from pytest_eagle_contract.capture.sglang_client import capture, server_info, use_server
from pytest_eagle_contract.contract.model import Contract, load_contract
from pytest_eagle_contract.errors import CaptureError, CaptureFileError, NoCapture
from pytest_eagle_contract.layers import Layer
from pytest_eagle_contract.shards.discovery import discover
from pytest_eagle_contract.shards.reading import read_sample
from pytest_eagle_contract.shards.shard import Shard
from pytest_eagle_contract.shells.demo import SPEC, shipped_contract

H, N_AUX = SPEC.hidden_size, 3


@pytest.fixture(autouse=True)
def _fresh_run():
    """Each test is its own run: no server remembered as down, no flush allowed."""
    yield
    transport._DOWN.clear()
    sglang_client._FLUSH.clear()


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("capture")
    demo = write_demo_sets(root)
    return {
        "good": demo.good,
        "embed-in-front": demo.embed_front,
        "shifted": demo.shifted,
        "root": root,
    }


@pytest.fixture(scope="module")
def contract() -> Contract:
    return load_contract(shipped_contract())


@pytest.fixture(scope="module")
def recorded(sets: dict[str, Path], contract: Contract) -> Path:
    out = sets["root"] / "captures"
    with SGLangStandin(Launch(mode="aux", layer_ids=[1, 3, 4])) as url:
        record(url, discover(sets["good"]), contract, out)
    return out


def _verify(contract: Contract, root: Path, captures: Path) -> dict[str, list]:
    index = load_captures(captures)
    out = {}
    for path in discover(root):
        shard = Shard.load(path, path.name, "specforge", H)
        out[path.name] = verify_against_capture(contract, shard, index)
    return out


def test_record_writes_one_small_capture_file_per_shard(sets, recorded):
    files = sorted(recorded.glob("*.safetensors"))
    assert len(files) == 3
    assert all(f.stat().st_size < 100_000 for f in files)  # small enough to commit
    first = read_capture(files[0])
    assert first.aux.dtype == torch.bfloat16
    assert first.aux.shape == (first.input_ids.shape[0], N_AUX * H)
    meta = first.meta
    assert (meta.engine, meta.version, meta.arch, meta.mode) == (
        "sglang",
        "0.5.23",
        "LlamaForCausalLM",
        "aux",
    )
    assert meta.layer_ids == (1, 3, 4)
    assert meta.layers == (Layer(2), Layer(4), Layer(5))
    assert (meta.dtype, meta.hidden_size, meta.n_aux) == ("bfloat16", H, N_AUX)


def test_good_set_matches_the_server(contract, sets, recorded):
    assert _verify(contract, sets["good"], recorded) == {p.name: [] for p in discover(sets["good"])}


def test_shifted_set_fails_naming_the_real_server_position(contract, sets, recorded):
    for name, findings in _verify(contract, sets["shifted"], recorded).items():
        assert {f.code for f in findings} == {"EC701"}, name
        by_slot = {f.slot: f for f in findings}
        assert set(by_slot) == {0, 1, 2}
        assert by_slot[1].extra["equals"] == 2
        assert "equals server position 2 = residual:5" in by_slot[1].found
        assert by_slot[0].extra["equals"] is None and by_slot[2].extra["equals"] is None
        assert "equals no server position" in by_slot[0].found
        assert by_slot[1].line == contract.line_of("training.fc_input")
        assert "server 2 (residual:5)" in by_slot[0].details  # the table, once per shard
        assert by_slot[1].details == ""


def test_embedding_in_front_is_named(contract, sets, recorded):
    for findings in _verify(contract, sets["embed-in-front"], recorded).values():
        equals = {f.slot: f.extra["equals"] for f in findings}
        assert equals == {0: None, 1: 0, 2: 1}  # slot 1 is the server's position 0


def test_eagle3_target_returns_the_same_states(contract, sets, recorded):
    path = discover(sets["good"])[0]
    ids = read_sample(path, "specforge").input_ids
    with SGLangStandin(Launch(mode="eagle3", layer_ids=[1, 3, 4])) as url:
        assert server_info(url).mode == "eagle3"
        live = capture(url, ids.tolist(), N_AUX, H)
    assert torch.equal(live, load_captures(recorded).find(ids).aux)


def test_default_ids_without_layer_ids(contract, sets, recorded):
    with SGLangStandin(Launch(mode="aux", layer_ids=None)) as url:
        out = record(url, discover(sets["good"])[:1], contract, sets["root"] / "default")
    meta = read_capture(out[0]).meta  # the model's default [2, L//2, L-3], no +1
    assert meta.layer_ids is None and meta.layers == (Layer(2), Layer(4), Layer(5))


def _ids(sets: dict[str, Path]) -> list[int]:
    ids = read_sample(discover(sets["good"])[0], "specforge").input_ids
    assert ids is not None
    return [int(i) for i in ids.tolist()]


def test_server_returning_the_post_norm_last_layer_fails(sets):
    with SGLangStandin(Launch(mode="last-layer")) as url, pytest.raises(CaptureError) as exc:
        capture(url, _ids(sets), N_AUX, H)
    assert exc.value.code == "EC702"
    assert "post-norm" in exc.value.message and "--enable-return-aux-hidden-states" in str(
        exc.value
    )


def test_server_without_hidden_state_return_fails(sets):
    with SGLangStandin(Launch(mode="off")) as url, pytest.raises(CaptureError) as exc:
        capture(url, _ids(sets), N_AUX, H)
    assert exc.value.code == "EC702"
    assert "not configured to return hidden states" in exc.value.message


def test_wrong_width_fails(sets):
    with (
        SGLangStandin(Launch(mode="aux", layer_ids=[1, 2, 3, 4])) as url,
        pytest.raises(CaptureError) as exc,
    ):
        capture(url, _ids(sets), N_AUX, H)
    assert exc.value.code == "EC704"
    assert "4 states of 64" in exc.value.message


def test_server_down_fails_clearly():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(CaptureError) as exc:
        capture(f"http://127.0.0.1:{port}", [1, 2, 3], N_AUX, H, timeout=5)
    assert exc.value.code == "EC705"
    assert f"127.0.0.1:{port}" in exc.value.message


def test_prefix_cache_hit_gives_fewer_rows(sets):
    ids = _ids(sets)  # 0.5.2 ignores the request's extra_key: the cache answers
    with SGLangStandin(
        Launch(mode="aux", layer_ids=[1, 3, 4], version="0.5.2", disable_radix_cache=False)
    ) as url:
        capture(url, ids, N_AUX, H)
        with pytest.raises(CaptureError) as exc:
            capture(url, ids, N_AUX, H)  # the same prompt again: all but one token cached
    assert exc.value.code == "EC703"
    assert f"1 prefill rows for {len(ids)} input ids" in exc.value.message
    assert "--disable-radix-cache" in exc.value.hint
    assert "--sglang-flush-cache (pytest: --eagle-sglang-flush-cache)" in exc.value.hint


def test_a_caching_server_answers_in_full(sets):
    """0.5.3+ keys its radix cache by the request's extra_key: a fresh one misses."""
    ids = _ids(sets)
    standin = SGLangStandin(Launch(mode="aux", layer_ids=[1, 3, 4], disable_radix_cache=False))
    with standin as url:
        first, again = capture(url, ids, N_AUX, H), capture(url, ids, N_AUX, H)
    assert torch.equal(first, again)
    keys = [body["extra_key"] for body in standin.state.bodies]
    assert len(set(keys)) == 2 and standin.state.flushes == 0


def test_a_server_ignoring_the_key_is_flushed_when_allowed(sets):
    ids = _ids(sets)
    standin = SGLangStandin(
        Launch(mode="aux", layer_ids=[1, 3, 4], version="0.5.2", disable_radix_cache=False)
    )
    with standin as url:
        use_server(url, 60, flush_cache=True)
        first, again = capture(url, ids, N_AUX, H), capture(url, ids, N_AUX, H)
    assert torch.equal(first, again) and standin.state.flushes == 1


def test_a_busy_server_refuses_the_flush(sets):
    ids = _ids(sets)
    with SGLangStandin(
        Launch(
            mode="aux", layer_ids=[1, 3, 4], version="0.5.2", busy=True, disable_radix_cache=False
        )
    ) as url:
        use_server(url, 60, flush_cache=True)
        capture(url, ids, N_AUX, H)
        with pytest.raises(CaptureError) as exc:
            capture(url, ids, N_AUX, H)
    assert exc.value.code == "EC703"
    assert "flush was refused (HTTP 400: Flush cache failed." in exc.value.hint
    assert "--disable-radix-cache" in exc.value.hint


def test_missing_and_broken_captures(contract, sets, recorded, tmp_path):
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    index = load_captures([recorded, tmp_path])
    assert len(index) == 3 and len(index.problems) == 1 and "junk" in index.problems[0]
    empty = load_captures(tmp_path)
    shard = Shard.load(discover(sets["good"])[0], "data_0.ckpt", "specforge", H)
    (finding,) = verify_against_capture(contract, shard, empty)
    assert (finding.code, finding.severity) == ("EC706", "warning")
    with pytest.raises(CaptureFileError):
        load_captures(tmp_path / "nowhere")


def test_aux_for_shard_live_files_and_reason(contract, sets, recorded, tmp_path):
    path = discover(sets["good"])[0]
    from_files = aux_for_shard(contract, path, captures=recorded)
    with SGLangStandin(Launch(mode="aux", layer_ids=[1, 3, 4])) as url:
        live = aux_for_shard(contract, path, url=url)
    assert torch.equal(live, from_files)
    with pytest.raises(NoCapture, match="no capture source: pass --eagle-captures DIR"):
        aux_for_shard(contract, path)
    with pytest.raises(NoCapture, match="no capture of"):
        aux_for_shard(contract, path, captures=tmp_path)


SGLANG_PY = Path(os.environ.get("EAGLE_CONTRACT_SGLANG_PYTHON") or "/nonexistent")


@pytest.mark.skipif(
    not SGLANG_PY.is_file(),
    reason="no sglang 0.5.23 environment to check the request against "
    '(EAGLE_CONTRACT_SGLANG_PYTHON="$(python tests/sglang_cpu/setup_env.py)")',
)
def test_request_passes_sglangs_own_contract_gate(sets):
    """The body the client sends decodes with sglang.api.v1's GenerateRequest."""
    standin = SGLangStandin(Launch(mode="aux", layer_ids=[1, 3, 4]))
    with standin as url:
        capture(url, _ids(sets)[:5], N_AUX, H)
        assert standin._server is not None
        (body,) = standin._server.state.bodies
    code = """
import json, sys
from sglang.api.v1 import api_types as m
r = m.GenerateRequest.from_json_value(json.loads(sys.stdin.read()))
print(json.dumps([r.return_hidden_states, r.sampling_params.max_new_tokens, len(r.input_ids)]))
"""
    out = subprocess.run(
        [str(SGLANG_PY), "-c", code],
        input=json.dumps(body),
        text=True,
        capture_output=True,
        check=True,
        timeout=60,
    )
    assert json.loads(out.stdout) == [True, 1, 5]


def _good_shard(sets: dict[str, Path]) -> Shard:
    return Shard.load(discover(sets["good"])[0], "data_0.ckpt", "specforge", H)


def test_capture_with_another_number_of_states_fails_offline(contract, sets, tmp_path):
    shard = _good_shard(sets)
    ids = shard.sample.input_ids
    fc = torch.cat([shard.slots[i].tensor for i in (0, 1, 2, 2)], dim=-1)  # 4 states
    write_capture(tmp_path, ids, fc, CaptureMeta(layer_ids=(1, 3, 4, 5)))
    found = verify_against_capture(contract, shard, load_captures(tmp_path))
    assert [f.code for f in found] == ["EC704"]
    assert "4 states of H=64" in found[0].message


def test_tampered_capture_file_is_ec707(contract, sets, recorded, tmp_path):
    from safetensors import safe_open
    from safetensors.torch import save_file

    shard = _good_shard(sets)
    original = load_captures(recorded).find(shard.sample.input_ids)
    with safe_open(str(original.path), framework="pt") as f:
        metadata = f.metadata()
    ids = original.input_ids.clone()
    ids[0] += 1
    save_file(
        {"aux_hidden_states": original.aux, "input_ids": ids},
        str(tmp_path / original.path.name),
        metadata=metadata,
    )
    (finding,) = verify_against_capture(contract, shard, load_captures(tmp_path))
    assert finding.code == "EC707" and "ids_sha256" in finding.message


def test_verify_live(contract, sets):
    good, shifted = (
        _good_shard(sets),
        Shard.load(discover(sets["shifted"])[0], "data_0.ckpt", "specforge", H),
    )
    with SGLangStandin(Launch(mode="aux", layer_ids=[1, 3, 4])) as url:
        assert verify_live(contract, good, url) == []
        found = verify_live(contract, shifted, url)
    assert {f.slot: f.extra["equals"] for f in found} == {0: None, 1: 2, 2: None}
    assert f"live from {url}" in found[0].details
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (down,) = verify_live(contract, good, f"http://127.0.0.1:{port}", timeout=5)
    assert down.code == "EC705" and down.line == contract.line_of("serving")
