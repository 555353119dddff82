"""Issue 15: one shape for checks. The registry drives the planner, both shells and the
rule table in the docs; every rule code is typed and owned by exactly one family. The
import rule (layers, no circles) is tests/unit/test_layers.py."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from pytest_eagle_contract.contract.model import load_contract
from pytest_eagle_contract.errors import UsageError
from pytest_eagle_contract.findings import RULES, RuleCode
from pytest_eagle_contract.plan.planner import plan
from pytest_eagle_contract.plan.registry import FAMILIES, markdown_table, owner

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "pytest_eagle_contract"
DEMO = ROOT / "contracts" / "demo-tiny-llama-eagle3.yaml"


def test_rule_code_type_lists_exactly_the_rules():
    assert set(typing.get_args(RuleCode)) == set(RULES)


def test_every_rule_code_is_owned_by_exactly_one_family():
    owned = [code for family in FAMILIES for code in family.codes]
    assert sorted(owned) == sorted(RULES), "a code is owned twice or not at all"
    assert owner("EC401").name == "norms"


def test_docs_rule_table_is_the_registry():
    assert markdown_table() in (ROOT / "docs" / "rules.md").read_text()


def test_family_keys_are_contract_keys():
    contract = load_contract(DEMO)
    for family in FAMILIES:
        for key in family.keys:
            assert contract.line_of(key) >= 1, (family.name, key)


def test_named_check_without_its_input_is_a_usage_error_saying_what_to_add():
    contract = load_contract(DEMO)
    with pytest.raises(UsageError, match="--target-model"):
        plan(contract, checks=["evidence"])
    with pytest.raises(UsageError, match="--captures DIR or --sglang-url"):
        plan(contract, checks=["capture"])
    with pytest.raises(UsageError, match="unknown checks"):
        plan(contract, checks=["no-such-family"])


def test_cli_refuses_what_the_planner_refuses(cli, tmp_path):
    res = cli("check", DEMO, tmp_path, "--checks", "evidence")
    assert res.returncode == 2
    assert "check 'evidence' needs --target-model" in res.stderr


def test_every_test_module_has_a_kind():
    """A test module sits in the folder of its kind (tests/kinds.py), the folder its marker;
    every folder is on pytest's path, and no two modules share a name (each is imported by
    its bare name)."""
    import tomllib
    from kinds import KINDS, folders

    tests = ROOT / "tests"
    assert not sorted(tests.glob("test_*.py")), (
        "put each test module in the folder of its kind: " + ", ".join(f"tests/{k}/" for k in KINDS)
    )
    modules = sorted(tests.glob("*/test_*.py"))
    assert {p.parent.name for p in modules} == set(KINDS), "a test folder that is not a kind"
    stems = [p.stem for p in modules]
    assert len(stems) == len(set(stems)), "two test modules share a name"
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert [str(ROOT / p) for p in ini["pythonpath"]] == folders()


@pytest.mark.slow  # collects the suite
def test_each_test_carries_its_folders_kind(pytester):
    """The marker comes from the folder: `-m cli` selects tests/cli/'s tests alone."""
    res = pytester.runpytest_subprocess(
        str(ROOT / "tests"), "--collect-only", "-q", "-m", "plugin", "-p", "no:cacheprovider"
    )
    ids = [line for line in res.stdout.lines if "::" in line]
    assert ids, res.stdout.str()
    assert all(line.startswith("tests/plugin/") for line in ids), ids


def test_every_data_file_of_the_package_is_in_the_wheel():
    """A file the package reads at run time (a schema, a generated rules table, the demo's
    contract) is shipped: pyproject's package-data globs match every non-Python file."""
    import fnmatch

    import tomllib

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["pytest_eagle_contract"]
    data = [
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*")
        if p.is_file() and p.suffix not in {".py", ".pyc"} and "__pycache__" not in p.parts
    ]
    assert data, "the package has no data files?"
    unshipped = [f for f in data if not any(fnmatch.fnmatch(f, g) for g in globs)]
    assert not unshipped, f"not in [tool.setuptools.package-data]: {unshipped}"
