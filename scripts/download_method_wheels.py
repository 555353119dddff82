"""Download the release files the DFlash2 / DSpark / MTP tables are generated from
(``gen_method_rules.py``, ``gen_mtp_rules.py``), no dependencies, nothing installed or run.

    python scripts/download_method_wheels.py DIR

Files already in DIR are kept. sglang 0.5.11-0.5.23, vllm 0.23.0-0.34.0 (about 400 MB each),
mlx-vlm 0.6.15-0.7.10, the llama-cpp-python 0.3.36 sdist (it vendors llama.cpp), lmdeploy
0.16.0-0.18.0 (CPython 3.11 manylinux wheels, about 100 MB each) and, for the MTP trainers,
speculators 0.7.0-0.9.0, nvidia-modelopt 0.40.0-0.47.0, megatron-core 0.15.3 and 0.16.1 and
specforge 0.2.0.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RELEASES: dict[str, list[str]] = {
    "sglang": [f"0.5.{n}" for n in range(11, 24)],
    "vllm": [
        "0.23.0",  # vllm-ascend 0.23.0's paired release (its MTP feed: gen_mtp_rules.py)
        "0.24.0",
        "0.25.0",
        "0.25.1",
        "0.26.0",
        "0.27.0",
        "0.27.1",
        "0.28.0",
        "0.29.0",
        "0.30.0",
        "0.31.0",
        "0.32.0",
        "0.33.0",
        "0.34.0",
    ],
    "mlx-vlm": [
        "0.6.15",
        "0.6.16",
        "0.6.17",
        "0.7.0",
        "0.7.1",
        "0.7.2",
        "0.7.3",
        "0.7.4",
        "0.7.5",
        "0.7.6",
        "0.7.8",
        "0.7.9",
        "0.7.10",
    ],
    "llama-cpp-python": ["0.3.36"],
    "lmdeploy": ["0.16.0", "0.17.0", "0.18.0"],
    "speculators": ["0.7.0", "0.8.0", "0.8.1", "0.9.0"],
    "nvidia-modelopt": [
        "0.40.0",
        "0.41.0",
        "0.42.0",
        "0.43.0",
        "0.44.0",
        "0.45.0",
        "0.46.0",
        "0.46.1",
        "0.47.0",
    ],
    "megatron-core": ["0.15.3", "0.16.1"],
    "specforge": ["0.2.0"],  # 0.1.0 is an sdist whose metadata does not build here
}
# lmdeploy and megatron-core publish binary wheels only: the ones gen_mtp_rules.py was run on
BINARY = [
    "--only-binary",
    ":all:",
    "--python-version",
    "3.11",
    "--platform",
    "manylinux_2_28_x86_64",
]


def _have(folder: Path, project: str, release: str) -> bool:
    stem = project.replace("-", "_")
    return (
        any(folder.glob(f"{stem}-{release}-*.whl"))
        or (folder / f"{stem}-{release}.tar.gz").exists()
    )


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    folder = Path(sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    for project, releases in RELEASES.items():
        for release in releases:
            if _have(folder, project, release):
                continue
            sdist = ["--no-binary", ":all:"] if project == "llama-cpp-python" else []
            if project in ("lmdeploy", "megatron-core"):
                sdist = BINARY
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    *sdist,
                    "--dest",
                    str(folder),
                    f"{project}=={release}",
                ],
                check=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
