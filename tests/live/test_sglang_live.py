"""The capture path against a REAL SGLang 0.5.23 server (CPU engine, aux-capture mode).

The stand-in (tests/sglang_standin.py) models SGLang's wire format and its traps from the
source; these tests run the engine itself, so a release that behaves otherwise than its code
as read fails here. The server is tests/sglang_server.py; its environment comes from
tests/sglang_cpu/setup_env.py (.ci/run's live step makes it; elsewhere these tests skip and
name the command). Two launches per run, each a minute or two: the prefix cache on, and the
same server restarted with chunked prefill.

Each behaviour the stand-in models is asked of the real server in the same words: prompt
rows bit for bit equal to transformers' hidden states at the resolved layers, the prefix
cache (rows only for what was prefilled, ``cached_tokens``, ``extra_key`` honoured,
``/flush_cache``), concurrent requests, a server gone mid-run and back, chunked prefill.
"""

from __future__ import annotations

import concurrent.futures
import shutil
import urllib.request
from pathlib import Path

import pytest
import torch
from capture_sets import DemoSets, check_captures, write_demo_sets
from conftest import run_cli
from sglang_server import RealSGLang, generate, sglang_python

from pytest_eagle_contract.capture import sglang_client, transport
from pytest_eagle_contract.capture.files import load_captures
from pytest_eagle_contract.capture.sglang_client import capture, server_info, use_server
from pytest_eagle_contract.errors import CaptureError
from pytest_eagle_contract.layers import Layer
from pytest_eagle_contract.models.reference import capture_canonical
from pytest_eagle_contract.shells.demo import SPEC, shipped_contract

pytestmark = [pytest.mark.slow]
H, N_AUX = SPEC.hidden_size, 3
IDS = ["--return-aux-hidden-state-layer-ids", "1", "3", "4"]  # the demo draft's ids
AUX = ["--speculative-algorithm", "EAGLE3", "--enable-return-aux-hidden-states", *IDS]
SERVED = [Layer(2), Layer(4), Layer(5)]  # Llama: id + 1, HF's hidden_states[id + 1]


@pytest.fixture(autouse=True)
def _fresh_run():
    yield
    transport._DOWN.clear()
    sglang_client._FLUSH.clear()


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> DemoSets:
    return write_demo_sets(tmp_path_factory.mktemp("sglang-live"))


