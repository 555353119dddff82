"""Issue 15: one shape for checks. The registry drives the planner, both shells and the
rule table in the docs; every rule code is typed and owned by exactly one family; the
package has no import cycles."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

from pytest_eagle_contract.checks.registry import FAMILIES, markdown_table, owner
from pytest_eagle_contract.contract.model import load_contract
from pytest_eagle_contract.errors import UsageError
from pytest_eagle_contract.findings import RULES, RuleCode
from pytest_eagle_contract.planner import plan

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


def _module_imports(path: Path) -> set[str]:
    """Package modules imported at module level (not inside functions or TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    package = parts[:-1]
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If):  # `if TYPE_CHECKING:` blocks do not run
            continue
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1]
            target = [*base, *(node.module.split(".") if node.module else [])]
            for alias in node.names:
                full = ".".join([*target, alias.name])
                candidate = ROOT / (full.replace(".", "/") + ".py")
                out.add(full if candidate.exists() else ".".join(target))
    return out


def test_no_import_cycles():
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = {m for m in _module_imports(path) if m != name}
    state: dict[str, int] = {}

    def visit(name: str, stack: list[str]) -> None:
        state[name] = 1
        for dep in sorted(modules.get(name, ())):
            if dep not in modules:
                continue
            if state.get(dep) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*stack, name, dep]))
            if dep not in state:
                visit(dep, [*stack, name])
        state[name] = 2

    for name in sorted(modules):
        if name not in state:
            visit(name, [])
