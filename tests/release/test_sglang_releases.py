"""The generated SGLang table against every release wheel (``tox -e sglang-releases``).

Regenerates ``engines/sglang_rules.json`` from the wheels with ``scripts/gen_sglang_rules.py``
and fails when the committed file differs (an architecture that defines
``set_eagle3_layers_to_capture`` in any release missing, a rule, capture site or span
disagreeing, a release on the index not covered), or when a rule or capture site is one the
generator does not know. Then runs each release's own method on probe ids and checks the
runtime table gives the same capture indices. Needs the wheels: set
EAGLE_CONTRACT_SGLANG_WHEELS=DIR (``tests/download_sglang_wheels.py DIR`` fetches them).
Never part of the default test run.
"""

from __future__ import annotations

import functools

import pytest
from release_helpers import one_wheel, wheel_folder

from pytest_eagle_contract.engines import sglang_table as table

DIR = wheel_folder("EAGLE_CONTRACT_SGLANG_WHEELS", "sglang", "sglang-releases")

import gen_sglang_rules as gen  # noqa: E402
import sglang_wheel as sw  # noqa: E402

IDS = [None, [1, 29, 57], [2, 30, 58], [58, 2, 30], [2, 30, 61], [0, 30, 60], [3, 30, 59]]


@functools.cache
def _generated() -> dict[str, object]:
    return gen.generate(DIR)


def _wheel(release: str) -> sw.Wheel:
    return sw.Wheel(one_wheel(DIR, "sglang", release))


def test_every_release_on_the_index_is_covered():
    found = sorted((p.name.split("-")[1] for p in DIR.glob("sglang-*.whl")), key=gen.release_key)
    assert found == list(table.ALL_RELEASES), "regenerate: scripts/gen_sglang_rules.py DIR"


def test_generated_file_matches_the_wheels():
    data = _generated()
    assert not list(gen.problems(data))
    rows = data["rows"]
    print(
        f"{len(data['releases'])} releases, "
        f"{len({a for r in rows for a in r['archs']})} architectures, {len(rows)} rows"
    )
    assert gen.render(data) == gen.OUT.read_text(), "regenerate: scripts/gen_sglang_rules.py DIR"


@pytest.mark.parametrize("release", table.ALL_RELEASES)
def test_each_release_method_matches_the_table(release):
    wheel = _wheel(release)
    for arch, ref in sorted(wheel.architectures().items()):
        row = table.row_for(arch, release)
        assert row is not None, f"sglang {release} defines the method for {arch}"
        if row.rule == "unfollowed":
            continue
        for ids in IDS:
            got, _ = sw.run(wheel, ref, ids)
            want = table.apply_rule(row.rule, ids, sw.PROBE_LAYERS)
            assert got == ("IndexError" if want is None else want), (release, arch, ids)


def test_kimi_vl_has_no_method_in_any_release():
    for release in table.ALL_RELEASES:
        assert "KimiVLForConditionalGeneration" not in _wheel(release).architectures()
