"""Issue 41: the tool runs where CI runs it, as a user whose home cannot be written, from a
checkout that cannot be written, on a read-only file system.

Every cache (the schema's passes, the sharpness verdicts, the audit's summaries) is
best-effort: where its folder cannot be made, read or written the run does the work without
it, with the same verdict and no traceback, and says so in one note under ``-v``. An output
that was asked for and cannot be written is a usage error in one line, before the work.

The runs are subprocesses of an unprivileged user (tests/unprivileged.py: ``nobody`` where
it can start this interpreter, else root without its capabilities, a stand-in under which
the kernel checks the mode bits as for any user); each is compared with the same command,
by the same user, with a cache folder it can write.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import unprivileged

from pytest_eagle_contract.contract.model import SCHEMA_FILE, schema_path
from pytest_eagle_contract.shells import demo

pytestmark = pytest.mark.skipif(unprivileged.how() is None, reason="cannot drop privileges here")

EXE = Path(sys.executable).with_name("eagle-contract")
NOTE = "eagle-contract: note:"
USER_TEST = """\
def test_user_fixture(eagle_shard, eagle_capture):
    assert eagle_shard is not None
"""


@pytest.fixture(scope="module")
def world() -> Iterator[Path]:
    """Demo shards (3 good, 3 with the embedding in front), a contract for each set, a
    user's test on the ``eagle_capture`` fixture, and the homes the runs get: ``ok`` (mode
    777: any user writes it), ``000`` (another user's: not even searchable), ``555``
    (read-only, holding a cache a writable run filled), ``file`` (a file)."""
    top = unprivileged.open_dir("eagle-ro-home-")
    root = top / "project"  # what pytest collects; the homes and outputs beside it
    try:
        root.mkdir()
        demo.write_demo_shards(root, shards=3)
        text = demo.shipped_contract().read_text()
        (root / "good.yaml").write_text(text.replace("../eagle-demo/good", "good"))
        (root / "bad.yaml").write_text(text.replace("../eagle-demo/good", "embed-in-front"))
        (root / "tests").mkdir()
        (root / "tests" / "test_user.py").write_text(USER_TEST)
        (root / "pytest.ini").write_text("[pytest]\n")
        homes = top / "homes"
        for name in ("ok", "000", "555"):
            (homes / name).mkdir(parents=True)
        (homes / "file").write_text("not a folder\n")
        unprivileged.readable(top)
        os.chmod(homes / "ok", 0o777)
        os.chmod(homes / "555", 0o777)
        warm = run(root, "check", "bad.yaml", "--no-sharpness", home=homes / "555")
        assert warm.returncode == 1 and any((homes / "555").rglob("valid/*"))
        unprivileged.read_only(homes / "555")
        os.chmod(homes / "000", 0)
        yield root
    finally:
        unprivileged.remove(top)


def run(
    cwd: Path,
    *args: object,
    home: Path,
    env: dict[str, str] | None = None,
    pytest_run: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``eagle-contract ARGS`` (``pytest_run``: ``python -m pytest ARGS``) in ``cwd`` as
    the unprivileged user, with ``HOME=home`` and no ``XDG_CACHE_HOME`` unless ``env``
    sets one."""
    full = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "EAGLE_CONTRACT_", "XDG_", "COV_"))
    }
    full.update(HOME=str(home), PYTHONWARNINGS="ignore", **(env or {}))
    cmd = [sys.executable, "-m", "pytest"] if pytest_run else [str(EXE)]
    return subprocess.run(
        [*cmd, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full,
        preexec_fn=unprivileged.drop,
        timeout=600,
    )


def clean(res: subprocess.CompletedProcess[str]) -> str:
    """The run's output, once it is known to hold no traceback."""
    out = res.stdout + res.stderr
    assert "Traceback" not in out and "PermissionError" not in out, out
    return out


def codes(report: Path) -> list[tuple[str, str]]:
    data = json.loads(report.read_text())
    return sorted((f["code"], str(f.get("file", ""))) for f in data["findings"])


def summary(res: subprocess.CompletedProcess[str]) -> str:
    """pytest's last line, less its time."""
    return res.stdout.strip().splitlines()[-1].strip("= ").rsplit(" in ", 1)[0]


CACHES = {  # name -> (HOME under world/homes, extra environment)
    "home another user's": ("000", {}),
    "home read-only, cache warm": ("555", {}),
    "home a file": ("file", {}),
    "XDG_CACHE_HOME a file": ("ok", {"XDG_CACHE_HOME": "{root}/homes/file"}),
    "XDG_CACHE_HOME relative": ("000", {"XDG_CACHE_HOME": "cache"}),
    "schema cache off": ("000", {"EAGLE_CONTRACT_SCHEMA_CACHE": "off"}),
}


@pytest.fixture(scope="module")
def baseline(world: Path) -> dict[str, object]:
    """What the runs give with a home the user can write."""
    ok = world.parent / "homes" / "ok"
    (world.parent / "base").mkdir(mode=0o777)
    os.chmod(world.parent / "base", 0o777)
    bad = run(
        world,
        "check",
        "bad.yaml",
        "--no-sharpness",
        "--json-report",
        world.parent / "base" / "r.json",
        home=ok,
    )
    assert bad.returncode == 1, bad.stdout + bad.stderr
    gate = run(
        world, "-p", "no:cacheprovider", "--eagle-contract", "bad.yaml", home=ok, pytest_run=True
    )
    assert gate.returncode == 1, gate.stdout + gate.stderr
    return {"findings": codes(world.parent / "base" / "r.json"), "gate": summary(gate)}


def out_dir(world: Path, name: str) -> Path:
    folder = world.parent / "out" / name.replace(" ", "-").replace("'", "")
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(world.parent / "out", 0o777)
    os.chmod(folder, 0o777)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CACHES))
