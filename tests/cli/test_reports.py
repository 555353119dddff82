"""Reports people look at: the versioned JSON report (validated against the published
schema), GitHub annotations and step summary, JUnit properties, the HTML report."""

from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pytest_eagle_contract.contract.model import load_contract
from pytest_eagle_contract.findings import finding
from pytest_eagle_contract.reports import github, json_report, plots
from pytest_eagle_contract.reports.run import CheckRun
from pytest_eagle_contract.shells import demo
from pytest_eagle_contract.shells.cli import main
from pytest_eagle_contract.version import RULES_URL

HAS_MATPLOTLIB = plots.available()


@pytest.fixture(autouse=True)
def _not_in_actions(monkeypatch):
    """The tests say when they are under GitHub Actions, whatever runs them."""
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE", "RUNNER_TEMP"):
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


def _check(repo: Path, shards: Path, shard_set: str, *options: str) -> int:
    """``eagle-contract check`` of the repository's demo contract on one demo shard set."""
    return main(["check", str(repo / "contracts" / "demo.yaml"), str(shards / shard_set), *options])


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
    code = _check(
        repo, shards, shard_set, "--sample", "all", "--json", str(report), "--annotations", "none"
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


def test_annotations_stop_at_the_jobs_limit(repo, tmp_path, monkeypatch):
    """Earlier steps of the job wrote 45 annotations: this one writes the last 5."""
    contract = load_contract(repo / "contracts" / "demo.yaml")
    errors = [
        finding("EC401", f"e{i}", contract=contract, key=f"training.slots[{i}]") for i in range(4)
    ]
    warnings = [finding("EC507", f"w{i}", severity="warning") for i in range(4)]
    monkeypatch.setenv("RUNNER_TEMP", str(tmp_path))
    monkeypatch.setenv("GITHUB_WORKSPACE", str(repo))
    (tmp_path / "eagle-contract-annotations.count").write_text("45")
    lines: list[str] = []
    github.emit([_run(repo, errors + warnings)], "github", lines.append)
    assert [x[:9] for x in lines[:5]] == ["::error f"] * 4 + ["::warning"]
    assert "3 more finding group(s) not annotated" in lines[5] and len(lines) == 6
    assert (tmp_path / "eagle-contract-annotations.count").read_text() == "50"


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
    monkeypatch.setenv("GITHUB_WORKSPACE", str(repo))
    if draft:  # asked for, as anywhere else
        flags = ["--annotations", "github"]
    else:  # under GitHub Actions
        flags = []
        monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(repo / "summary.md"))
    args = ["check", str(contract), str(shards / "good"), "--checks", "layout", "-q", *flags]
    assert main(args) == 1
    out = capsys.readouterr().out
    where = (
        (repo / "draft" / "config.json", '"eagle_aux_hidden_state_layer_ids"')
        if draft
        else (contract, "aux_layer_ids")
    )
    line, col = _line_of(*where)
    rel = where[0].relative_to(repo).as_posix()
    assert f"::error file={rel},line={line},col={col},title=EC501 layout-mismatch::" in out
    place = f"`{rel}`:{line}" if draft else str(line)  # the summary names the same place
    assert (
        f"| EC501 | layout-mismatch | error | 1 | - (contract) | {place} |"
        in (repo / "summary.md").read_text()
    )


def test_step_summary_when_the_env_var_is_set(repo, shards, capsys, monkeypatch):
    summary = repo / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    _check(repo, shards, "embed-in-front", "--sample", "all", "-q")
    assert "::error " in capsys.readouterr().out
    text = summary.read_text()
    assert text.startswith("earlier step\n## eagle-contract FAILED: demo-tiny-llama-eagle3")
    assert "### Findings by rule" in text
    assert "| EC401 | norm-out-of-bounds | error | 9 | 3: `rows_0-2000/data_0.ckpt`, " in text
    assert "### Layout: training (specforge) vs sglang 0.5.13..0.5.23" in text
    assert "| 0 | residual:2 (declared, unproven) | residual:2 | ok |" in text


def test_no_annotations_outside_actions(repo, shards, capsys):
    _check(repo, shards, "embed-in-front", "-q")
    assert "::error" not in capsys.readouterr().out


