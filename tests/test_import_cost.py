"""Installed but not asked for, the plugin costs nothing: no heavy module is imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "safetensors", "yaml", "jsonschema", "hypothesis", "transformers", "numpy")


def test_entry_point_module_imports_nothing_heavy():
    code = f"""
import importlib, importlib.metadata as md, sys
(ep,) = [e for e in md.entry_points(group="pytest11") if e.name == "eagle_contract"]
importlib.import_module(ep.value)
print(",".join(m for m in {HEAVY!r} if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.slow
def test_pytest_run_with_plugin_off_loads_no_more_than_without_it(pytester):
    pytester.makeconftest(f"""
        import sys
        def pytest_sessionfinish(session):
            loaded = sorted(m for m in {HEAVY!r} if m in sys.modules)
            print()
            print("HEAVY=" + ",".join(loaded))
    """)
    pytester.makepyfile(test_x="def test_x():\n    pass\n")

    def heavy(*args):
        result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider", *args)
        result.assert_outcomes(passed=1)
        (line,) = [x for x in result.stdout.lines if x.startswith("HEAVY=")]
        return set(filter(None, line[6:].split(",")))

    with_plugin, without = heavy(), heavy("-p", "no:eagle_contract")
    assert with_plugin == without
    assert not with_plugin & {"torch", "safetensors", "yaml", "jsonschema", "transformers"}
