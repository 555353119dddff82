"""``eagle-contract explain CODE`` prints the rule's section of docs/rules.md, from the
installed package (the wheel carries the page), and every finding links that section in the
JSON and HTML reports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pytest_eagle_contract.findings import RULES
from pytest_eagle_contract.shells import demo
from pytest_eagle_contract.version import REPOSITORY

ROOT = Path(__file__).resolve().parents[2]
RULES_MD = ROOT / "docs" / "rules.md"


def _section(code: str) -> str:
    """The rule's section as docs/rules.md has it: heading to the next heading."""
    text = RULES_MD.read_text()
    start = text.index(f"\n## {code} ") + 1
    end = text.find("\n## ", start)
    return text[start : end if end != -1 else None]


def test_explain_prints_the_rules_section_and_its_link(cli) -> None:
    res = cli("explain", "EC401")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert out.startswith("EC401 norm-out-of-bounds\nA slot's median per-token L2 norm")
    body = _section("EC401").split("\n", 1)[1].split("\n\nLayout (`EC5xx`)")[0].strip()
    assert body in out  # the page's own words, whole
    assert "Layout (`EC5xx`)" not in out  # the next series' introduction is not EC401's
    assert out.rstrip().endswith(f"docs: {RULES['EC401'].url}")
    # by name and in any case, too
    assert cli("explain", "norm-out-of-bounds").stdout == out
    assert cli("explain", "ec401").stdout == out


def test_every_code_explains_and_its_link_names_its_heading(cli) -> None:
    from pytest_eagle_contract.shells.explain import rules_page, sections

    found = sections(rules_page())
    assert set(found) == set(RULES)
    for code, rule in RULES.items():
        heading = found[code].splitlines()[0]
        assert heading == f"## {code} {rule.name}"
        # the anchor GitHub and the docs site (toc's slugify) give this heading
        anchor = re.sub(r"[^a-z0-9 -]", "", heading[3:].lower()).replace(" ", "-")
        assert rule.url == f"https://github.com/{REPOSITORY}/blob/main/docs/rules.md#{anchor}"
    listed = cli("explain", "--list")
    assert listed.returncode == 0
    assert len(listed.stdout.splitlines()) == len(RULES)
    assert cli("explain").stdout == listed.stdout


def test_an_unknown_code_is_a_usage_error(cli) -> None:
    res = cli("explain", "EC499")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "unknown rule code 'EC499'" in res.stderr and "explain --list" in res.stderr
    typo = cli("explain", "norm-out-of-bound")
    assert typo.returncode == 2 and "did you mean norm-out-of-bounds" in typo.stderr


@pytest.mark.slow
def test_findings_carry_their_docs_link_in_json_and_html(tmp_path: Path, cli) -> None:
    demo.write_demo_shards(tmp_path, shards=2)
    report, page = tmp_path / "r.json", tmp_path / "r.html"
    res = cli(
        "check", demo.shipped_contract(), tmp_path / "embed-in-front", "--sample", "all",
        "--no-sharpness", "--json-report", report, "--report", page,
    )  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    data = json.loads(report.read_text())
    findings = data["findings"] + [f for u in data["units"] for f in u["findings"]]
    assert findings and {f["code"] for f in findings} >= {"EC401"}
    for f in findings:
        assert f["url"] == RULES[f["code"]].url
    html = page.read_text()
    assert f'<a class="rule" href="{RULES["EC401"].url}">EC401 norm-out-of-bounds</a>' in html


@pytest.mark.slow
def test_the_wheel_carries_the_rules_page(tmp_path: Path) -> None:
    """The page is a link in the package (one text, docs/rules.md); the wheel holds it as a
    file, and explain reads it from an install away from the checkout."""
    source = tmp_path / "source"  # a copy: the build's own folders stay out of the checkout
    skip = (".*", "build", "dist", "*.egg-info", "tests", "benchmarks", "site", "__pycache__")
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(*skip))
    assert (source / "pytest_eagle_contract" / "docs" / "rules.md").is_symlink()
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "--wheel-dir", str(tmp_path / "dist"), str(source)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as whl:
        page = whl.read("pytest_eagle_contract/docs/rules.md").decode()
        whl.extractall(tmp_path / "site")
    assert page == RULES_MD.read_text()
    res = subprocess.run(
        [sys.executable, "-c", "from pytest_eagle_contract.shells.cli import main; main()",
         "explain", "EC705"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("EC705 server-unreachable\n")
    assert "docs: " in res.stdout
