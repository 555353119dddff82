"""Issue 13: the sharpness self-test's verdict is kept by what it depends on, so a second
``check`` of the same contract does not run it again; a cache that cannot be used never
changes a verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_eagle_contract.shells.demo import shipped_contract

SHARP = shipped_contract().read_text()
DULL = SHARP.replace("min: 1.44, max: 1.75", "min: 1.44, max: 3.75").replace(
    "min: 3.24, max: 3.75", "min: 1.44, max: 3.75"
)  # slots 0 and 1 accept each other's norms: a swap of the two gets through


@pytest.fixture
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("EAGLE_CONTRACT_SHARPNESS_CACHE", raising=False)
    return tmp_path / "xdg" / "eagle-contract" / "sharpness"


def _contract(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "contract.yaml"
    path.write_text(text)
    return path


def _check(cli, contract: Path, report: Path | None = None):
    args = ["check", contract, "--checks", "sharpness"]
    return cli(*args, *(["--json", report] if report else []))


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def _findings(report: Path) -> list[dict]:
    return json.loads(report.read_text())["findings"]


@pytest.mark.slow
def test_a_second_check_reuses_the_verdict_and_an_edit_invalidates_it(tmp_path, cli, xdg):
    contract = _contract(tmp_path, SHARP)
    first = _check(cli, contract)
    assert first.returncode == 0, first.stdout + first.stderr
    (entry,) = _entries(xdg)
    kept = json.loads(entry.read_text())
    assert kept["findings"] == [] and kept["contract"] == str(contract)
    # What the second run reports is what the entry holds: it did not run the test again.
    planted = {"code": "EC801", "message": "planted in the kept verdict", "severity": "error"}
    entry.write_text(json.dumps({**kept, "findings": [planted]}))
    second = _check(cli, contract)
    assert second.returncode == 1 and "planted in the kept verdict" in second.stdout
    # An edit that changes the contract is a new key: the test runs on the new text.
    contract.write_text(SHARP.replace("max: 8.54", "max: 8.55"))
    third = _check(cli, contract)
    assert third.returncode == 0, third.stdout
    assert "planted" not in third.stdout and len(_entries(xdg)) == 2


@pytest.mark.slow
def test_a_dull_contract_fails_the_second_time_with_the_same_findings(tmp_path, cli, xdg):
    contract = _contract(tmp_path, DULL)
    runs = [_check(cli, contract, tmp_path / f"run{i}.json") for i in (1, 2)]
    assert [r.returncode for r in runs] == [1, 1]
    assert runs[0].stdout == runs[1].stdout
    assert "EC801 not-sharp" in runs[1].stdout and "swap-slots" in runs[1].stdout
    first, second = (_findings(tmp_path / f"run{i}.json") for i in (1, 2))
    assert first == second and [f["code"] for f in first] == ["EC801"]
    (entry,) = _entries(xdg)
    assert [f["message"] for f in json.loads(entry.read_text())["findings"]] == [
        f["message"] for f in first
    ]


@pytest.mark.slow
def test_a_corrupt_entry_is_ignored_and_rewritten(tmp_path, cli, xdg):
    contract = _contract(tmp_path, DULL)
    first = _check(cli, contract)
    (entry,) = _entries(xdg)
    good = entry.read_text()
    bad_finding = {**json.loads(good), "findings": [{"code": "EC999", "message": 1}]}
    for garbage in (b'\x00{"kind": "eagle-contract sh', json.dumps(bad_finding).encode()):
        entry.write_bytes(garbage)
        again = _check(cli, contract)
        assert (again.returncode, again.stdout) == (first.returncode, first.stdout)
        assert "warning" not in again.stderr
        assert entry.read_text() == good


@pytest.mark.slow
def test_a_cache_that_cannot_be_used_changes_nothing_and_notes_it_once_under_v(
    tmp_path, cli, monkeypatch
):
    contract = _contract(tmp_path, DULL)
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")  # the cache's parent is a file: nothing can be read or written
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    runs = [_check(cli, contract), cli("check", contract, "--checks", "sharpness", "-v")]
    assert [r.returncode for r in runs] == [1, 1]
    verdicts = [r.stdout.splitlines()[0] for r in runs]  # the same verdict, first, both ways
    assert verdicts[0] == verdicts[1] and verdicts[0].startswith("FAILED"), verdicts
    assert all("EC801 not-sharp" in r.stdout for r in runs)
    assert runs[0].stderr == ""  # issue 41: a skipped cache is a note under -v only
    notes = [x for x in runs[1].stderr.splitlines() if "the sharpness cache is skipped" in x]
    assert len(notes) == 1 and "Traceback" not in runs[1].stderr, runs[1].stderr
    assert blocked.read_text() == ""


@pytest.mark.slow
def test_the_cache_can_be_turned_off(tmp_path, cli, xdg, monkeypatch):
    contract = _contract(tmp_path, SHARP)
    monkeypatch.setenv("EAGLE_CONTRACT_SHARPNESS_CACHE", "off")
    run = _check(cli, contract)
    assert run.returncode == 0 and _entries(xdg) == []


@pytest.mark.slow
def test_the_pytest_gate_reads_and_keeps_the_same_verdicts(pytester, xdg, cli):
    """The plugin's sharpness item goes through the same cache as ``check``: a verdict kept
    by the CLI is what the pytest item reports, and the plugin keeps no second entry."""
    contract = _contract(pytester.path, SHARP)
    assert _check(cli, contract).returncode == 0
    (entry,) = _entries(xdg)
    planted = {"code": "EC801", "message": "planted in the kept verdict", "severity": "error"}
    entry.write_text(json.dumps({**json.loads(entry.read_text()), "findings": [planted]}))
    result = pytester.runpytest_subprocess(
        "--eagle-contract", str(contract), "-k", "sharpness", "-v"
    )
    result.stdout.fnmatch_lines(["*::sharpness FAILED*", "*planted in the kept verdict*"])
    assert result.ret == 1 and len(_entries(xdg)) == 1


def test_the_tool_is_told_by_each_files_name_size_and_mtime(tmp_path: Path) -> None:
    """The tool's part of the key sees an edited, added or renamed file of the package (as
    Python's bytecode cache tells an edited source) and nothing of ``__pycache__``."""
    import os

    from pytest_eagle_contract.sharpness.cache import _fingerprint

    root = tmp_path / "pkg"
    (root / "sub" / "__pycache__").mkdir(parents=True)
    (root / "a.py").write_text("A = 1\n")
    (root / "sub" / "b.py").write_text("B = 2\n")
    first = _fingerprint(root)
    assert _fingerprint(root) == first
    (root / "sub" / "__pycache__" / "b.cpython-311.pyc").write_bytes(b"\0" * 16)
    assert _fingerprint(root) == first
    st = os.stat(root / "a.py")
    (root / "a.py").write_text("A = 3\n")  # the same size: its mtime tells
    os.utime(root / "a.py", ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    edited = _fingerprint(root)
    assert edited != first
    (root / "sub" / "b.py").rename(root / "sub" / "c.py")
    assert _fingerprint(root) not in (first, edited)
