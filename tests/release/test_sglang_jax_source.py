"""The sglang-jax rules against its repository (``tox -e sglang-jax-source``): re-derives
``engines/sglang_jax_rules.json`` with ``scripts/gen_sglang_jax_rules.py`` from every tag and
the snapshot commit the file names (git show and ast, nothing imported) and fails on any
difference. Needs a clone: set EAGLE_CONTRACT_SGLANG_JAX_REPO=DIR. Never part of the default
run.
"""

from __future__ import annotations

from release_helpers import wheel_folder

REPO = wheel_folder(
    "EAGLE_CONTRACT_SGLANG_JAX_REPO", "sglang-jax (a git clone)", "sglang-jax-source"
)

import gen_sglang_jax_rules as gen  # noqa: E402


def test_the_rules_file_is_what_the_source_says():
    assert gen.main([str(REPO), "--check"]) == 0
