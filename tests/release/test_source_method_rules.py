"""The source-read method rules against the engines' repositories (``tox -e source-methods``):
re-derives ``engines/source_method_rules.json`` with ``scripts/gen_source_method_rules.py``
from every tag read and the snapshot commits the file names (git show, git grep and ast,
nothing imported or run) and fails on any difference. Needs three clones: set
EAGLE_CONTRACT_SOURCE_REPOS=DIR holding ``sglang-jax``, ``atom`` and ``ollama``. Never part
of the default run. TensorRT-LLM's block is not re-read (no clone: docs/layers.md).
"""

from __future__ import annotations

from release_helpers import wheel_folder

REPOS = wheel_folder(
    "EAGLE_CONTRACT_SOURCE_REPOS",
    "sglang-jax, ATOM and ollama (git clones: sglang-jax/, atom/, ollama/)",
    "source-methods",
    "clones",
)

import gen_source_method_rules as gen  # noqa: E402


def test_the_rules_file_is_what_the_source_says():
    args = ["--sglang-jax", REPOS / "sglang-jax", "--atom", REPOS / "atom", "--ollama"]
    assert gen.main([*map(str, args), str(REPOS / "ollama"), "--check"]) == 0
