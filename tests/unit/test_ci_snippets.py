"""The CI snippets work as written: every one names the repository as version.REPOSITORY
does (no ``OWNER/`` placeholder, no install from an index that has no release), and the
JSON Schemas' ``$id`` is a URL that serves the schema itself, raw, as an editor fetches it
(``infer`` to stdout names it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_eagle_contract.version import RAW, REPOSITORY

ROOT = Path(__file__).resolve().parents[2]
SNIPPETS = ["README.md", "action.yml", ".pre-commit-hooks.yaml", *(
    str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs").glob("*.md"))
)]  # fmt: skip
SCHEMAS = [
    "pytest_eagle_contract/contract/schema/contract-v1.schema.json",
    "pytest_eagle_contract/reports/schema/report-v1.schema.json",
]


@pytest.mark.parametrize("name", SNIPPETS)
def test_every_snippet_names_the_repository_alike(name: str) -> None:
    text = (ROOT / name).read_text()
    assert "OWNER/" not in text, f"{name}: a placeholder that cannot work as written"
    named = re.findall(r"github\.com/([\w.-]+/pytest-eagle-contract)\b", text)
    named += re.findall(r"uses: ([\w.-]+/pytest-eagle-contract)@", text)
    named += re.findall(r"REPO: ([\w.-]+/[\w.-]+)", text)
    named += re.findall(r"^REPO=([\w.-]+/[\w.-]+)", text, re.M)
    assert {n for n in named} <= {REPOSITORY}, f"{name}: {sorted(set(named))}"


def test_ci_docs_install_from_the_repository_in_one_place() -> None:
    text = (ROOT / "docs" / "ci.md").read_text()
    # no `pip install pytest-eagle-contract` from an index that has no release
    lines = [
        ln for ln in text.splitlines() if re.search(r"pip install .*pytest-eagle-contract", ln)
    ]
    bare = [ln for ln in lines if "pytest-eagle-contract" in ln and " @ git+" not in ln]
    assert lines and bare == []
    installs = re.findall(r'pip install "pytest-eagle-contract(?:\[\w+\])? @ git\+(\S+)"', text)
    assert installs and all(u.startswith("https://github.com/$REPO@") for u in installs)
    # the repository itself is spelled once per snippet: the Actions example's uses: line,
    # the install section's REPO=, the workflows' env REPO:
    for block in re.findall(r"```(?:yaml|bash)\n(.*?)```", text, re.S):
        assert block.count(REPOSITORY) <= 1, block


@pytest.mark.parametrize("path", SCHEMAS)
def test_schema_id_is_the_raw_file(path: str) -> None:
    """``$id`` is the file as served raw (JSON, not an HTML page): RAW + its path in the
    repository, a path this checkout holds."""
    schema_id = json.loads((ROOT / path).read_text())["$id"]
    assert schema_id == f"{RAW}/{path}"
    assert "/blob/" not in schema_id and schema_id.startswith("https://raw.githubusercontent.com/")


@pytest.mark.slow
def test_infer_to_stdout_names_a_schema_an_editor_can_fetch(tmp_path: Path, cli) -> None:
    from pytest_eagle_contract.shells import demo

    demo.write_demo_shards(tmp_path, shards=2)
    res = cli("infer", tmp_path / "good", "--num-layers", "8")
    first = res.stdout.splitlines()[0]
    url = first.removeprefix("# yaml-language-server: $schema=")
    assert url != first and "/blob/" not in url
    assert (ROOT / url.removeprefix(RAW + "/")).read_text() == (ROOT / SCHEMAS[0]).read_text()


def test_the_check_hook_samples_as_validate_check_does() -> None:
    """The check hook and the docs' local hook run ``validate --check`` with the command's
    own ``--sample`` default (one default in every command, CLI-STYLE 1), and say how many."""
    import argparse
    import shlex

    import yaml

    from pytest_eagle_contract.shells.cli import _parser

    (sub,) = (a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    default = sub.choices["validate"].get_default("sample")
    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    hook = hooks["eagle-contract-check"]
    words = shlex.split(hook["entry"])
    assert words[:3] == ["eagle-contract", "validate", "--check"]
    sample = words[words.index("--sample") + 1] if "--sample" in words else default
    assert str(sample) == str(default), hook["entry"]
    assert f"{default} shards" in hook["name"] and f"on {default} of its" in hook["description"]
    ci = (ROOT / "docs" / "ci.md").read_text()
    assert "--sample 5" not in ci and f"on {default} of its shards" in ci
