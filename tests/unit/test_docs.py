"""docs/ grows with the code: every rule code, contract key and CLI command is documented."""

from __future__ import annotations

import re
from pathlib import Path

from pytest_eagle_contract.contract.model import schema
from pytest_eagle_contract.findings import RULES
from pytest_eagle_contract.shells.cli import _COMMANDS

DOCS = Path(__file__).parents[2] / "docs"


def test_every_rule_code_has_a_section():
    text = (DOCS / "rules.md").read_text()
    for rule in RULES.values():
        assert f"## {rule.code} {rule.name}" in text


def _keys(node, prefix=""):
    for key, sub in node.get("properties", {}).items():
        yield key
        yield from _keys(sub, key)
        if "items" in sub:
            yield from _keys(sub["items"], key)


def test_every_contract_key_is_documented():
    text = (DOCS / "contract.md").read_text()
    documented = {
        part
        for span in re.findall(r"`([a-z0-9_.\[\]i]+)`", text)
        for part in re.split(r"[.\[\]]", span)
    }
    missing = {k for k in _keys(schema()) if k not in documented}
    assert not missing


def test_every_cli_command_is_documented():
    text = (DOCS / "cli.md").read_text()
    for command in _COMMANDS:
        assert f"## `eagle-contract {command}" in text
