"""Download every sglang release wheel from 0.4.0 on (for tox -e sglang-releases).

    python tests/download_sglang_wheels.py DIR

The releases are those the package index lists (``pip index versions sglang``), post
releases included, so a release newer than ``engines/sglang_rules.json`` is fetched too and
the releases test fails until the file is regenerated. Wheels already in DIR are kept.
"""

import re
import subprocess
import sys
from pathlib import Path

from wheel_download import download_missing

FIRST = (0, 4, 0)


def _versions() -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "sglang"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    listed = re.search(r"Available versions: (.*)", out)
    if listed is None:
        raise SystemExit(f"pip index versions sglang gave no list:\n{out}")
    found = []
    for version in listed.group(1).split(", "):
        match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:\.post\d+)?", version.strip())
        if match and tuple(int(x) for x in match.groups()) >= FIRST:
            found.append(version.strip())
    return found


download_missing(Path(sys.argv[1]), "sglang", "sglang", _versions(), "--python-version", "3.11")
