"""Download the tensorrt-llm release wheels the built-in rules cover (tox -e trtllm-releases).

PyPI holds only stubs for tensorrt-llm; the wheels are on NVIDIA's index (pypi.nvidia.com).
Each is over a gigabyte; only its Python sources are read.
"""

import subprocess
import sys
from pathlib import Path

from pytest_eagle_contract.engines.trtllm import RELEASES

target = Path(sys.argv[1])
target.mkdir(parents=True, exist_ok=True)
for release in RELEASES:
    if not list(target.glob(f"tensorrt_llm-{release}-*.whl")):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--platform",
                "manylinux_2_28_x86_64",
                "--python-version",
                "3.12",
                "--extra-index-url",
                "https://pypi.nvidia.com",
                f"tensorrt-llm=={release}",
                "-d",
                str(target),
            ],
            check=True,
        )
