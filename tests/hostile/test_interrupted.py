"""Issue 22, item 6: an interrupted run loses nothing it reported, and says it was
interrupted: the pytest session report of a run stopped early (-x, Ctrl-C) is marked
``complete: false, interrupted: true``; a Ctrl-C anywhere in a command is exit 130 with
one line, never a traceback (every file is written atomically)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

from pytest_eagle_contract.shells import demo


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """Made before any test's pytester fixture: what pytester's sys.modules snapshot sees
    imported (transformers, torch.distributed) stays imported."""
    out = tmp_path_factory.mktemp("demo")
    demo.write_demo_shards(out, shards=4)
    return out


@pytest.mark.slow
def test_a_session_stopped_by_x_says_so_in_its_report(root, pytester):
    shards = pytester.path / "shards"
    shutil.copytree(root / "good", shards)
    bad = shards / "rows_0-2000" / "data_0.ckpt"
    data = torch.load(bad, weights_only=True)
    data["loss_mask"] = data["loss_mask"][:-3]  # EC202 on the first shard
    torch.save(data, bad)
    report = pytester.path / "r.json"
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-x",
        "--eagle-contract",
        str(demo.shipped_contract()),
        "--eagle-shards",
        str(shards),
        "--eagle-sample",
        "all",
        "--eagle-no-sharpness",
        "--eagle-json-report",
        str(report),
    )
    out = result.stdout.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out, out
    assert result.ret == 1
    data = json.loads(report.read_text())
    assert data["interrupted"] is True and data["complete"] is False and data["ok"] is False
    (run,) = data["reports"]
    assert run["summary"].startswith("INTERRUPTED after ") and run["interrupted"] is True
    codes = {f["code"] for f in run["findings"]}
    assert "EC202" in codes  # what it found before stopping is kept


@pytest.mark.slow
def test_a_full_session_is_complete(root, pytester):
    report = pytester.path / "r.json"
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--eagle-contract",
        str(demo.shipped_contract()),
        "--eagle-shards",
        str(root / "good"),
        "--eagle-no-sharpness",
        "--eagle-json-report",
        str(report),
    )
    assert result.ret == 0, result.stdout.str()
    data = json.loads(report.read_text())
    assert data["complete"] is True and data["interrupted"] is False


def test_ctrl_c_in_any_command_is_exit_130_without_a_traceback(tmp_path):
    program = (
        "import sys\n"
        "from pytest_eagle_contract.shells import cli\n"
        "def stop(args):\n"
        "    raise KeyboardInterrupt\n"
        "cli._COMMANDS['inspect'] = stop  # Ctrl-C wherever the command is\n"
        "sys.exit(cli.main(['inspect', 'x']))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 130, res.stderr
    assert "Traceback" not in res.stderr and "eagle-contract: interrupted" in res.stderr
