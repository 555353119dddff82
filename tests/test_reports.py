"""Reports people look at: the versioned JSON report (validated against the published
schema), GitHub annotations and step summary, JUnit properties, the HTML report."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pytest_eagle_contract.contract.model import load_contract
from pytest_eagle_contract.findings import finding
from pytest_eagle_contract.reports import github, json_report, plots
from pytest_eagle_contract.reports.run import CheckRun
from pytest_eagle_contract.shells import demo
from pytest_eagle_contract.shells.cli import main

HAS_MATPLOTLIB = plots.available()


@pytest.fixture(autouse=True)
def _not_in_actions(monkeypatch):
    """The tests say when they are under GitHub Actions, whatever runs them."""
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("demo")
    demo.write_demo_shards(root, shards=3, save_target=True)
    return root


@pytest.fixture
def repo(tmp_path) -> Path:
    """A repository holding the demo contract (the tests name the shards)."""
    (tmp_path / "contracts").mkdir()
    shutil.copy(demo.shipped_contract(), tmp_path / "contracts" / "demo.yaml")
    return tmp_path


def _valid(path: Path) -> dict:
    data = json.loads(path.read_text())
    assert json_report.problems(data) == []
    return data


def _line_of(path: Path, text: str) -> tuple[int, int]:
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if text in line:
            return n, line.index(text) + 1
    raise AssertionError(f"{text} not in {path}")


# -- JSON ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("shard_set", "ok"), [("good", True), ("embed-in-front", False)])
def test_check_json_validates(repo, shards, shard_set, ok, capsys):
    report = repo / "report.json"
    code = main(
        [
            "check",
            str(repo / "contracts" / "demo.yaml"),
            str(shards / shard_set),
            "--sample",
            "all",
            "--json",
            str(report),
            "--annotations",
            "none",
        ]
    )
    assert code == (0 if ok else 1)
    data = _valid(report)
    assert (data["schema_version"], data["kind"], data["ok"]) == (1, "check", ok)
    assert data["layout"][0]["same"] and data["engine"]["name"] == "sglang"
    assert ok or {f["code"] for f in data["findings"]} == {"EC401"}


def test_sharpness_json_validates(repo, capsys):
    report = repo / "sharpness.json"
    assert (
        main(
            [
                "check",
                "--sharpness",
                str(repo / "contracts" / "demo.yaml"),
                "--json",
                str(report),
                "-q",
            ]
        )
        == 0
    )
    data = _valid(report)
    assert (data["kind"], data["sharp"]) == ("sharpness", True)


def test_schema_is_published_and_refuses_a_broken_report():
    assert json_report.schema_path().is_file()
    assert json_report.problems({"schema_version": 2, "kind": "check"})
    assert json_report.problems(
        {"schema_version": 1, "kind": "session", "ok": True, "reports": [{"schema_version": 1}]}
    )


# -- GitHub Actions -----------------------------------------------------------------------


def test_escaping():
    assert github.escape_data("50%\r\nnext") == "50%25%0D%0Anext"
    assert github.escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"


def _run(repo: Path, findings: list) -> CheckRun:
    return CheckRun(load_contract(repo / "contracts" / "demo.yaml"), [], findings, "summary")


def test_annotation_limits(repo):
    contract = load_contract(repo / "contracts" / "demo.yaml")
    errors = [
        finding(
            "EC401",
            f"error {i}",
            contract=contract,
            key=f"training.slots[{i % 4}].norm",
            file=f"s{i}",
            slot=i,
        )
        for i in range(15)
    ]
    warnings = [finding("EC507", f"warning {i}, 100%", severity="warning") for i in range(12)]
    lines = github.annotation_lines([_run(repo, errors + warnings)], root=repo)
    assert sum(x.startswith("::error ") for x in lines) == github.MAX_PER_STEP
    assert sum(x.startswith("::warning ") for x in lines) == github.MAX_PER_STEP
    assert "7 more finding group(s) not annotated" in lines[-1]
    first = next(x for x in lines if x.startswith("::error "))
    line, col = _line_of(repo / "contracts" / "demo.yaml", "{layer: residual:2")
    assert first.startswith(
        f"::error file=contracts/demo.yaml,line={line},col={col},"
        "title=EC401 norm-out-of-bounds::error 0"
    )
    assert "::warning title=EC507 default-ids::warning 0, 100%25" in lines


def _mismatch(repo: Path, draft: bool) -> Path:
    """The demo contract with served ids one layer off: the contract's, or a draft's."""
    path = repo / "contracts" / "demo.yaml"
    served = "aux_layer_ids: [2, 3, 4]"
    if draft:
        (repo / "draft").mkdir()
        (repo / "draft" / "config.json").write_text(
            json.dumps(
                {
                    "architectures": ["LlamaForCausalLMEagle3"],
                    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 3, 4]},
                },
                indent=2,
            )
        )
        served = "draft_config: ../draft/config.json"
    path.write_text(path.read_text().replace("aux_layer_ids: [1, 3, 4]", served))
    return path


@pytest.mark.parametrize("draft", [False, True])
def test_layout_mismatch_points_at_the_served_ids(repo, shards, draft, capsys, monkeypatch):
    contract = _mismatch(repo, draft)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(repo))
    assert main(["check", str(contract), str(shards / "good"), "--checks", "layout", "-q"]) == 1
    out = capsys.readouterr().out
    where = (
        (repo / "draft" / "config.json", '"eagle_aux_hidden_state_layer_ids"')
        if draft
        else (contract, "aux_layer_ids")
    )
    line, col = _line_of(*where)
    rel = where[0].relative_to(repo).as_posix()
    assert f"::error file={rel},line={line},col={col},title=EC501 layout-mismatch::" in out


def test_step_summary_when_the_env_var_is_set(repo, shards, capsys, monkeypatch):
    summary = repo / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    main(
        [
            "check",
            str(repo / "contracts" / "demo.yaml"),
            str(shards / "embed-in-front"),
            "--sample",
            "all",
            "-q",
        ]
    )
    assert "::error " in capsys.readouterr().out
    text = summary.read_text()
    assert text.startswith("earlier step\n## eagle-contract FAILED: demo-tiny-llama-eagle3")
    assert "### Findings by rule" in text
    assert "| EC401 | norm-out-of-bounds | error | 9 | 3 " in text
    assert "### Layout: training (specforge) vs sglang 0.5.13..0.5.23" in text
    assert "| 0 | residual:2 | residual:2 | ok |" in text


def test_no_annotations_outside_actions(repo, shards, capsys):
    main(["check", str(repo / "contracts" / "demo.yaml"), str(shards / "embed-in-front"), "-q"])
    assert "::error" not in capsys.readouterr().out


# -- HTML ---------------------------------------------------------------------------------


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        assert not any(k in ("src", "href") and v and "://" in v for k, v in attrs), attrs

    def handle_data(self, data):
        self.text.append(data)


def _page(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text())
    page.close()
    return page


def _html(repo: Path, shards: Path, *extra: str) -> _Page:
    report = repo / "report.html"
    main(
        [
            "check",
            str(repo / "contracts" / "demo.yaml"),
            str(shards / "embed-in-front"),
            "--sample",
            "all",
            "--report",
            str(report),
            "-q",
            *extra,
        ]
    )
    return _page(report)


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="plots need matplotlib (the report extra)")
def test_html_report_of_the_buggy_set_has_plots_and_layout(repo, shards):
    page = _html(repo, shards, "--target-model", str(shards / "target"))
    text = " ".join(page.text)
    assert page.tags.count("svg") == 2  # the norms per slot, the target's curve
    assert "FAILED" in text and "EC401 norm-out-of-bounds" in text and "hint:" in text
    assert "Layout: training (specforge) vs sglang 0.5.13..0.5.23" in text
    assert "fc pos" in text and "Plots need matplotlib" not in text


BROWSER = next(
    filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None
)


@pytest.mark.skipif(
    BROWSER is None or not HAS_MATPLOTLIB, reason="needs a headless chromium and matplotlib"
)
def test_html_report_in_a_real_browser(repo, shards):
    import subprocess

    _html(repo, shards)
    dom = subprocess.run(
        [str(BROWSER), "--headless", "--no-sandbox", "--dump-dom", (repo / "report.html").as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "<svg" in dom and "fc pos" in dom


def test_html_report_without_matplotlib(repo, shards, monkeypatch):
    monkeypatch.setattr(plots, "available", lambda: False)
    page = _html(repo, shards)
    text = " ".join(page.text)
    assert "svg" not in page.tags and "img" not in page.tags
    assert "Plots need matplotlib" in text and "fc pos" in text and "median" in text


def test_html_probe_plot(repo, tmp_path):
    from pytest_eagle_contract.reports.html import render
    from pytest_eagle_contract.reports.junit import properties
    from pytest_eagle_contract.reports.measure import Measurements
    from pytest_eagle_contract.shells.probe import Estimate

    contract = load_contract(repo / "contracts" / "demo.yaml")
    probe = (
        Estimate("trained", (), 2.3, (0.8, 0.6, 0.4), 10),
        Estimate("served", (), 1.1, (0.1, 0.0, 0.0), 10),
    )
    (tmp_path / "p.html").write_text(
        render([CheckRun(contract, [], [], "ok", probe=probe)], [Measurements()])
    )
    page = _page(tmp_path / "p.html")
    assert page.tags.count("svg") == (1 if HAS_MATPLOTLIB else 0)
    assert "Probe" in page.text and "0.800, 0.600, 0.400" in page.text
    assert ("eagle_acceptance_length[trained]", "2.300") in properties(contract, [], probe)


# -- the plugin ---------------------------------------------------------------------------


@pytest.fixture
def project(pytester, shards):
    shutil.copytree(shards / "embed-in-front", pytester.path / "data")
    text = demo.shipped_contract().read_text().replace("../eagle-demo/good", "../data")
    (pytester.path / "contracts").mkdir()
    (pytester.path / "contracts" / "demo.yaml").write_text(text)
    return pytester


def test_plugin_junit_properties_and_json_under_xdist(project):
    result = project.runpytest(
        "--eagle-contract",
        "contracts/demo.yaml",
        "--eagle-sample",
        "all",
        "-n",
        "2",
        "--junitxml=junit.xml",
        "--eagle-report=report.json",
        "-p",
        "no:cacheprovider",
    )
    assert result.parseoutcomes()["failed"] == 3  # norms, on each of the 3 shards
    cases = list(ET.parse(project.path / "junit.xml").getroot().iter("testcase"))
    mine = [{p.get("name"): p.get("value") for p in c.iter("property")} for c in cases]
    assert len(cases) > 9 and all("eagle_contract" in p for p in mine)
    data = _valid(project.path / "report.json")
    assert data["kind"] == "session" and not data["ok"]
    (report,) = data["reports"]
    for p in mine:
        assert p["eagle_contract"] == "demo-tiny-llama-eagle3"
        assert p["eagle_contract_sha256"] == report["contract_sha256"]
        assert (p["eagle_engine"], p["eagle_engine_version"]) == ("sglang", ">=0.5.13")
        assert p["eagle_fc_layers"] == "residual:2,residual:4,residual:5"
        assert p["eagle_served_layers[sglang 0.5.13..0.5.23]"] == p["eagle_fc_layers"]
    assert sorted(p["eagle_rules"] for p in mine).count("EC401") == 3
    assert {f["code"] for f in report["findings"]} == {"EC401"}


def test_plugin_html_and_annotations(project, monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(project.path))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(project.path / "summary.md"))
    result = project.runpytest(
        "--eagle-contract",
        "contracts/demo.yaml",
        "--eagle-sample",
        "all",
        "--eagle-report=report.html",
        "-p",
        "no:cacheprovider",
    )
    assert result.parseoutcomes()["failed"] == 3
    result.stdout.fnmatch_lines(
        [
            "::error file=contracts/demo.yaml,line=*,col=*,"
            "title=EC401 norm-out-of-bounds::*(and in 2 other shard(s))*"
        ]
    )
    assert "| EC401 |" in (project.path / "summary.md").read_text()
    page = _page(project.path / "report.html")
    assert "fc pos" in " ".join(page.text)
    assert page.tags.count("svg") == (1 if HAS_MATPLOTLIB else 0)
