"""The plugin's report files are the CLI's, one option each: ``--eagle-json-report`` as
``check --json-report``, ``--eagle-html-report`` as ``check --html-report``. The old
``--eagle-report PATH`` (JSON or HTML by PATH's extension) still works for one release with
a pytest deprecation warning naming the new option (docs/pytest-plugin.md)."""

from __future__ import annotations

import argparse
import json
import shutil

import pytest

from pytest_eagle_contract.shells import demo
from pytest_eagle_contract.shells.cli import _parser


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """Made before any test's pytester fixture (pytester's sys.modules snapshot keeps what
    the demo imported)."""
    root = tmp_path_factory.mktemp("demo")
    demo.write_demo_shards(root, shards=2)
    return root / "good"


def _run(pytester, good, *args):
    shutil.copytree(good, pytester.path / "good", dirs_exist_ok=True)
    return pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-q",
        "--eagle-contract",
        str(demo.shipped_contract()),
        "--eagle-shards",
        "good",
        "--eagle-checks",
        "structure,values",
        *args,
    )


def _check_report_options() -> set[str]:
    top = _parser()
    (sub,) = (a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    check = sub.choices["check"]
    return {
        flag
        for a in check._actions
        if a.help != argparse.SUPPRESS
        for flag in a.option_strings
        if flag.endswith("-report")
    }


def test_the_plugins_report_options_are_the_clis_one_to_one(pytester):
    """Each of ``check``'s report-file options has its ``--eagle-`` twin, and no other."""
    cli = _check_report_options()
    assert cli == {"--json-report", "--html-report"}
    text = pytester.runpytest("--help").stdout.str()
    for flag in cli:
        assert f"--eagle-{flag.removeprefix('--')}=" in text, flag
    assert "deprecated" in " ".join(text.split()).split("--eagle-report=PATH", 1)[1][:80]


@pytest.mark.slow
def test_json_and_html_reports_each_by_its_own_option(good, pytester):
    result = _run(
        pytester, good, "--eagle-json-report", "r.json", "--eagle-html-report", "page.htm"
    )
    assert result.ret == 0, result.stdout.str()
    assert "PytestDeprecationWarning" not in result.stdout.str()
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["kind"] == "session" and report["ok"] is True
    page = (pytester.path / "page.htm").read_text()  # any extension: the option says HTML
    assert page.lstrip().lower().startswith("<!doctype html")
    result.stdout.fnmatch_lines(
        ["*report written to r.json*", "*report written to page.htm*"], consecutive=False
    )


@pytest.mark.slow
@pytest.mark.parametrize(("name", "new"), [("r.json", "json"), ("r.html", "html")])
def test_eagle_report_still_works_with_a_deprecation_warning(good, pytester, name, new):
    result = _run(pytester, good, "--eagle-report", name)
    assert result.ret == 0, result.stdout.str()
    text = " ".join(result.stdout.str().split())
    assert "PytestDeprecationWarning: --eagle-report is deprecated and goes in 0.3.0" in text
    assert f"use --eagle-{new}-report {name}" in text
    written = (pytester.path / name).read_text()
    if new == "json":
        assert json.loads(written)["kind"] == "session"
    else:
        assert written.lstrip().lower().startswith("<!doctype html")


def test_the_deprecation_is_a_usage_error_under_w_error(pytester):
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-W",
        "error::pytest.PytestDeprecationWarning",
        "--eagle-report",
        "r.json",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --eagle-report is deprecated *: use --eagle-json-report*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_the_old_and_the_new_option_for_one_report_is_a_usage_error(pytester):
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--eagle-contract",
        str(demo.shipped_contract()),
        "--eagle-report",
        "a.json",
        "--eagle-json-report",
        "b.json",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--eagle-report a.json: give --eagle-json-report alone*"])


@pytest.mark.parametrize(
    "args",
    [
        ("--eagle-json-report", "r.out", "--eagle-html-report", "r.out"),
        ("--eagle-report", "r.json", "--eagle-html-report", "r.json"),
    ],
)
def test_one_path_for_both_reports_is_a_usage_error(pytester, args):
    """Refused before the run, not found out after it with the JSON report already written
    where the HTML one was asked for."""
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--eagle-contract", str(demo.shipped_contract()), *args
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--eagle-html-report*the same file as*"])
    assert not (pytester.path / args[1]).exists()
