"""A contract path that is a FIFO: every command that reads a contract refuses it (exit 2,
'not a regular file') instead of blocking on it forever, as the draft config, profile and
shard readers already do. ``profile --contract`` (new) and ``check`` both hung."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("command", ["check", "profile", "validate"])
def test_a_contract_fifo_is_refused_not_read(tmp_path, command):
    fifo = tmp_path / "c.yaml"
    os.mkfifo(fifo)
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps({"num_speculative_tokens": 1}))
    args = {
        "check": ["check", fifo],
        "profile": ["profile", profile, "--contract", fifo],
        "validate": ["validate", fifo],
    }[command]
    res = subprocess.run(
        [sys.executable, "-m", "pytest_eagle_contract", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "not a regular file" in res.stderr
