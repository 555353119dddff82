"""The vLLM rules against every release wheel (``tox -e vllm-releases``).

Re-derives ``engines/vllm_rules.json`` from the wheels with ``scripts/gen_vllm_rules.py`` and
fails when the committed file differs (a release on the index not covered, a key, runner,
default, fc width or architecture's capture rule disagreeing). Then runs each release's own
id reader on probe draft configs (the EAGLE keys alone, in pairs, empty lists, non-lists) and its
own default-ids method, and checks the runtime rules take the same ids. Needs the wheels: set
EAGLE_CONTRACT_VLLM_WHEELS=DIR (``scripts/gen_vllm_rules.py DIR --download`` fetches them).
Never part of the default test run.
"""

from __future__ import annotations

import functools
import itertools

import pytest
from release_helpers import one_wheel, wheel_folder

from pytest_eagle_contract.engines import vllm_rules
from pytest_eagle_contract.engines.base import eagle3_default_ids
from pytest_eagle_contract.engines.vllm import _pick

DIR = wheel_folder("EAGLE_CONTRACT_VLLM_WHEELS", "vllm", "vllm-releases")

import gen_vllm_rules as gen  # noqa: E402
from vllm_capture import Release  # noqa: E402


@functools.cache
def _release(version: str) -> Release:
    return Release(one_wheel(DIR, "vllm", version))


def test_the_rules_file_is_what_the_releases_code_says():
    assert gen.main([str(DIR), "--check"]) == 0


def _probes(keys: list[str]) -> list[dict[str, object]]:
    """Draft configs holding ids under one or two of ``keys``, and empty or bad values."""
    out: list[dict[str, object]] = []
    for n in (1, 2):
        for chosen in itertools.combinations(keys, n):
            out.append(gen._config(list(chosen)))
    for key in keys:
        for bad in ([], None, "1,2,3"):
            outer, _, inner = key.rpartition(".")
            out.append({outer: {inner: bad}} if outer else {inner: bad})
    return out


@pytest.mark.parametrize("version", vllm_rules.releases())
def test_each_runner_takes_the_ids_its_release_takes(version):
    release, rules = _release(version), vllm_rules.release(version)
    for runner, path in gen.RUNNERS.items():
        if runner not in rules.runners:
            continue
        reader = gen._reader(release, path)
        keys = list(vllm_rules.eagle_keys())
        for config in _probes(keys):
            theirs = None if reader is None else gen._call_reader(reader, config)
            found = {k: tuple(v) for k in keys if isinstance(v := _lookup(config, k), list) and v}
            ours = _pick(found, rules.runners[runner])
            assert (tuple(theirs) if theirs else None) == (ours and ours[0]), (runner, config)


def _lookup(config: dict[str, object], key: str) -> object:
    outer, _, inner = key.rpartition(".")
    holder = config.get(outer) if outer else config
    return holder.get(inner) if isinstance(holder, dict) else None


@pytest.mark.parametrize("version", vllm_rules.releases())
def test_default_ids_are_the_releases_own(version):
    release = _release(version)
    for name in (gen.MODELS + "interfaces.py", gen.MODELS + "llama.py"):
        tree = release.tree(name)
        for fn in gen.functions(tree) if tree else ():
            if fn.name.startswith("get_eagle3_") and fn.name.endswith("aux_hidden_state_layers"):
                for L in (8, 32, 61, 94):
                    got = gen._compile(fn)(gen._layers_stub(L))
                    if got is not None:
                        assert list(got) == eagle3_default_ids(L)
