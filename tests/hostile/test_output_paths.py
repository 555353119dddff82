"""Issue 16, output paths: every file the tool writes (reports, drafted contracts, baseline
rewrites, captures, the demo) is refused onto an input, onto a file a user did not mean to
lose, a folder or a device, and written atomically. Driven through the CLI as a user would;
every refusal is exit 2 with the reason, never a traceback, and the inputs are unchanged."""

from __future__ import annotations

import hashlib
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_eagle_contract.shells import demo

T, H = 12, 64
CONTRACT_TEXT = (
    Path(demo.shipped_contract())
    .read_text("utf-8")
    .replace("format: specforge", "format: auto")
    .replace("../eagle-demo/good", "shards")
)


def _shard(seed: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    return {
        "input_ids": torch.randint(0, 512, (T,), generator=g),
        "loss_mask": torch.ones(T, dtype=torch.long),
        "aux_hidden_state": torch.randn(1, T, 3 * H, generator=g).bfloat16(),
        "hidden_state": torch.randn(1, T, H, generator=g).bfloat16(),
    }


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """contract.yaml and shards/rows_0-2000/data_{0,1}.ckpt."""
    folder = tmp_path / "shards" / "rows_0-2000"
    folder.mkdir(parents=True)
    for i in range(2):
        torch.save(_shard(i), folder / f"data_{i}.ckpt")
    (tmp_path / "contract.yaml").write_text(CONTRACT_TEXT, "utf-8")
    return tmp_path


def _digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def run(*args: str | Path, fsize: int | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in a child; ``fsize`` caps the bytes it may write to one file (a full disk)."""

    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    res = subprocess.run(
        [sys.executable, "-m", "pytest_eagle_contract", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONDONTWRITEBYTECODE": "1"},
        preexec_fn=limit,
        timeout=300,
    )
    assert "Traceback" not in res.stderr, res.stderr
    return res


def check(root: Path, *extra: str | Path, **kw: Any) -> subprocess.CompletedProcess[str]:
    return run("check", root / "contract.yaml", "--no-sharpness", "--sample", "all", *extra, **kw)


def refused(res: subprocess.CompletedProcess[str], why: str) -> bool:
    return res.returncode == 2 and why in res.stderr


def test_check_reports_are_never_written_onto_inputs(project):
    before = _digest(project)
    shard = project / "shards" / "rows_0-2000" / "data_0.ckpt"
    assert refused(check(project, "--json", shard), "an input of this run")
    assert refused(check(project, "--json", project / "contract.yaml"), "an input of this run")
    inside = project / "shards" / "rows_0-2000" / "report.json"
    assert refused(check(project, "--html-report", inside), "an input of this run")
    assert not inside.exists()
    link = project / "link.json"
    link.symlink_to(shard)  # a link to a shard is the shard
    assert refused(check(project, "--json", link), "an input of this run")
    assert _digest(project) == before


@pytest.mark.slow
def test_check_reports_refuse_folders_devices_and_files_that_are_not_reports(project):
    assert refused(check(project, "--json", "/dev/full"), "not a regular file")
    assert refused(check(project, "--json", project), "is a folder")
    assert refused(check(project, "--json", project / "nowhere" / "r.json"), "does not exist")
    notes = project / "notes.txt"
    notes.write_text("mine\n")
    assert refused(check(project, "--json", notes), "is not a report of this tool")
    assert notes.read_text() == "mine\n"
    dangling = project / "dangling.json"
    dangling.symlink_to(project / "gone" / "x.json")
    assert refused(check(project, "--json", dangling), "link to nothing")


def test_one_path_for_both_reports_is_refused_before_the_run(project):
    """--json-report and --html-report naming one file: the JSON report would be written,
    then the HTML one refused onto it after the whole run (or the other way round). Refused
    at the start, nothing written; a link to the other report is the same file."""
    same = project / "r.out"
    assert refused(check(project, "--json-report", same, "--html-report", same), "same file")
    assert not same.exists()
    (project / "r.json").touch()
    link = project / "r.html"
    link.symlink_to(project / "r.json")
    assert refused(
        check(project, "--json-report", project / "r.json", "--html-report", link), "same file"
    )
    assert (project / "r.json").read_text() == ""


@pytest.mark.slow
def test_a_previous_report_or_an_empty_file_is_replaced(project):
    report, page = project / "r.json", project / "r.html"
    report.touch()  # as `mktemp` leaves it
    assert check(project, "--json", report, "--html-report", page).returncode in (0, 1)
    first = report.read_text()
    assert '"schema_version"' in first and "eagle-contract report" in page.read_text()
    assert check(project, "--json", report, "--html-report", page).returncode in (0, 1)
    assert report.read_text() == first
    assert not [p for p in project.iterdir() if p.name.endswith(".tmp")]


def test_a_full_disk_leaves_the_previous_report_whole_and_is_a_clear_error(project):
    report = project / "r.json"
    assert check(project, "--json", report).returncode in (0, 1)
    previous = report.read_bytes()
    res = check(project, "--json", report, fsize=256)  # the report needs more than 256 bytes
    assert refused(res, "cannot write: File too large")
    assert report.read_bytes() == previous
    assert not [p for p in project.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.slow
def test_infer_output_needs_force_to_replace_and_never_replaces_an_input(project):
    shards = project / "shards"
    before = _digest(shards)
    out = project / "drafted.yaml"
    assert run("infer", shards, "--num-layers", "8", "-o", out).returncode in (0, 1)
    drafted = out.read_text()
    out.write_text("# my edits\n" + drafted)
    res = run("infer", shards, "--num-layers", "8", "-o", out)
    assert refused(res, "the file exists") and "--force" in res.stderr
    assert out.read_text().startswith("# my edits")
    assert run("infer", shards, "--num-layers", "8", "-o", out, "--force").returncode in (0, 1)
    assert out.read_text() == drafted
    shard = shards / "rows_0-2000" / "data_1.ckpt"
    res = run("infer", shards, "--num-layers", "8", "-o", shard, "--force")
    assert refused(res, "an input of this run")
    res = run("infer", shards / "rows_0-2000" / "data_0.ckpt", "-o", shard, "--force")
    assert refused(res, "looks like a shard")
    assert refused(run("infer", shards, "-o", shards / "c.yaml"), "an input of this run")
    assert refused(run("infer", shards, "-o", "/dev/full", "--force"), "not a regular file")
    assert _digest(shards) == before


@pytest.mark.slow
def test_a_baseline_update_that_cannot_be_written_leaves_the_contract_whole(project):
    contract = project / "contract.yaml"
    res = run("infer", "--update", contract, fsize=1024)  # the contract is larger
    assert refused(res, "cannot write")
    assert contract.read_text("utf-8") == CONTRACT_TEXT
    assert not [p for p in project.iterdir() if p.name.endswith(".tmp")]


def test_record_and_demo_folders(project, tmp_path_factory):
    args = ("--sglang-url", "http://127.0.0.1:9")
    shards = project / "shards"
    res = run("record", project / "contract.yaml", *args, "-o", shards / "captures")
    assert refused(res, "an input of this run") and not (shards / "captures").exists()
    res = run("record", project / "contract.yaml", *args, "-o", project / "contract.yaml")
    assert refused(res, "is a file, not a folder")
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    out = project / "demo"
    out.mkdir()
    (out / "good").symlink_to(elsewhere)
    assert refused(run("demo", "--out", out), "is a link")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("flag", ["--eagle-html-report", "--eagle-json-report", "--eagle-report"])
def test_pytest_report_onto_a_contract_is_a_usage_error(project, pytester, flag):
    res = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        f"--eagle-contract={project / 'contract.yaml'}",
        f"{flag}={project / 'contract.yaml'}",
    )
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([f"*{flag}*an input of this run*"])
    assert (project / "contract.yaml").read_text("utf-8") == CONTRACT_TEXT
