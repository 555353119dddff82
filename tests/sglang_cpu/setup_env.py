"""Set up the environment the real-SGLang tests launch their server from (standard library only).

    python tests/sglang_cpu/setup_env.py [ENV_DIR]

Makes a virtual environment (default ``$EAGLE_CONTRACT_SGLANG_ENV``, else
``~/.cache/eagle-contract/sglang-0.5.23-cpu``) holding SGLang 0.5.23 on torch 2.13.0's CPU
build, and prints its Python. The tests read that path from ``EAGLE_CONTRACT_SGLANG_PYTHON``::

    export EAGLE_CONTRACT_SGLANG_PYTHON="$(python tests/sglang_cpu/setup_env.py)"
    python -m pytest tests/live/test_sglang_live.py

SGLang runs its CPU engine (``SGLANG_USE_CPU_ENGINE=1 --device cpu``) in aux-capture mode
here: no draft is loaded, so no CUDA or AMX kernel is called. Two things on the package
index need care, and both are done by files in this folder, copied into the environment:

- ``sgl_kernel`` (``sglang-kernel``) has CUDA wheels only: ``sgl_kernel/`` is a STAND-IN
  that answers SGLang's start-up imports with kernels that raise if ever called.
- torchvision's wheel is CUDA-built; beside CPU torch two of its fake-op registrations fail
  at import: ``_eagle_contract_torchvision_guard.py`` (loaded by a ``.pth``) skips exactly
  those.

The rest is ``requirements.txt``: SGLang's requirements less the CUDA-only ones, pinned,
installed with ``--no-deps`` so the CPU torch stays. A finished environment is reused (a
stamp of these files' hashes marks it done); a half-made one is made again. About 3.5 GB
and 3-4 minutes on a fresh machine.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
TORCH = "torch==2.13.0"  # the CPU build (a plain torch pulls CUDA wheels)
GUARD = "_eagle_contract_torchvision_guard"
FILES = ("requirements.txt", "sgl_kernel/__init__.py", f"{GUARD}.py", "setup_env.py")
DEFAULT = Path.home() / ".cache" / "eagle-contract" / "sglang-0.5.23-cpu"


def stamp() -> str:
    """The hash of everything that decides the environment."""
    h = hashlib.sha256(TORCH.encode())
    for name in FILES:
        h.update(name.encode() + b"\0" + (HERE / name).read_bytes())
    return h.hexdigest()


def python_of(env: Path) -> Path:
    return env / "bin" / "python"


def site_packages(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def pip(python: Path, *args: str) -> None:
    cmd = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
    subprocess.run(cmd, check=True)


def build(env: Path) -> None:
    if env.exists():
        shutil.rmtree(env)
    venv.EnvBuilder(with_pip=True).create(env)
    python = python_of(env)
    pip(python, TORCH)
    pip(python, "--no-deps", "-r", str(HERE / "requirements.txt"))
    site = site_packages(python)
    shutil.copytree(
        HERE / "sgl_kernel", site / "sgl_kernel", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy2(HERE / f"{GUARD}.py", site / f"{GUARD}.py")
    (site / "eagle_contract_torchvision_guard.pth").write_text(f"import {GUARD}\n")


def main(argv: list[str]) -> int:
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print(__doc__, file=sys.stderr)
        return 2
    env = Path(argv[0] if argv else os.environ.get("EAGLE_CONTRACT_SGLANG_ENV") or DEFAULT)
    env = env.expanduser().resolve()
    ready, want = env / ".eagle-contract-ready", stamp()
    if not (ready.is_file() and ready.read_text().strip() == want):
        print(f"setting up SGLang 0.5.23 (CPU) in {env}", file=sys.stderr)
        build(env)
        ready.write_text(want + "\n")
    print(python_of(env))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
