"""Capture from outside: `eagle-contract record` / `check --captures` and the plugin options,
against the SGLang stand-in (tests/sglang_standin.py; the real engine runs in
tests/live/test_sglang_live.py)."""

from __future__ import annotations

import shutil
import socket

import pytest
from capture_sets import check_captures, write_demo_sets
from sglang_standin import Launch, SGLangStandin

from pytest_eagle_contract.capture import sglang_client
from pytest_eagle_contract.shells.demo import shipped_contract


@pytest.fixture(autouse=True)
def _no_flush_permission_left():
    yield
    sglang_client._FLUSH.clear()  # pytester runs in this process


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("capture-cli")
    write_demo_sets(root)
    return root


@pytest.fixture(scope="module")
def captures(sets):
    from conftest import run_cli

    with SGLangStandin(Launch(mode="aux", layer_ids=[1, 3, 4])) as url:
        res = run_cli(
            "record",
            shipped_contract(),
            sets / "good",
            "--sglang-url",
            url,
            "-o",
            sets / "captures",
        )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "recorded 3 capture file(s)" in res.stdout
    return sets / "captures"


@pytest.mark.slow
def test_check_against_capture_files(sets, captures):
    good = check_captures(sets / "good", captures)
    assert good.returncode == 0, good.stdout
    assert "ok: 3 checks on 3 shard(s)" in good.stdout
    bad = check_captures(sets / "shifted", captures)
    assert bad.returncode == 1
    assert "EC701 capture-mismatch" in bad.stdout
    assert "slot 1 equals server position 2 = residual:5" in bad.stdout


def test_record_from_a_server_that_is_down(sets, cli, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = cli(
        "record",
        shipped_contract(),
        sets / "good",
        "--sglang-url",
        f"http://127.0.0.1:{port}",
        "-o",
        tmp_path / "c",
        "--timeout",
        "2",
    )
    # 69 (engine unreachable), not 1 (findings): nothing was recorded, the data not judged
    assert res.returncode == 69 and "EC705" in res.stderr and "cannot be reached" in res.stderr
    assert "Traceback" not in res.stderr


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.slow
def test_check_against_a_server_that_is_down(sets, cli):
    """Not one shard compared: 69, whichever families ran beside the capture (on good
    shards they find nothing); a shard set with findings of its own exits 1 for them."""
    url = _dead_url()
    for extra in (("--checks", "capture"), ("--no-sharpness",)):
        args = ("check", shipped_contract(), sets / "good", "--sample", "all", *extra)
        res = cli(*args, "--sglang-url", url, "--sglang-timeout", "2")
        assert res.returncode == 69, res.stdout + res.stderr
        assert "EC705 server-unreachable" in res.stdout and "Traceback" not in res.stderr
    shifted = cli(
        "check", shipped_contract(), sets / "shifted", "--sample", "all", "--no-sharpness",
        "--sglang-url", url, "--sglang-timeout", "2",
    )  # fmt: skip
    assert shifted.returncode == 1 and "EC705" in shifted.stdout


def test_plugin_items_and_fixture_from_recorded_files(pytester, sets, captures):
    shutil.copytree(sets / "shifted", pytester.path / "shifted")
    (pytester.path / "contracts").mkdir()
    text = shipped_contract().read_text().replace("../eagle-demo/good", str(sets / "good"))
    (pytester.path / "contracts" / "demo.yaml").write_text(text)
    pytester.makepyfile(
        test_fc="""
        import torch

        def test_fc_input_is_what_the_server_feeds(eagle_shard, eagle_capture):
            a, b = eagle_shard.fc_input.float(), eagle_capture.float()
            assert a.shape == b.shape
            assert ((a - b).norm() / b.norm()) < 0.03
    """
    )
    args = ("--eagle-captures", str(captures), "--eagle-sample", "all")
    ok = pytester.runpytest("--eagle-contract", "contracts/demo.yaml", *args, "-k", "capture")
    ok.assert_outcomes(passed=3)
    bad = pytester.runpytest(
        "--eagle-contract",
        "contracts/demo.yaml",
        *args,
        "-k",
        "capture",
        "--eagle-shards",
        str(pytester.path / "shifted"),
    )
    bad.assert_outcomes(failed=3)
    bad.stdout.fnmatch_lines(["*EC701 capture-mismatch*"])
    fixture = pytester.runpytest("test_fc.py", *args)
    fixture.assert_outcomes(passed=3)
    skipped = pytester.runpytest("test_fc.py", "-rs")
    skipped.assert_outcomes(skipped=3)
    skipped.stdout.fnmatch_lines(["*eagle_capture: *"])


@pytest.mark.slow
def test_second_run_against_a_caching_server(sets, cli, tmp_path, pytester):
    """A server that caches prefixes and ignores the request's extra_key (SGLang < 0.5.3):
    the second run of the same shards is EC703 naming the option, green with it."""
    standin = SGLangStandin(
        Launch(mode="aux", layer_ids=[1, 3, 4], version="0.5.2", disable_radix_cache=False)
    )
    check = ("check", shipped_contract(), sets / "good", "--checks", "capture", "--sample", "all")
    with standin as url:
        first = cli(
            "record", shipped_contract(), sets / "good", "--sglang-url", url, "-o", tmp_path / "c"
        )
        assert first.returncode == 0, first.stdout + first.stderr
        again = cli(*check, "--sglang-url", url, "-v")  # the hint whole, on its line
        assert again.returncode == 1 and "EC703 capture-rows" in again.stdout
        assert "came from the prefix cache" in again.stdout
        assert "--sglang-flush-cache (pytest: --eagle-sglang-flush-cache)" in again.stdout
        assert standin.state.flushes == 0
        flushed = cli(*check, "--sglang-url", url, "--sglang-flush-cache")
        assert flushed.returncode == 0, flushed.stdout
        assert standin.state.flushes == 1  # the first shard found cached: all are flushed
        (pytester.path / "contracts").mkdir()
        text = shipped_contract().read_text().replace("../eagle-demo/good", str(sets / "good"))
        (pytester.path / "contracts" / "demo.yaml").write_text(text)
        gate = pytester.runpytest(
            "--eagle-contract",
            "contracts/demo.yaml",
            "-k",
            "capture",
            "--eagle-sample",
            "all",
            "--eagle-sglang-url",
            url,
            "--eagle-sglang-flush-cache",
        )
    gate.assert_outcomes(passed=3)
