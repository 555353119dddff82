"""``eagle-contract audit``: outlier shards named, drift between audits, the cache, resume."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from pytest_eagle_contract.shards.writing import write_shard

H, T = 16, 8
MEDIANS = (1.0, 20.0, 60.0)
SHIFTED = (1.0, 26.0, 75.0)  # a one-layer shift: the deeper slots' norms move


def contract_text(name: str = "tiny-audit", hidden: int = H) -> str:
    """The contract of :func:`write_set`'s shards (also benchmarks/bench_load.py's)."""
    return f"""contract: {name}
version: 1
target: {{num_hidden_layers: 8, hidden_size: {hidden}, vocab_size: 512, dtype: bfloat16}}
training:
  format: speculators-v1
  shards: shards
  slots:
    - {{layer: embed, norm: {{median: 1.0, rtol: 0.5}}}}
    - {{layer: residual:3, norm: {{median: 20.0, rtol: 0.5}}}}
    - {{layer: residual:6, norm: {{median: 60.0, rtol: 0.5}}}}
"""


CONTRACT = contract_text()


def write_set(
    root: Path,
    n: int,
    shifted: set[int] = frozenset(),
    start: int = 0,
    *,
    tokens: int = T,
    hidden: int = H,
) -> None:
    """``n`` tiny shards from index ``start``; those in ``shifted`` with shifted norms."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(start, start + n):
        g = torch.Generator().manual_seed(i)
        slots = []
        for m in SHIFTED if i in shifted else MEDIANS:
            x = torch.randn(tokens, hidden, generator=g)
            scale = m * (1 + 0.02 * torch.randn(tokens, 1, generator=g))
            slots.append((x / x.norm(dim=-1, keepdim=True) * scale).to(torch.bfloat16))
        ids = torch.randint(0, 512, (tokens,), generator=g)
        mask = torch.ones(tokens, dtype=torch.long)
        mask[: i % 4] = 0
        write_shard(root, "speculators-v1", i, ids, mask, slots)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "c.yaml").write_text(CONTRACT)
    return tmp_path


def audit(cli, project: Path, *args: str | Path):  # type: ignore[no-untyped-def]
    """The audit of ``project``'s contract; ``args`` may lead with shard paths."""
    return cli("audit", project / "c.yaml", *args, "--cache", project / "cache", "--workers", "2")


