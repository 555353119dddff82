"""Download the tensorrt-llm release wheels the built-in rules cover (tox -e trtllm-releases).

PyPI holds only stubs for tensorrt-llm; the wheels are on NVIDIA's index (pypi.nvidia.com).
Each is over a gigabyte; only its Python sources are read.
"""

import sys
from pathlib import Path

from wheel_download import download_missing

from pytest_eagle_contract.engines.trtllm import RELEASES

download_missing(
    Path(sys.argv[1]),
    "tensorrt-llm",
    "tensorrt_llm",
    RELEASES,
    "--platform",
    "manylinux_2_28_x86_64",
    "--python-version",
    "3.12",
    "--extra-index-url",
    "https://pypi.nvidia.com",
)
