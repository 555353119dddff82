"""Fetch an engine's release wheels into a folder, for the tox releases environments
(``download_sglang_wheels.py``, ``download_trtllm_wheels.py``)."""

import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path


def download_missing(
    target: Path, project: str, wheel_name: str, releases: Iterable[str], *pip_options: str
) -> None:
    """``pip download`` each release of ``project`` (no deps, binary only, with
    ``pip_options``) into ``target`` unless a ``{wheel_name}-{release}-*.whl`` is there."""
    target.mkdir(parents=True, exist_ok=True)
    for release in releases:
        if not list(target.glob(f"{wheel_name}-{release}-*.whl")):
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--only-binary=:all:",
                    *pip_options,
                    f"{project}=={release}",
                    "-d",
                    str(target),
                ],
                check=True,
            )
