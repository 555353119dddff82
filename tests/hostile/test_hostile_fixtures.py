"""Issue 22: the pytest fixtures meet hostile input the way the CLI does.

``eagle_capture`` asks a live SGLang for a shard's aux states; ``eagle_shard`` reads a
shard. Fed every bad answer of tests/hostile/test_hostile_http.py (by the SGLang stand-in of
tests/sglang_standin.py, not SGLang) or an unreadable shard, a user's test fails with
the coded reason in one line (an error at setup, as pytest reports a fixture that cannot
give its value): never a traceback into this package.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sglang_standin import Launch, SGLangStandin
from test_hostile_http import GENERATE, LOOP, Script

from pytest_eagle_contract.shells.demo import shipped_contract, write_demo_shards

USER_TEST = """
def test_fc_input_is_what_the_server_feeds(eagle_shard, eagle_capture):
    assert eagle_capture.shape[0] == eagle_shard.fc_input.shape[0]
"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("demo")
    write_demo_shards(root, shards=1)
    return root


def _project(pytester: pytest.Pytester) -> Path:
    """The demo contract and the user's test, the contract reading an empty
    ``shards/rows_0-2000`` (returned, for the caller to fill)."""
    shards = pytester.path / "shards" / "rows_0-2000"
    shards.mkdir(parents=True)
    (pytester.path / "contracts").mkdir()
    text = shipped_contract().read_text().replace("../eagle-demo/good", str(shards.parent))
    (pytester.path / "contracts" / "demo.yaml").write_text(text)
    pytester.makepyfile(test_fc=USER_TEST)
    return shards


def _output(result: pytest.RunResult) -> str:
    """The run's output, which holds no traceback into this package."""
    out = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out, out[-4000:]
    assert "pytest_eagle_contract/" not in out, out[-4000:]  # no frame of this package
    return out


@pytest.mark.slow
def test_eagle_capture_fails_each_bad_server_answer_with_its_code(
    demo: Path, pytester: pytest.Pytester
) -> None:
    shards = _project(pytester)
    first = demo / "good" / "rows_0-2000" / "data_0.ckpt"
    for i in range(len(GENERATE)):
        shutil.copyfile(first, shards / f"data_{i}.ckpt")
    script = Script({"/generate": [fault for fault, _ in GENERATE.values()]}, always=LOOP)
    with SGLangStandin(
        Launch(mode="aux", layer_ids=[1, 3, 4], fault=script, max_requests=200)
    ) as url:
        result = pytester.runpytest_subprocess(
            "-p",
            "no:cacheprovider",
            "test_fc.py",
            "--eagle-sglang-url",
            url,
            "--eagle-sglang-timeout",
            "20",
            "--eagle-sample",
            "all",
        )
    out = _output(result)
    failed = sum(code is not None for _, code in GENERATE.values())
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors", 0) + outcomes.get("error", 0) == failed, out[-4000:]
    assert outcomes.get("passed", 0) == len(GENERATE) - failed, out[-4000:]
    for code in {c for _, c in GENERATE.values() if c}:
        assert f"eagle_capture: {code}" in out, (code, out[-4000:])


@pytest.mark.slow
def test_eagle_shard_fails_an_unreadable_shard_with_its_code(
    demo: Path, pytester: pytest.Pytester
) -> None:
    shards = _project(pytester)
    shutil.copyfile(demo / "good" / "rows_0-2000" / "data_0.ckpt", shards / "data_0.ckpt")
    (shards / "data_1.ckpt").write_bytes(b"PK\x03\x04 not a zip at all")
    pytester.makepyfile(
        test_read="""
        def test_reads(eagle_shard):
            assert eagle_shard.input_ids is not None
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_read.py")
    out = _output(result)
    result.assert_outcomes(passed=1, errors=1)
    assert "eagle_shard: " in out and "EC00" in out, out[-4000:]
