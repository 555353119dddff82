"""The built-in SGLang table against the installed sglang's own methods.

Runs only where sglang is importable (``tox -e sglang``); never in the default test run.
"""

from __future__ import annotations

import pytest

sglang = pytest.importorskip("sglang")

from pytest_eagle_contract.engines import sglang_table as table  # noqa: E402
from pytest_eagle_contract.engines.resolve import installed_sglang, resolve  # noqa: E402
from pytest_eagle_contract.errors import Unservable  # noqa: E402

VERSION = installed_sglang()
L = 61
ID_SETS = {
    "absent": None,
    "start-at-1": [1, 29, 57],
    "start-at-2": [2, 30, 58],
    "unsorted": [58, 2, 30],
    "include-L": [2, 30, 61],
    "four": [1, 20, 40, 57],
}
ARCHS = sorted(
    a
    for a in table.KNOWN_ARCHS
    if (row := table.row_for(a, VERSION or "0"))
    and row.rule != "unfollowed"
    and row.index0 != "none"
)


def _layers(use_installed: bool, arch: str, ids):
    try:
        res = resolve("sglang", L, ids, arch, VERSION, use_installed=use_installed)
    except Unservable as exc:
        return "unservable", str(exc).split(":")[0]
    return [str(x) for x in res.layers], res.problems and [p.code for p in res.problems]


@pytest.mark.parametrize("ids", list(ID_SETS.values()), ids=list(ID_SETS))
@pytest.mark.parametrize("arch", ARCHS)
def test_table_agrees_with_installed_sglang(arch, ids):
    native = _layers(True, arch, ids)
    built_in = _layers(False, arch, ids)
    assert native[0] == built_in[0], (arch, ids, native, built_in)


def test_source_names_the_installed_sglang():
    res = resolve("sglang", L, [2, 30, 58], "DeepseekV3ForCausalLM", VERSION)
    assert res.source.startswith(f"installed sglang {VERSION}")


@pytest.mark.parametrize("arch", sorted(table.NO_CAPTURE))
def test_archs_without_capture_are_refused(arch):
    with pytest.raises(Unservable):
        resolve("sglang", L, [2, 30, 58], arch, VERSION)
