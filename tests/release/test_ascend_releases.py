"""The vllm-ascend rules against every vllm-ascend sdist (``tox -e ascend-releases``):
re-derives ``engines/ascend_rules.json`` with ``scripts/gen_ascend_rules.py`` (each release's
``NPUModelRunner.load_model``, worker, patches and model registrations, read with tarfile and
ast) and fails on any difference. Needs the sdists: set EAGLE_CONTRACT_ASCEND_SDISTS=DIR
(``scripts/gen_ascend_rules.py DIR --download``). Never part of the default run.
"""

from __future__ import annotations

from release_helpers import wheel_folder

SDISTS = wheel_folder("EAGLE_CONTRACT_ASCEND_SDISTS", "vllm-ascend", "ascend-releases")

import gen_ascend_rules as gen  # noqa: E402


def test_the_rules_file_is_what_the_releases_code_says():
    assert gen.main([str(SDISTS), "--check"]) == 0
