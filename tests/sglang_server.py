"""A REAL SGLang 0.5.23 server for the live tests, on CPU, in aux-capture mode.

Launched from the environment tests/sglang_cpu/setup_env.py makes (its Python in
``EAGLE_CONTRACT_SGLANG_PYTHON``), as a user launches it, bound to 127.0.0.1 on a free port,
in its own process group so that stopping it stops its scheduler and detokenizer too.
Start-up takes 40-150 s on 2 cores; a test module keeps one server for all its tests.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

NEEDED = os.environ.get("EAGLE_CONTRACT_NEED_SGLANG") == "1"  # .ci/run's live step: no skip
SETUP = 'export EAGLE_CONTRACT_SGLANG_PYTHON="$(python tests/sglang_cpu/setup_env.py)"'
START_TIMEOUT = 600.0  # seconds: 2 busy cores have taken 150


def sglang_python() -> Path:
    """The SGLang environment's Python; a skip naming the setup command when none is given,
    a failure where .ci/run asks for the real server (``EAGLE_CONTRACT_NEED_SGLANG=1``)."""
    given = os.environ.get("EAGLE_CONTRACT_SGLANG_PYTHON")
    if given and Path(given).is_file():
        return Path(given)
    env = os.environ.get("EAGLE_CONTRACT_SGLANG_ENV")  # tox -e sglang-live: made, not printed
    if env and (Path(env) / ".eagle-contract-ready").is_file():
        return Path(env) / "bin" / "python"
    why = f"real SGLang: no environment ({SETUP})"
    if NEEDED:
        pytest.fail(f"EAGLE_CONTRACT_NEED_SGLANG=1 but {why}", pytrace=False)
    pytest.skip(why)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RealSGLang:
    """``python -m sglang.launch_server`` with the CPU engine; ``args`` are the launch
    flags that differ between tests (the capture mode, the prefix cache, chunked prefill)."""

    python: Path
    model: Path
    args: list[str]
    log: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            str(self.python),
            "-m",
            "sglang.launch_server",
            "--model-path",
            str(self.model),
            "--skip-tokenizer-init",  # ids in, ids out: the tiny target has no tokenizer
            "--device",
            "cpu",
            "--dtype",
            "float32",
            "--mem-fraction-static",
            "0.5",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *self.args,
        ]

    def start(self) -> RealSGLang:
        env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "PYTHONWARNINGS": "ignore"}
        env.pop("PYTHONPATH", None)  # the server runs from its own environment only
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.command(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                pytest.fail(f"SGLang exited at start-up:\n{self.log_tail()}", pytrace=False)
            if self.ready():
                return self
            time.sleep(1.0)
        self.stop()
        pytest.fail(f"SGLang not ready in {START_TIMEOUT:g} s:\n{self.log_tail()}", pytrace=False)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/model_info", timeout=5) as r:
                json.load(r)
            with urllib.request.urlopen(f"{self.url}/health", timeout=30) as r:
                return bool(r.status == 200)
        except (OSError, ValueError):
            return False

    def stop(self) -> None:
        """SIGTERM to the server's process group, then SIGKILL to whatever of it is left
        (SGLang's scheduler and detokenizer are its children, in the same group)."""
        if self.process is None:
            return
        group, process, self.process = self.process.pid, self.process, None
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                continue

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.is_file() else ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> str:
        return self.start().url

    def __exit__(self, *exc: object) -> None:
        self.stop()


def generate(url: str, ids: list[int], **extra: object) -> dict[str, object]:
    """A raw /generate for ``ids`` with hidden states and one new token, as SGLang answers it."""
    body = {
        "input_ids": ids,
        "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
        "return_hidden_states": True,
        **extra,
    }
    req = urllib.request.Request(
        f"{url}/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        answer: dict[str, object] = json.load(r)
    return answer
