"""The source-read method rules against the engines' repositories (``tox -e source-methods``):
re-derives ``engines/source_method_rules.json`` with ``scripts/gen_source_method_rules.py``
from every tag read and the snapshot commits the file names (git show, git grep and ast,
nothing imported or run) and fails on any difference. Needs five clones: set
EAGLE_CONTRACT_SOURCE_REPOS=DIR holding ``sglang-jax``, ``atom``, ``ollama``, ``mistralrs``
(EricLBuehler/mistral.rs) and ``openvino-genai`` (openvinotoolkit/openvino.genai), and, for the
optimum-intel block, the ``optimum_intel-2.2.0-py3-none-any.whl`` wheel in the same folder.
Never part of the default run. TensorRT-LLM's block is not re-read (no clone: docs/layers.md).
"""

from __future__ import annotations

import json

import pytest
from release_helpers import wheel_folder

REPOS = wheel_folder(
    "EAGLE_CONTRACT_SOURCE_REPOS",
    "sglang-jax, ATOM, ollama, mistral.rs and openvino.genai (git clones: sglang-jax/, atom/, "
    "ollama/, mistralrs/, openvino-genai/)",
    "source-methods",
    "clones",
)

import gen_source_method_rules as gen  # noqa: E402

CLONES = ("sglang-jax", "atom", "ollama", "mistralrs", "openvino-genai")
OPTIONS = ("--sglang-jax", "--atom", "--ollama", "--mistralrs", "--openvino")
WHEEL = "optimum_intel-2.2.0-py3-none-any.whl"


def test_the_rules_file_is_what_the_source_says():
    missing = [c for c in CLONES if not (REPOS / c).is_dir()]
    if missing:
        pytest.skip(f"no clone of {', '.join(missing)} in {REPOS}")
    args = [str(a) for option, clone in zip(OPTIONS, CLONES) for a in (option, REPOS / clone)]
    assert gen.main([*args, "--check"]) == 0


def test_the_optimum_intel_block_is_what_its_wheel_says():
    wheel = REPOS / WHEEL
    if not wheel.is_file():
        pytest.skip(f"no {WHEEL} in {REPOS} (pip download --no-deps optimum-intel==2.2.0)")
    table = json.loads(gen.OUT.read_text("utf-8"))
    assert gen.optimum_intel(wheel) == table["optimum-intel"]
