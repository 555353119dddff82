"""The MTP table against the release files (never part of the default run).

Regenerates ``engines/mtp_rules.json`` with ``scripts/gen_mtp_rules.py`` from the folder
EAGLE_CONTRACT_METHOD_WHEELS names (``pip download --no-deps`` of sglang 0.5.11-0.5.23,
vllm 0.23.0-0.34.0, lmdeploy 0.16.0-0.18.0, mlx-vlm 0.6.15-0.7.10, speculators 0.7.0-0.9.0,
nvidia-modelopt 0.40.0-0.47.0, megatron-core 0.15.3 and 0.16.1, specforge 0.2.0:
scripts/download_method_wheels.py) and fails where the committed file differs.
"""

from __future__ import annotations

import json

from release_helpers import wheel_folder

DIR = wheel_folder("EAGLE_CONTRACT_METHOD_WHEELS", "sglang/vllm/lmdeploy/mlx-vlm", "methods")

import gen_mtp_rules as gen  # noqa: E402


def test_generated_file_matches_the_releases():
    text = json.dumps(gen.table(DIR), indent=1) + "\n"
    assert text == gen.OUT.read_text(), "regenerate: scripts/gen_mtp_rules.py DIR"