# -- HTML ---------------------------------------------------------------------------------


class _Page(HTMLParser):
    """The page's tags and text; refuses anything fetched from elsewhere."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        assert tag not in ("script", "link", "iframe", "object", "embed"), tag
        for key, value in attrs:
            if tag == "a" and key == "href" and value and value.startswith(RULES_URL + "#"):
                continue  # a finding's link to its rule's docs: followed on a click, not fetched
            if key in ("src", "href", "xlink:href", "srcset") and value:
                assert value.startswith(("#", "data:")), (tag, key, value)

    def handle_data(self, data):
        assert "url(http" not in data and "@import" not in data
        self.text.append(data)


def _page(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text())
    page.close()
    return page


def _html(repo: Path, shards: Path, *extra: str) -> _Page:
    report = repo / "report.html"
    _check(
        repo,
        shards,
        "embed-in-front",
        "--sample",
        "all",
        "--html-report",
        str(report),
        "-q",
        *extra,
    )
    return _page(report)


@pytest.mark.slow
def test_the_html_report_renders_what_the_families_measured_and_reads_no_shard(
    repo, shards, tmp_path
):
    """The norms family's medians, the evidence family's curve and the probe's estimates
    travel with the units; the page is drawn after the shards and the target are gone."""
    from pytest_eagle_contract.checks.unit import Settings
    from pytest_eagle_contract.contract.model import load_contract
    from pytest_eagle_contract.plan.planner import Runner, plan, run_units
    from pytest_eagle_contract.reports.measure import measure
    from pytest_eagle_contract.reports.run import CheckRun

    data = tmp_path / "data"
    shutil.copytree(shards / "embed-in-front", data / "set")
    shutil.copytree(shards / "target", data / "target")
    contract = load_contract(repo / "contracts" / "demo.yaml")
    runner = Runner(Settings(target_model=data / "target", curve=True))
    units = plan(contract, [data / "set"], None, 0, None, data / "target")
    run = CheckRun.of(contract, run_units(units, runner), "summary")
    shutil.rmtree(data)  # nothing left to read again
    measured = measure(run)
    assert [len(s.medians) for s in measured.slots] == [3] * len(contract.training.slots)
    curve = measured.curve
    assert curve is not None and curve.layers[0] == "embed" and curve.layers[-1] == "final_norm"
    assert len(curve.medians) == len(curve.layers) and len(curve.placed) == 4
    assert measured.problems == []
    norms = [u for u in run.units if u.check == "norms"]
    assert all(len(u.measured["medians"]) == len(contract.training.slots) for u in norms)
    assert sum("curve" in u.measured for u in run.units) == 1  # measured once per run


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="plots need matplotlib (the report extra)")
def test_html_report_of_the_buggy_set_has_plots_and_layout(repo, shards):
    page = _html(repo, shards, "--target-model", str(shards / "target"))
    text = " ".join(page.text)
    assert page.tags.count("svg") == 2  # the norms per slot, the target's curve
    assert "FAILED" in text and "EC401 norm-out-of-bounds" in text and "hint:" in text
    assert "Layout: training (specforge) vs sglang 0.5.13..0.5.23" in text
    assert "fc pos" in text and "Plots need matplotlib" not in text
    assert "slot 0 as residual:2" in text and "the target's per-layer norms" in text


BROWSERS = {
    "chromium": next(
        filter(
            None,
            map(
                shutil.which,
                ("chromium", "chromium-browser", "chromium-headless-shell", "google-chrome"),
            ),
        ),
        None,
    ),
    "firefox": shutil.which("firefox"),
}
BAND = (213, 236, 213)  # the bounds' band: matplotlib's tab:green at alpha 0.2 on white


@pytest.mark.parametrize("browser", sorted(BROWSERS))
def test_html_report_in_a_real_browser(browser, repo, shards, tmp_path):
    """The page as a headless browser draws it: the plots are there, drawn."""
    import subprocess

    exe = BROWSERS[browser]
    if exe is None or not HAS_MATPLOTLIB:
        pytest.skip(f"needs a headless {browser} on PATH and matplotlib")
    from PIL import Image  # matplotlib's own dependency

    _html(repo, shards, "--target-model", str(shards / "target"))
    url, shot = (repo / "report.html").as_uri(), tmp_path / "shot.png"
    flags = ["--headless", "--window-size=1200,2400"]
    if browser == "chromium":
        flags += ["--no-sandbox", "--disable-gpu"]
        dom = subprocess.run(
            [exe, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120
        ).stdout
        assert dom.count("<svg") == 2 and "fc pos" in dom
    shot_flag = [f"--screenshot={shot}"] if browser == "chromium" else ["--screenshot", str(shot)]
    subprocess.run(
        [exe, *flags, *shot_flag, url],
        capture_output=True,
        timeout=120,
        env={**os.environ, "HOME": str(tmp_path)},  # a fresh profile
    )
    colors = Image.open(shot).convert("RGB").getcolors(1 << 24) or []
    band = sum(n for n, c in colors if all(abs(a - b) <= 8 for a, b in zip(c, BAND)))
    assert band > 1000, f"{band} pixels of the bounds' band: the plots were not drawn"


@pytest.mark.slow
def test_html_report_without_matplotlib(repo, shards):
    """A Python where matplotlib cannot be imported: a note instead of the plots."""
    import subprocess
    import sys

    block = "import sys; sys.modules['matplotlib'] = None; "
    run = "from pytest_eagle_contract.shells.cli import main; sys.exit(main(sys.argv[1:]))"
    report = repo / "report.html"
    contract = repo / "contracts" / "demo.yaml"
    args = ["check", str(contract), str(shards / "embed-in-front"), "--sample", "all"]
    res = subprocess.run(
        [sys.executable, "-c", block + run, *args, "--html-report", str(report), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    page = _page(report)
    text = " ".join(page.text)
    assert "svg" not in page.tags and "img" not in page.tags
    assert "Plots need matplotlib" in text and "fc pos" in text and "median" in text


@dataclass(frozen=True)
class _Estimate:
    name: str
    accept_length: float
    per_step: tuple[float, ...]


def test_html_probe_plot(repo, tmp_path):
    from pytest_eagle_contract.reports.html import render
    from pytest_eagle_contract.reports.measure import Measurements

    contract = load_contract(repo / "contracts" / "demo.yaml")
    probe = (_Estimate("trained", 2.3, (0.8, 0.6, 0.4)), _Estimate("served", 1.1, (0.1, 0, 0)))
    (tmp_path / "p.html").write_text(
        render([CheckRun(contract, [], [], "ok")], [Measurements(probe=probe)])
    )
    page = _page(tmp_path / "p.html")
    assert page.tags.count("svg") == (1 if HAS_MATPLOTLIB else 0)
    assert "Probe" in page.text and "0.800, 0.600, 0.400" in page.text


def test_junit_acceptance_length_where_a_finding_carries_it(repo):
    from pytest_eagle_contract.reports.junit import properties

    contract = load_contract(repo / "contracts" / "demo.yaml")
    estimates = [{"name": "trainer", "accept_length": 2.3}, {"name": "sglang 0.5.13", "x": 1}]
    found = [
        finding("EC501", "a", extra={"estimates": estimates}),
        finding("EC401", "b", extra={"accept_length": 1.25, "layout": "served"}),
        finding("EC401", "c", extra={"accept_length": "junk"}),
    ]
    props = dict(properties(contract, found))
    assert props["eagle_rules"] == "EC401,EC501"
    assert props["eagle_acceptance_length[trainer]"] == "2.300"
    assert props["eagle_acceptance_length[served]"] == "1.250"
    assert [k for k in props if k.startswith("eagle_acceptance")] == [
        "eagle_acceptance_length[trainer]",
        "eagle_acceptance_length[served]",
    ]


# -- the plugin ---------------------------------------------------------------------------


@pytest.fixture
def project(pytester, shards):
    shutil.copytree(shards / "embed-in-front", pytester.path / "data")
    text = demo.shipped_contract().read_text().replace("../eagle-demo/good", "../data")
    (pytester.path / "contracts").mkdir()
    (pytester.path / "contracts" / "demo.yaml").write_text(text)
    return pytester


def _plugin(project: pytest.Pytester, *options: str) -> pytest.RunResult:
    """``pytest --eagle-contract contracts/demo.yaml OPTIONS`` in the project."""
    return project.runpytest(
        "--eagle-contract", "contracts/demo.yaml", *options, "-p", "no:cacheprovider"
    )


@pytest.mark.slow
def test_plugin_junit_properties_and_json_under_xdist(project, monkeypatch):
    monkeypatch.setenv("GITHUB_WORKSPACE", str(project.path))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(project.path / "summary.md"))
    result = _plugin(
        project,
        "--eagle-sample",
        "all",
        "-n",
        "2",
        "--junitxml=junit.xml",
        "--eagle-json-report=report.json",
        "--eagle-annotations=github",
    )
    assert result.parseoutcomes()["failed"] == 3  # norms, on each of the 3 shards
    line, col = _line_of(project.path / "contracts" / "demo.yaml", "{layer: residual:2")
    result.stdout.fnmatch_lines(
        [f"::error file=contracts/demo.yaml,line={line},col={col},title=EC401 *"]
    )
    assert (
        "| EC401 | norm-out-of-bounds | error | 9 | 3: "
        in (project.path / "summary.md").read_text()
    )
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
    result = _plugin(project, "--eagle-sample", "all", "--eagle-html-report=report.html")
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


def test_plugin_reports_the_warnings_of_a_passing_item(project, monkeypatch):
    contract = project.path / "contracts" / "demo.yaml"
    contract.write_text(contract.read_text().replace("aux_layer_ids: [1, 3, 4]", ""))
    monkeypatch.setenv("GITHUB_WORKSPACE", str(project.path))
    result = _plugin(
        project,
        "-k",
        "layout",
        "--junitxml=junit.xml",
        "--eagle-json-report=report.json",
        "--eagle-annotations=github",
    )
    outcomes = result.parseoutcomes()  # the layout item passes with its warning
    assert outcomes["passed"] == 1 and "failed" not in outcomes
    result.stdout.fnmatch_lines(["::warning file=contracts/demo.yaml,line=*EC507 default-ids::*"])
    (case,) = ET.parse(project.path / "junit.xml").getroot().iter("testcase")
    assert {p.get("name"): p.get("value") for p in case.iter("property")}["eagle_rules"] == "EC507"
    (report,) = _valid(project.path / "report.json")["reports"]
    assert report["ok"] and [f["code"] for f in report["findings"]] == ["EC507"]


def test_measure_reads_the_probe_families_estimates(repo):
    """What the probe family measured (``Estimate.to_dict``) is what the probe plot draws."""
    from pytest_eagle_contract.contract.model import load_contract
    from pytest_eagle_contract.layers import Layer
    from pytest_eagle_contract.models.acceptance import Estimate
    from pytest_eagle_contract.reports.measure import measure
    from pytest_eagle_contract.reports.run import CheckRun, UnitResult

    served = Estimate("sglang 0.5.23", (Layer(2), Layer(4)), 1.6743, (0.56, 0.17, 0.2), 96)
    unit = UnitResult("probe", "", [], None, {"estimates": [served.to_dict()]})
    contract = load_contract(repo / "contracts" / "demo.yaml")
    (got,) = measure(CheckRun(contract, [unit], [], "summary")).probe
    assert got == served


# -- the layout, as every view shows it ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="the HTML report needs matplotlib")
def test_every_layout_view_shows_what_the_reference_capture_proved(
    repo, shards, tmp_path, monkeypatch
):
    """On the buggy set, proven by reference capture: EC501 says the trainer feeds embed,
    residual:2, residual:4; the JSON layout, the HTML table and the step summary say the
    same (each row marked proven, with the declared layer beside it), never `ok`."""
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    contract = repo / "contracts" / "demo.yaml"
    args = ["check", str(contract), str(shards / "embed-in-front"), "--sample", "all"]
    model = ["--target-model", str(shards / "target"), "--reference-capture"]
    outputs = ["--json-report", str(tmp_path / "r.json"), "--html-report", str(tmp_path / "r.html")]
    assert main([*args, *model, *outputs, "--annotations", "github"]) == 1
    data = _valid(tmp_path / "r.json")
    (ec501,) = {f["message"] for f in data["findings"] if f["code"] == "EC501"}
    assert "trained on embed, residual:2, residual:4" in ec501
    (span,) = data["layout"]
    assert span["training"] == ["embed", "residual:2", "residual:4"] and not span["same"]
    assert span["declared"] == ["residual:2", "residual:4", "residual:5"]
    assert span["proven"] == [True] * 3 and "reference capture" in span["evidence"]
    page = (tmp_path / "r.html").read_text()
    rows = [
        'embed (proven; declared residual:2)</td><td>residual:2</td><td class="differs">DIFFERS',
        'residual:4 (proven; declared residual:5)</td><td>residual:5</td><td class="differs">DIFF',
    ]
    assert all(row in page for row in rows), page[page.find("Layout:") :][:2000]
    md = summary.read_text()
    assert "| 0 | embed (proven; declared residual:2) | residual:2 | **DIFFERS** |" in md


def test_declared_layers_are_marked_unproven_where_nothing_proved_them(repo, shards, tmp_path):
    report = tmp_path / "r.json"
    contract = repo / "contracts" / "demo.yaml"
    code = main(["check", str(contract), str(shards / "good"), "--json", str(report), "-q"])
    assert code == 0
    (span,) = _valid(report)["layout"]
    assert span["same"] and span["training"] == span["declared"]
    assert span["proven"] == [False] * 3 and "evidence" not in span
    run = CheckRun(load_contract(contract), [], [], "")
    from pytest_eagle_contract.reports.layout import TrainingSide, layout_spans

    (only,) = layout_spans(run.contract, TrainingSide.of(run))
    assert only.rows()[0] == ("0", "residual:2 (declared, unproven)", "residual:2", "ok")


@pytest.mark.slow
def test_the_layout_items_junit_properties_say_what_was_proven(project, shards):
    """The JUnit view of the layout: the declared fc layers, and on the layout item the
    layers the reference capture proved, as EC501 says them."""
    result = _plugin(
        project,
        "--eagle-sample",
        "1",
        "--eagle-target-model",
        str(shards / "target"),
        "--eagle-reference-capture",
        "--eagle-checks",
        "layout",
        "--junitxml=junit.xml",
    )
    assert result.parseoutcomes()["failed"] == 1
    (case,) = [
        c
        for c in ET.parse(project.path / "junit.xml").getroot().iter("testcase")
        if c.get("name") == "layout"
    ]
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["eagle_fc_layers"] == "residual:2,residual:4,residual:5"
    assert props["eagle_fc_layers_proven"] == "embed,residual:2,residual:4"


@pytest.mark.slow
@pytest.mark.parametrize("draft", [False, True])
def test_a_layout_mismatch_has_one_place_in_every_renderer(repo, shards, draft, cli):
    """Issue 37 item 8: EC501 is placed where the user changes the served ids (the draft
    config's key the engine reads, else the contract's aux_layer_ids), and the terminal,
    the JSON report and the GitHub annotation all name that one line."""
    contract = _mismatch(repo, draft)
    res = cli(
        "check", contract, shards / "good", "--checks", "layout", "--annotations", "github",
        "--json", repo / "r.json", cwd=repo, env={"GITHUB_WORKSPACE": str(repo)},
    )  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    where = (
        (repo / "draft" / "config.json", '"eagle_aux_hidden_state_layer_ids"')
        if draft
        else (contract, "aux_layer_ids")
    )
    line, col = _line_of(*where)
    rel = where[0].relative_to(repo).as_posix()
    assert f"  --> {rel}:{line}\n" in res.stdout, res.stdout  # the terminal
    assert f"::error file={rel},line={line},col={col},title=EC501 " in res.stdout  # GitHub
    found = [f for f in json.loads((repo / "r.json").read_text())["findings"]]
    ec501 = next(f for f in found if f["code"] == "EC501")
    assert (Path(ec501["contract"]).resolve(), ec501["line"]) == (where[0].resolve(), line)
