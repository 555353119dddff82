"""The docs site (mkdocs.yml, MkDocs with the Material theme): the command reference is
generated from the argparse parsers and may not drift, every page is in the nav, and the
site builds in strict mode (every link and anchor resolves; `.ci/run` builds it too)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import build_docs_site

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("gen", ROOT / "scripts/gen_cli_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_command_reference_is_the_parsers_own() -> None:
    page = (ROOT / "docs/cli-reference.md").read_text()
    assert page == _generator().reference(), "run python scripts/gen_cli_reference.py"
    from pytest_eagle_contract.shells.cli import _COMMANDS

    for name in _COMMANDS:  # every command, with every one of its options
        assert f"## `eagle-contract {name}`" in page
    assert "`--schema-file PATH`" in page and "`--eagle-batch" not in page


def _gfm_cells(row: str) -> list[str]:
    """A table row's cells as GitHub's Markdown splits them: on every pipe a backslash does
    not escape, inside code spans too (GFM spec, "Tables (extension)")."""
    cells, cell, escaped = [], "", False
    for ch in row.strip()[1:-1]:  # the row's outer pipes
        if ch == "|" and not escaped:
            cells.append(cell)
            cell = ""
        else:
            cell += ch
        escaped = ch == "\\" and not escaped
    return [*cells, cell]


def test_the_command_reference_tables_keep_their_columns() -> None:
    """A `|` in an option's name (`--sample N|all`) does not split its row: every option row
    has the header's three cells on GitHub, and the site (Python-Markdown) shows the name
    whole, without a backslash."""
    page = (ROOT / "docs/cli-reference.md").read_text()
    commands = page.split("\n## ", 1)[1]  # the commands' sections, past the command list
    options = [line for line in commands.splitlines() if line.startswith("| ")]
    assert any("N" in r and "all" in r and "--sample" in r for r in options)
    for row in options:
        assert len(_gfm_cells(row)) == 3, row
    markdown = pytest.importorskip("markdown")
    html = markdown.markdown(page, extensions=["tables"])
    assert "<code>--sample N&#124;all</code>" in html
    assert "N\\|all" not in html


def _pages(nav: list) -> list[str]:
    out: list[str] = []
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            out += _pages(value) if isinstance(value, list) else [value]
    return out


def test_every_page_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["strict"] is True
    pages = _pages(config["nav"])
    assert sorted(pages) == sorted(p.name for p in (ROOT / "docs").glob("*.md"))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("mkdocs") is None, reason="the docs extra: mkdocs-material")
def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    build_docs_site(tmp_path)
    assert (tmp_path / "cli-reference" / "index.html").is_file()
    assert (tmp_path / "rules" / "index.html").is_file()