@pytest.fixture(scope="module")
def target(sets: DemoSets, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's tiny Llama, saved as a user's model folder."""
    folder = tmp_path_factory.mktemp("target")
    sets.model.save_pretrained(folder, safe_serialization=True)
    return folder


@pytest.fixture(scope="module")
def server(target: Path, tmp_path_factory: pytest.TempPathFactory):
    """One real server for the module, prefix cache on (SGLang's default), no chunking."""
    python = sglang_python()
    log = tmp_path_factory.mktemp("sglang-log") / "server.log"
    real = RealSGLang(python, target, [*AUX, "--chunked-prefill-size", "-1"], log)
    real.start()
    yield real
    real.stop()


def _ids(sets: DemoSets, i: int = 0) -> list[int]:
    ids = sets.samples[i].input_ids
    assert ids is not None
    return [int(x) for x in ids]


def _reference(sets: DemoSets, i: int = 0) -> torch.Tensor:
    states = capture_canonical(sets.model, sets.samples[i].input_ids)
    return torch.cat([states[layer] for layer in SERVED], dim=-1)


def test_server_describes_itself_as_the_client_reads_it(server: RealSGLang) -> None:
    info = server_info(server.url)
    assert (info.version, info.arch, info.mode) == ("0.5.23", "LlamaForCausalLM", "aux")
    assert info.layer_ids == (1, 3, 4)
    assert info.args["disable_radix_cache"] is False


def test_prompt_rows_are_transformers_states_bit_for_bit(
    server: RealSGLang, sets: DemoSets
) -> None:
    got = capture(server.url, _ids(sets), N_AUX, H)
    assert got.dtype == torch.float32  # float32 served: rows are not narrowed
    assert torch.equal(got, _reference(sets))


def test_record_then_check_offline(server: RealSGLang, sets: DemoSets, tmp_path: Path) -> None:
    out = tmp_path / "captures"
    rec = run_cli("record", shipped_contract(), sets.good, "--sglang-url", server.url, "-o", out)
    assert rec.returncode == 0, rec.stdout + rec.stderr
    assert "recorded 3 capture file(s)" in rec.stdout
    assert len(load_captures(out)) == 3
    good = check_captures(sets.good, out)
    assert good.returncode == 0 and "ok: 3 checks on 3 shard(s)" in good.stdout, good.stdout
    shifted = check_captures(sets.shifted, out)
    assert shifted.returncode == 1 and "EC701 capture-mismatch" in shifted.stdout
    assert "slot 1 equals server position 2 = residual:5" in shifted.stdout
    front = check_captures(sets.embed_front, out)
    assert front.returncode == 1 and "EC701 capture-mismatch" in front.stdout


def test_live_check_twice_with_the_prefix_cache_on(server: RealSGLang, sets: DemoSets) -> None:
    """0.5.23 keys its radix cache by the request's extra_key: the second run of the same
    shards is answered in full, with no flush."""
    args = ("--checks", "capture", "--sample", "all", "--sglang-url", server.url)
    for _ in range(2):
        res = run_cli("check", shipped_contract(), sets.good, *args)
        assert res.returncode == 0 and "ok: 3 checks on 3 shard(s)" in res.stdout, res.stdout
    bad = run_cli("check", shipped_contract(), sets.shifted, *args)
    assert bad.returncode == 1 and "EC701 capture-mismatch" in bad.stdout


def test_prefix_cache_as_the_stand_in_models_it(server: RealSGLang, sets: DemoSets) -> None:
    """Without an extra_key a repeated prompt is served from the cache: rows only for the
    prefilled tokens (the last one is always recomputed) and ``cached_tokens`` says how
    many came from the cache; a fresh extra_key misses; /flush_cache empties it. Found on the
    real server as the stand-in has it, but for one thing: the recomputed last row attends
    over cached keys and values and is equal to the full prefill's only to rounding."""
    ids = _ids(sets, 1)
    full = _reference(sets, 1)
    first = generate(server.url, ids)
    again = generate(server.url, ids)
    keyed = generate(server.url, ids, extra_key="eagle-contract-live-test")
    rows = [a["meta_info"]["hidden_states"][0] for a in (first, again, keyed)]  # type: ignore[index]
    cached = [a["meta_info"]["cached_tokens"] for a in (first, again, keyed)]  # type: ignore[index]
    assert len(rows[0]) == len(ids) and cached[0] in (0, len(ids) - 1)
    assert cached[1] == len(ids) - 1 and len(rows[1]) == 1
    # the last row, computed over the cached keys and values: the same state to rounding
    torch.testing.assert_close(torch.tensor(rows[1]), full[-1:], rtol=1e-4, atol=1e-5)
    assert cached[2] == 0 and torch.equal(torch.tensor(rows[2]), full)
    with urllib.request.urlopen(
        urllib.request.Request(f"{server.url}/flush_cache?timeout=10", data=b"", method="POST"),
        timeout=60,
    ) as r:
        assert r.status == 200 and b"flushed" in r.read().lower()
    after = generate(server.url, ids)
    assert after["meta_info"]["cached_tokens"] == 0  # type: ignore[index]


def test_the_client_flushes_when_allowed(server: RealSGLang, sets: DemoSets) -> None:
    use_server(server.url, 60, flush_cache=True)
    ids = _ids(sets, 2)
    generate(server.url, ids)  # warm the cache under no key, as an older client would
    assert torch.equal(capture(server.url, ids, N_AUX, H), _reference(sets, 2))


def test_concurrent_requests_each_get_their_own_rows(server: RealSGLang, sets: DemoSets) -> None:
    """SGLang batches concurrent requests into one forward; each answer is still its own
    sequence's rows, equal to the sequential capture."""
    work = [i % len(sets.samples) for i in range(6)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        got = list(pool.map(lambda i: capture(server.url, _ids(sets, i), N_AUX, H), work))
    for i, rows in zip(work, got):
        assert torch.equal(rows, _reference(sets, i))


def test_plugin_gate_against_the_live_server(
    server: RealSGLang, sets: DemoSets, pytester: pytest.Pytester
) -> None:
    shutil.copytree(sets.shifted, pytester.path / "shifted")
    (pytester.path / "contracts").mkdir()
    text = shipped_contract().read_text().replace("../eagle-demo/good", str(sets.good))
    (pytester.path / "contracts" / "demo.yaml").write_text(text)
    args = ("--eagle-contract", "contracts/demo.yaml", "-k", "capture", "--eagle-sample", "all")
    ok = pytester.runpytest(*args, "--eagle-sglang-url", server.url)
    ok.assert_outcomes(passed=3)
    bad = pytester.runpytest(
        *args, "--eagle-sglang-url", server.url, "--eagle-shards", str(pytester.path / "shifted")
    )
    bad.assert_outcomes(failed=3)
    bad.stdout.fnmatch_lines(["*EC701 capture-mismatch*"])


def test_server_gone_mid_run_and_restarted_with_chunked_prefill(
    server: RealSGLang, sets: DemoSets
) -> None:
    """Last in the module: the server stops between two requests of one run (EC705, no
    traceback, the rest of the run is not kept waiting), then comes back on the same port
    with the prefix cache off and a prefill chunk shorter than the shards: the real 0.5.23
    answers with the last chunk's rows only, which is EC703 with the chunked-prefill hint
    (as the stand-in and docs/verify-against-server.md have it)."""
    ids = _ids(sets)
    assert torch.equal(capture(server.url, ids, N_AUX, H), _reference(sets))
    server.stop()
    with pytest.raises(CaptureError) as gone:
        capture(server.url, ids, N_AUX, H, timeout=10)
    assert gone.value.code == "EC705"
    check = ("check", shipped_contract(), sets.good, "--checks", "capture", "--sample", "all")
    down = run_cli(*check, "--sglang-url", server.url, "--sglang-timeout", "5")
    # every shard EC705, none compared: the engine unreachable (69), not findings (1)
    assert down.returncode == 69 and "EC705" in down.stdout and "Traceback" not in down.stderr
    chunk = max(4, len(ids) // 3)
    server.args = [*AUX, "--chunked-prefill-size", str(chunk), "--disable-radix-cache"]
    server.start()  # a new process on the same port: a new run finds it again
    transport._DOWN.clear()
    chunked = run_cli(*check, "--sglang-url", server.url)
    last = len(ids) % chunk or chunk  # 0.5.23 returns the last chunk's rows only
    assert chunked.returncode == 1 and "EC703 capture-rows" in chunked.stdout, chunked.stdout
    assert f"the server returned {last} prefill rows for {len(ids)} input ids" in chunked.stdout
    said = " ".join(chunked.stdout.split())  # the terminal view wraps its prose at 120 columns
    assert "raise --chunked-prefill-size above the longest shard, or -1" in said
    short = ids[: chunk - 1]  # one chunk: and with the prefix cache off, nothing is cached
    answers = [generate(server.url, short) for _ in range(2)]
    assert [a["meta_info"]["cached_tokens"] for a in answers] == [0, 0]  # type: ignore[index]
    assert all(len(a["meta_info"]["hidden_states"][0]) == len(short) for a in answers)  # type: ignore[index]
