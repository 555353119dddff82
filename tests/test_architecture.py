"""Issue 15: one shape for checks. The registry drives the planner, both shells and the
rule table in the docs; every rule code is typed and owned by exactly one family. The
import rule (layers, no circles) is tests/test_layers.py."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from pytest_eagle_contract.contract.model import load_contract
from pytest_eagle_contract.errors import UsageError
from pytest_eagle_contract.findings import RULES, RuleCode
from pytest_eagle_contract.plan.planner import plan
from pytest_eagle_contract.plan.registry import FAMILIES, markdown_table, owner

ROOT = Path(__file__).parent.parent
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
    from conftest import KIND_OF

    modules = {p.stem for p in (ROOT / "tests").glob("test_*.py")}
    assert modules - set(KIND_OF) == set(), "give each test module a kind in tests/conftest.py"
    assert set(KIND_OF) - modules == set(), "tests/conftest.py names a test module that is gone"


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
