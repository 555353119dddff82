"""Run ``eagle-contract`` as a fresh process without paying for torch's import each time.

A CLI test runs the command as a user does: its own process, its own argv, working
folder, environment, stdout, stderr and exit status. Most runs of the suite import torch,
which costs a second or more of CPU each on this 2-core machine, hundreds of times. So each
test process keeps one *zygote*: a Python process that has imported the heavy third-party
libraries (torch, numpy, safetensors; never this package) and forks a child per run. The
child sets the run's folder and environment, points fd 0/1/2 at /dev/null and two files,
and runs ``python -m pytest_eagle_contract`` through ``runpy`` from a clean import of the
package: what ``[sys.executable, "-m", "pytest_eagle_contract", *args]`` runs.

What a fork cannot reproduce goes through a real subprocess instead (``run`` returns None):
an environment that changes interpreter start-up (``PYTHON*`` variables), and an
address-space cap (the zygote's own mappings would count against it).
``EAGLE_CONTRACT_TEST_FORK=0`` turns the zygote off for a whole run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PRELOAD = ("torch", "numpy", "safetensors", "yaml", "jsonschema")
_STARTUP = ("PYTHON",)  # variables read at interpreter start-up, not later


def enabled() -> bool:
    return os.environ.get("EAGLE_CONTRACT_TEST_FORK", "1") != "0" and hasattr(os, "fork")


def forkable(env: dict[str, str]) -> bool:
    """Whether a run with ``env`` behaves the same forked from the zygote."""
    changed = {k for k, v in env.items() if os.environ.get(k) != v} | (set(os.environ) - set(env))
    return not any(k.startswith(_STARTUP) and k != "PYTHONWARNINGS" for k in changed)


class Zygote:
    """One zygote process, serving one request at a time (a test process runs its tests
    one after another)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _SERVER, *PRELOAD],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONWARNINGS": "ignore"},
            )
        return self.proc

    def run(
        self, args: list[str], cwd: Path | None, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        with tempfile.TemporaryDirectory(prefix="cli-") as tmp:
            out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
            request = {
                "args": args,
                "cwd": str(cwd or os.getcwd()),
                "env": env,
                "stdout": str(out),
                "stderr": str(err),
                "timeout": timeout,
            }
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
            reply = proc.stdout.readline()
            if not reply:
                raise RuntimeError("the CLI zygote died")
            code = json.loads(reply)["returncode"]
            stdout = out.read_text(errors="replace")
            stderr = err.read_text(errors="replace")
        cmd = [sys.executable, "-m", "pytest_eagle_contract", *args]
        if code == "timeout":
            raise subprocess.TimeoutExpired(cmd, timeout, stdout, stderr)
        return subprocess.CompletedProcess(cmd, code, stdout, stderr)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=10)


# The zygote's own code: read one JSON request a line, fork, reply with the exit status.
_SERVER = r"""
import importlib, json, os, signal, sys, time
for name in sys.argv[1:]:
    importlib.import_module(name)
base_path = list(sys.path)
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setpgid(0, 0)
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(os.open(req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
            os.dup2(os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
            sys.stdin = open(0, closefd=False)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            sys.path[:] = [os.getcwd()] + base_path[1:]
            sys.argv = [sys.executable, *req["args"]]
            if req["env"].get("PYTHONWARNINGS") == "ignore":
                import warnings
                warnings.simplefilter("ignore")
            import runpy
            code = 0
            try:
                runpy.run_module("pytest_eagle_contract", run_name="__main__", alter_sys=True)
            except SystemExit as exc:
                c = exc.code
                if c is None:
                    code = 0
                elif isinstance(c, int):
                    code = c
                else:
                    print(c, file=sys.stderr)
                    code = 1
            except BaseException:
                import traceback
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)
    deadline = time.monotonic() + req["timeout"]
    status = None
    while status is None:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(st)
            break
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            status = "timeout"
            break
        time.sleep(0.005)
    sys.stdout.write(json.dumps({"returncode": status}) + "\n")
    sys.stdout.flush()
"""
