"""``audit --backend ray`` when the cluster fails: a usage error that says what failed, never
a traceback. Ray itself cannot fail on demand, so a stand-in ``ray`` module (put first on
PYTHONPATH) raises what the real one raises: a bare ``Exception`` when its node times out
at start-up, a ``RayError`` from ``ray.get`` when a worker died after its retries. The
real cluster's path is tests/cli/test_audit_ray.py (tox -e ray)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_audit import CONTRACT, write_set

STANDIN = '''
"""Stand-in for ray: only what run_ray calls."""
import types

class RayError(Exception):
    pass

class WorkerCrashedError(RayError):
    pass

exceptions = types.SimpleNamespace(RayError=RayError)
MODE = {mode!r}

def is_initialized():
    return False

def init(**kwargs):
    if MODE == "start":
        raise Exception(
            "The current node timed out during startup. This could happen because some of "
            "the raylet failed to startup or the GCS has become overloaded."
        )

def cluster_resources():
    return {{"CPU": 2.0}}

def remote(**options):
    def wrap(fn):
        return types.SimpleNamespace(remote=lambda task: ("ref", task))
    return wrap

def wait(pending, num_returns=1):
    return pending[:1], pending[1:]

def get(ref):
    raise WorkerCrashedError("The worker died unexpectedly while executing this task.")

def cancel(ref):
    pass
'''


def _audit(tmp_path: Path, mode: str, *extra: str) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "standin"
    fake.mkdir()
    (fake / "ray.py").write_text(STANDIN.format(mode=mode))
    (tmp_path / "c.yaml").write_text(CONTRACT)
    write_set(tmp_path / "shards", 3)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [sys.executable, "-m", "pytest_eagle_contract", "audit", str(tmp_path / "c.yaml")]
    cmd += ["--backend", "ray", "--cache", str(tmp_path / "cache"), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)


@pytest.mark.parametrize(
    ("mode", "extra", "says"),
    [
        ("start", (), "--backend ray: cannot start a local Ray cluster: Exception: The current"),
        ("start", ("--address", "auto"), "--address auto: cannot join the Ray cluster"),
        ("task", (), "a task failed on the cluster after retries: WorkerCrashedError"),
    ],
    ids=["no-local-cluster", "no-cluster-to-join", "worker-died"],
)
def test_a_failing_ray_cluster_is_a_usage_error(
    tmp_path: Path, mode: str, extra: tuple[str, ...], says: str
) -> None:
    result = _audit(tmp_path, mode, *extra)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert says in result.stderr
