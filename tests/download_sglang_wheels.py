"""Download every sglang release wheel the built-in table covers (for tox -e sglang-releases)."""

import subprocess
import sys
from pathlib import Path

from pytest_eagle_contract.engines.sglang_table import RELEASES

target = Path(sys.argv[1])
target.mkdir(parents=True, exist_ok=True)
for release in RELEASES:
    if not list(target.glob(f"sglang-{release}-*.whl")):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.11",
                f"sglang=={release}",
                "-d",
                str(target),
            ],
            check=True,
        )