def test_check_gives_the_same_findings_where_no_cache_can_be_used(world, baseline, case):
    home, extra = CACHES[case]
    env = {k: v.format(root=world.parent) for k, v in extra.items()}
    out = out_dir(world, case)  # the working folder: one this user can write
    res = run(
        out,
        "check",
        world / "bad.yaml",
        "--no-sharpness",
        "--json-report",
        "r.json",
        "-v",
        home=world.parent / "homes" / home,
        env=env,
    )
    text = clean(res)
    assert res.returncode == 1 and codes(out / "r.json") == baseline["findings"], text
    notes = notes_of(res)
    if case in ("schema cache off", "home read-only, cache warm"):
        assert notes == [], text  # off: nothing to skip; warm: the kept pass was read
    else:
        assert len(notes) == 1 and notes[0].startswith("the schema cache is skipped"), text
    assert sorted(p.name for p in out.iterdir()) == ["r.json"]  # XDG_CACHE_HOME=cache: ignored
    quiet = run(out, "validate", world / "good.yaml", home=world.parent / "homes" / home, env=env)
    assert quiet.returncode == 0 and NOTE not in clean(quiet)  # no note without -v


def notes_of(res: subprocess.CompletedProcess[str]) -> list[str]:
    return [x.removeprefix(f"{NOTE} ") for x in res.stderr.splitlines() if x.startswith(NOTE)]


@pytest.mark.slow
def test_every_command_runs_with_a_home_of_another_users(world, baseline):
    """The issue's run: HOME cannot even be searched. check (with the sharpness self-test),
    infer -o, audit, validate and the pytest gate give what a writable home gives."""
    home = world.parent / "homes" / "000"
    out = out_dir(world, "all")
    check = run(world, "check", "good.yaml", "-v", home=home)
    assert check.returncode == 0 and "ok:" in clean(check)
    skipped = {n.split(" is skipped")[0] for n in notes_of(check)}
    assert skipped == {"the schema cache", "the sharpness cache"}, check.stderr
    infer = run(world, "infer", "good", "--num-layers", "8", "-o", out / "c.yaml", home=home)
    assert infer.returncode == 0, clean(infer)
    assert (out / SCHEMA_FILE).read_text() == schema_path().read_text()
    valid = run(world, "validate", out / "c.yaml", home=home)
    assert valid.returncode == 0 and "valid" in clean(valid)
    audit = run(world, "audit", "bad.yaml", "--json-report", out / "a.json", "-v", home=home)
    assert audit.returncode == 1 and "FAILED: audit of 3 shard(s)" in clean(audit)
    assert any("the audit cache is skipped" in n for n in notes_of(audit))
    asked = run(world, "audit", "good.yaml", "--cache", home / "audit", home=home)
    (line,) = clean(asked).strip().splitlines()  # a cache asked for: refused before the work
    assert asked.returncode == 2 and line.startswith(f"eagle-contract: error: --cache {home}")
    gate = run(
        world,
        "-p",
        "no:cacheprovider",
        "--eagle-contract",
        "bad.yaml",
        "-v",
        home=home,
        pytest_run=True,
    )
    assert gate.returncode == 1 and summary(gate) == baseline["gate"], clean(gate)
    assert f"{NOTE} the schema cache is skipped" in gate.stdout  # the summary's note, under -v


