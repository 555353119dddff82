"""Download every sglang release wheel from 0.4.0 on (for tox -e sglang-releases).

    python tests/download_sglang_wheels.py DIR

The releases are those the package index lists (``pip index versions sglang``), post
releases included, so a release newer than ``engines/sglang_rules.json`` is fetched too and
the releases test fails until the file is regenerated. Wheels already in DIR are kept.
The listing and the download are the rule generators' (``scripts/release_scan.py``).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from release_scan import fetch_missing, listed

fetch_missing(
    Path(sys.argv[1]),
    "sglang",
    "sglang-{version}-*.whl",
    listed("sglang", (0, 4, 0)),
    ("--only-binary=:all:", "--python-version", "3.11"),
)
