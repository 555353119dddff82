"""The DFlash2 / DSpark table against the release files (never part of the default run).

Regenerates ``engines/method_rules.json`` with ``scripts/gen_method_rules.py`` from the folder
EAGLE_CONTRACT_METHOD_WHEELS names (``pip download --no-deps`` of sglang 0.5.11-0.5.23, vllm
0.23.0-0.34.0, mlx-vlm 0.6.15-0.7.10 and the llama-cpp-python 0.3.36 sdist) and fails where the
committed file differs.
"""

from __future__ import annotations

import json

from release_helpers import wheel_folder

DIR = wheel_folder("EAGLE_CONTRACT_METHOD_WHEELS", "sglang/vllm/llama-cpp-python", "methods")

import gen_method_rules as gen  # noqa: E402


def test_generated_file_matches_the_releases():
    text = json.dumps(gen.table(DIR), indent=1) + "\n"
    assert text == gen.OUT.read_text(), "regenerate: scripts/gen_method_rules.py DIR"