@pytest.mark.slow
def test_the_capture_fixture_with_no_source_skips_naming_the_options(world):
    """A user's test on ``eagle_capture`` with no capture source: one skip per shard that
    names the options to pass, never an error (with a home of another user's, every item
    used to be a collection error: PermissionError from the schema cache)."""
    res = run(
        world,
        "-p",
        "no:cacheprovider",
        "--eagle-contract",
        "good.yaml",
        "-rs",
        "tests",
        home=world.parent / "homes" / "000",
        pytest_run=True,
    )
    text = clean(res)
    assert res.returncode == 0 and summary(res).endswith("3 skipped"), text
    (line,) = [x for x in res.stdout.splitlines() if x.startswith("SKIPPED")]
    assert "eagle_capture: no capture source: pass --eagle-captures DIR" in line, line
    assert "--eagle-sglang-url URL" in line


@pytest.mark.slow
def test_a_read_only_checkout(world, baseline):
    """The contract, the shards and the tests cannot be written; the reports go to out/.
    Nothing is written beside them, and an output asked into the checkout is refused in
    one line before the work."""
    checkout = unprivileged.open_dir("eagle-ro-checkout-")
    try:
        for name in ("good", "embed-in-front", "tests", "good.yaml", "bad.yaml", "pytest.ini"):
            src = world / name
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, checkout / name)
        (checkout / "out").mkdir()
        unprivileged.readable(checkout)
        os.chmod(checkout / "out", 0o777)
        unprivileged.read_only(checkout, keep=("out",))
        home = world.parent / "homes" / "ok"
        before = sorted(p.relative_to(checkout) for p in checkout.rglob("*"))
        check = run(
            checkout,
            "check",
            "bad.yaml",
            "--no-sharpness",
            "--json-report",
            "out/r.json",
            home=home,
        )
        assert check.returncode == 1 and codes(checkout / "out" / "r.json") == baseline["findings"]
        clean(check)
        assert run(checkout, "validate", "good.yaml", home=home).returncode == 0
        audit = run(checkout, "audit", "good.yaml", home=home)
        assert audit.returncode == 0, clean(audit)
        infer = run(checkout, "infer", "good", "--num-layers", "8", "-o", "out/c.yaml", home=home)
        assert infer.returncode == 0, clean(infer)
        for asked in (
            ["infer", "good", "--num-layers", "8", "-o", "c2.yaml"],
            ["check", "good.yaml", "--no-sharpness", "--json-report", "r.json"],
            ["infer", "--update", "good.yaml"],
        ):
            refused = run(checkout, *asked, home=home)
            assert refused.returncode == 2, clean(refused)
            (line,) = clean(refused).strip().splitlines()
            assert "cannot write" in line and "not writable by this user" in line, line
        gate = run(checkout, "--eagle-contract", "bad.yaml", home=home, pytest_run=True)
        assert gate.returncode == 1 and summary(gate).startswith(baseline["gate"].split(",")[0])
        clean(gate)
        after = sorted(
            p.relative_to(checkout)
            for p in checkout.rglob("*")
            if p.parts[len(checkout.parts)] != "out"
        )
        assert after == [p for p in before if p.parts[0] != "out"]
    finally:
        unprivileged.remove(checkout)


def _unshare_works() -> bool:
    """Whether a run can have a mount namespace of its own (root, util-linux's unshare)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        probe = ["unshare", "-m", "--propagation", "private", "mount", "--bind", "-o", "ro"]
        return subprocess.run([*probe, tmp, tmp], capture_output=True).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _unshare_works(), reason="no private mount namespace here")
def test_a_home_on_a_read_only_file_system(world, baseline):
    """HOME on a read-only bind mount (in a mount namespace of the run's own): the caches
    are skipped, an output asked there is refused, naming the read-only file system."""
    home = unprivileged.open_dir("eagle-ro-fs-")
    try:
        mount = 'mount --bind -o ro "$0" "$0" && exec "$@"'
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "XDG_"))}
        env.update(HOME=str(home), PYTHONWARNINGS="ignore")
        out = out_dir(world, "rofs")

        def ro(*args: object) -> subprocess.CompletedProcess[str]:
            cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", mount, str(home)]
            return subprocess.run(
                [*cmd, str(EXE), *map(str, args)],
                capture_output=True,
                text=True,
                cwd=world,
                env=env,
            )

        check = ro("check", "bad.yaml", "--no-sharpness", "--json-report", out / "r.json", "-v")
        assert check.returncode == 1 and codes(out / "r.json") == baseline["findings"]
        assert "read-only file system" in clean(check)
        refused = ro("check", "good.yaml", "--no-sharpness", "--json-report", home / "r.json")
        assert refused.returncode == 2 and "on a read-only file system" in clean(refused)
        assert list(home.iterdir()) == []
    finally:
        unprivileged.remove(home)
