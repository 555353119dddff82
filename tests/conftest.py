from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]


def run_cli(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed ``eagle-contract`` command as a user would."""
    exe = Path(sys.executable).with_name("eagle-contract")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "pytest_eagle_contract"]
    return subprocess.run(
        [*cmd, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        timeout=300,
    )


@pytest.fixture
def cli():
    return run_cli