def report(path: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(path.read_text())


def test_three_shifted_shards_among_200_are_named_exactly(cli, project: Path) -> None:
    bad = {17, 101, 188}
    write_set(project / "shards", 203, shifted=bad)
    before = {p: p.stat().st_mtime_ns for p in (project / "shards").iterdir()}
    done = audit(cli, project, "--json", project / "a.json")
    assert done.returncode == 1, done.stderr
    data = report(project / "a.json")
    assert {Path(o["path"]).name for o in data["outliers"]} == {f"data_{i}.pt" for i in bad}
    assert {o["slot"] for o in data["outliers"]} == {1, 2}
    assert all(o["reason"] for o in data["outliers"])
    assert (data["shards"], data["read"], data["cached"]) == (203, 203, 0)
    assert data["findings"] == []  # the shifted norms still sit inside the loose bounds
    slot1 = data["slots"][1]
    assert slot1["count"] == 203 and slot1["median"] == pytest.approx(20.0, rel=0.01)
    assert sum(n for _, _, n in slot1["histogram"]["bins"]) == 203
    assert sum(n for _, _, n in data["lengths"]["bins"]) == 203
    assert sum(n for _, _, n in data["coverage"]["bins"]) == 203
    assert "3 outlier shard(s)" in done.stdout and "data_17.pt" in done.stdout
    # nothing was written into the shard folder
    assert {p: p.stat().st_mtime_ns for p in (project / "shards").iterdir()} == before


def test_drift_names_the_slot_that_moved(cli, project: Path) -> None:
    write_set(project / "shards", 12)
    first = audit(cli, project, "--json", project / "run6.json")
    assert first.returncode == 0, first.stdout + first.stderr
    write_set(project / "run7", 12, shifted={*range(12)} - {0})
    second = audit(
        cli, project, project / "run7", "--json", project / "run7.json",
        "--against", project / "run6.json",
    )  # fmt: skip
    assert second.returncode == 1
    drift = report(project / "run7.json")["drift"]
    assert drift["moved"] == [1, 2]
    assert [r["slot"] for r in drift["slots"] if not r["moved"]] == [0]
    assert "slot 1 (residual:3)" in second.stdout and "MOVED" in second.stdout


def test_a_second_audit_reads_only_new_shards(cli, project: Path) -> None:
    write_set(project / "shards", 10)
    first = audit(cli, project, "--json", project / "a.json")
    assert first.returncode == 0, first.stdout + first.stderr
    write_set(project / "shards", 3, start=10)
    os.utime(project / "shards" / "data_0.pt")  # touched: read again
    second = audit(cli, project, "--json", project / "b.json")
    assert second.returncode == 0, second.stdout + second.stderr
    data = report(project / "b.json")
    assert (data["shards"], data["read"], data["cached"]) == (13, 4, 9)
    third = audit(cli, project, "--json", project / "b.json")
    assert (report(project / "b.json")["read"], third.returncode) == (0, 0)
    a, b = report(project / "a.json"), report(project / "b.json")
    assert a["slots"][0]["layer"] == b["slots"][0]["layer"] == "embed"


def test_the_cache_is_never_inside_a_shard_folder(cli, project: Path) -> None:
    write_set(project / "shards", 2)
    done = cli("audit", project / "c.yaml", "--cache", project / "shards" / "cache")
    assert done.returncode == 2
    assert "inside the shard folder" in done.stderr
    assert sorted(p.name for p in (project / "shards").iterdir()) == ["data_0.pt", "data_1.pt"]


def test_the_default_cache_is_the_users(cli, project: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    write_set(project / "shards", 2)
    monkeypatch.setenv("XDG_CACHE_HOME", str(project / "xdg"))
    done = cli("audit", project / "c.yaml", "--workers", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert list((project / "xdg" / "eagle-contract" / "audit").glob("*.jsonl"))


@pytest.mark.slow
def test_broken_shards_are_findings_and_a_bad_cache_line_is_read_again(cli, project: Path) -> None:
    write_set(project / "shards", 6)
    (project / "shards" / "data_6.pt").write_bytes(b"PK\x03\x04 cut short")
    first = audit(cli, project, "--json", project / "a.json")
    assert first.returncode == 1
    data = report(project / "a.json")
    assert data["unreadable"] == 1
    assert {f["code"] for f in data["findings"]} == {"EC002"}
    (line,) = list((project / "cache").glob("*.jsonl"))
    line.write_text(line.read_text()[:-40] + "\n{not json\n")
    second = audit(cli, project, "--json", project / "b.json")
    assert report(project / "b.json")["read"] == 1, second.stderr


def test_the_report_is_a_valid_report(cli, project: Path) -> None:
    from pytest_eagle_contract.reports.json_report import problems

    write_set(project / "shards", 6, shifted={5})
    audit(cli, project, "--json", project / "a.json")
    assert problems(report(project / "a.json")) == []


@pytest.mark.slow
def test_an_interrupted_audit_keeps_what_it_did_and_resumes(project: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    n = 1200  # enough that the interrupt lands mid-run on a loaded machine too
    write_set(project / "shards", n)
    exe = Path(sys.executable).with_name("eagle-contract")
    cmd = [str(exe), "audit", str(project / "c.yaml"), "--cache", str(project / "cache"), "-q"]
    run = subprocess.Popen(
        [*cmd, "--json", str(project / "a.json")],
        stderr=subprocess.PIPE,
        # as from a terminal: Ctrl-C on, whatever this test process inherited (a parent that
        # ignores SIGINT passes that on, and the audit would never see the Ctrl-C)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    while (
        run.poll() is None
        and sum(len(p.read_bytes().splitlines()) for p in (project / "cache").glob("*.jsonl")) < 2
    ):
        time.sleep(0.01)  # Ctrl-C as soon as two shards are kept
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=300)
    first = report(project / "a.json")
    assert run.returncode == 130, err
    assert not first["complete"] and 1 <= first["read"] < n
    assert b"run the same command again to resume" in err and b"Traceback" not in err
    subprocess.run([*cmd, "--json", str(project / "b.json")], check=True, timeout=300)
    second = report(project / "b.json")
    # what the first run kept (and its report counted: the same shards) is not read again
    assert second["read"] + second["cached"] == n
    assert second["cached"] == first["read"]
    assert second["complete"]


def test_a_cache_that_cannot_be_written_is_given_up_and_the_audit_goes_on(project: Path) -> None:
    """A full disk under the cache (simulated with a file-size limit) costs the cache, not the
    audit: a warning, the full report, no traceback."""
    import resource
    import subprocess
    import sys

    write_set(project / "shards", 12)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))  # a few summary lines

    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_eagle_contract",
            "audit",
            str(project / "c.yaml"),
            "--cache",
            str(project / "cache"),
            "--workers",
            "1",
        ],
        capture_output=True,
        text=True,
        preexec_fn=limit,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert "cannot write the audit cache" in res.stderr and "reads these shards again" in res.stderr
    assert "audit of 12 shard(s) (12 read, 0 cached" in res.stdout
