"""The OpenVINO GenAI rules against its source (``tox -e openvino-source``): re-derives
``engines/openvino_rules.json`` with ``scripts/gen_openvino_rules.py`` from every release tag and
the snapshot commit the file names (git show, nothing built) and fails on any difference.
Needs a clone: set EAGLE_CONTRACT_OPENVINO_REPO=DIR. Never part of the default run.
"""

from __future__ import annotations

from release_helpers import wheel_folder

REPO = wheel_folder(
    "EAGLE_CONTRACT_OPENVINO_REPO", "openvino.genai (a git clone)", "openvino-source"
)

import gen_openvino_rules as gen  # noqa: E402


def test_the_rules_file_is_what_the_source_says():
    assert gen.main([str(REPO), "--check"]) == 0
