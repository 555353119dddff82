"""Download the tensorrt-llm release wheels the built-in rules cover (tox -e trtllm-releases).

PyPI holds only stubs for tensorrt-llm; the wheels are on NVIDIA's index (pypi.nvidia.com).
Each is over a gigabyte; only its Python sources are read. Wheels already in the folder are
kept; the download is the rule generators' (``scripts/release_scan.py``).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from release_scan import fetch_missing

from pytest_eagle_contract.engines.trtllm import RELEASES

fetch_missing(
    Path(sys.argv[1]),
    "tensorrt-llm",
    "tensorrt_llm-{version}-*.whl",
    RELEASES,
    (
        *("--only-binary=:all:", "--platform", "manylinux_2_28_x86_64"),
        *("--python-version", "3.12", "--extra-index-url", "https://pypi.nvidia.com"),
    ),
)
