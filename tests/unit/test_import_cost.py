"""Installed but not asked for, the plugin costs nothing: no heavy module is imported."""

from __future__ import annotations

import os
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


# What `check` loads for a contract that names no engine, target or draft, once its schema
# pass and sharpness verdict are kept: the start-up of every CI run (docs/audit.md, "The
# read path"). Each of these is loaded by the run that needs it, never by one that does not.
NOT_FOR_A_PLAIN_CHECK = (
    "jsonschema",  # the contract's schema pass is kept (contract/validated.py)
    "importlib.metadata",  # the caches key on the packages' files, not their versions
    "pytest_eagle_contract.engines.resolve",  # no serving section: no engine rules
    "pytest_eagle_contract.engines.fixes",
    "pytest_eagle_contract.engines.matrix",
    "pytest_eagle_contract.models.target",  # no target model
    "pytest_eagle_contract.models.acceptance",  # no acceptance floor
    "pytest_eagle_contract.sharpness.selftest",  # the verdict is kept
    "torch",
)


@pytest.mark.slow
def test_a_repeated_check_loads_only_what_it_runs(tmp_path):
    from pytest_eagle_contract.shells.demo import shipped_contract

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    env.pop("EAGLE_CONTRACT_SHARPNESS_CACHE", None)
    contract = tmp_path / "contract.yaml"
    contract.write_text(shipped_contract().read_text())
    code = f"""
import sys
from pytest_eagle_contract.shells.cli import main
rc = main(["check", sys.argv[1], "-q", "--checks", "sharpness"])
print("LOADED=" + ",".join(m for m in {NOT_FOR_A_PLAIN_CHECK!r} if m in sys.modules))
sys.exit(rc)
"""

    def loaded() -> set[str]:
        out = subprocess.run(
            [sys.executable, "-c", code, str(contract)], capture_output=True, text=True, env=env
        )
        assert out.returncode == 0, out.stdout + out.stderr
        (line,) = [x for x in out.stdout.splitlines() if x.startswith("LOADED=")]
        return set(filter(None, line[7:].split(",")))

    first = loaded()  # runs the schema and the self-test, and keeps their verdicts
    assert {"jsonschema", "pytest_eagle_contract.sharpness.selftest"} <= first
    assert loaded() == set()
    env["EAGLE_CONTRACT_SCHEMA_CACHE"] = "off"
    assert loaded() == {"jsonschema"}
