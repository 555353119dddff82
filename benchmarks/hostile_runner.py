"""The hostile runs' machinery, shared by benchmarks/hostile_sweep.py and
benchmarks/hostile_matrix.py: each input runs as a child process (forked from a process that
has imported the package, or ``--fresh``) under an address-space limit and a timeout, and its
end is one class of :data:`CLASSES`, the first that applies (hostile_sweep.py's docstring
says what each means). Neither benchmark imports the other for it."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import resource
import signal
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import kinds

sys.path.extend(kinds.folders())

from hostile_inputs import Case

GIB = 1 << 30
ADDRESS_SPACE = 6 * GIB  # a child past this fails to allocate (and counts as >4GB)
RSS_LIMIT = 4 * GIB
MARKERS = ("PAYLOAD_RAN", "eagle-payload-ran")
CLASSES = (
    "payload ran",
    "overwrote",
    "hang",
    ">4GB",
    "traceback",
    "changed verdict",
    "no finding",
    "zero compared",
    "ok",
)
MEMORY_WORDS = ("MemoryError", "not enough memory", "Cannot allocate memory", "can't allocate")
CRASH_WORDS = ("INTERNALERROR", "crashed while running", "node down:", "Segmentation fault")
CLI_CODES = (0, 1, 2, 69)  # passed, findings, usage error, the engine never answered
PYTEST_CODES = (0, 1, 4)  # passed, failed items, usage error (pytest.UsageError); not
# 2 (interrupted: a collection error), 3 (internal error) or 5 (no items at all)


@dataclass
class Result:
    case: Case
    verdict: str
    code: int
    seconds: float
    rss: int
    tail: str = ""


@dataclass
class _Running:
    case: Case
    start: float
    log: Path
    before: dict[str, str]
    server: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    killed: bool = False


# -- running -----------------------------------------------------------------------------


def _digest(folder: Path) -> dict[str, str]:
    """Every file but those under out/: content hash (size and mtime past 64 MiB)."""
    out: dict[str, str] = {}
    for here, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not (Path(here) == folder and d == "out")]
        for name in files:
            path = Path(here, name)
            st = path.lstat()
            if not path.is_file() or path.is_symlink() or st.st_size > 1 << 26:
                out[str(path)] = f"{st.st_mode}:{st.st_size}:{st.st_mtime_ns}"
            else:
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _child(
    argv: list[str],
    folder: Path,
    log: Path,
    fresh: bool,
    env: dict[str, str | None] | None = None,
    unprivileged: bool = False,
) -> None:
    """In the forked child: run the CLI's main() as the eagle-contract script does, or with
    ``fresh`` exec a new interpreter on it. ``argv`` starting with ``pytest`` runs pytest
    (``pytest.main``, or ``python -m pytest`` with ``fresh``) instead. ``env``: variables
    set (None: unset) first; ``unprivileged``: the run gives up root's power to write
    anywhere (tests/unprivileged.py), after its log is open and it is in its folder."""
    code = 1
    try:
        os.setpgid(0, 0)  # a group of its own: a hang is killed with its xdist workers
        os.chdir(folder)
        if "ray" not in argv:  # --backend ray joins a cluster whose processes reserve more
            resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        here = str(Path(__file__).resolve().parent)  # the guard plugin, for xdist workers too
        path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
        os.environ.update(PYTHONPATH=path, PYTHONWARNINGS="ignore")
        for key, value in (env or {}).items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if unprivileged:
            import unprivileged as user

            if user.how() is not None:
                user.drop()
        is_pytest = bool(argv) and argv[0] == "pytest"
        if fresh:
            python = [sys.executable, "-m", "pytest" if is_pytest else "pytest_eagle_contract"]
            rest = argv[1:] if is_pytest else argv
            os.execve(sys.executable, [*python, *rest], dict(os.environ))
        if is_pytest:
            import pytest

            code = int(pytest.main(argv[1:]))
        else:
            from pytest_eagle_contract.shells.cli import main

            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _digests(case: Case) -> dict[str, str]:
    out = _digest(case.folder)
    for folder in case.watch:
        out.update(_digest(folder))
    return out


def _start(case: Case, log: Path, fresh: bool) -> tuple[int, _Running]:
    running = _Running(case, time.monotonic(), log, _digests(case))
    argv = list(case.argv)
    if case.server is not None:
        url = running.server.enter_context(case.server())
        argv = [url if a == "{url}" else a for a in argv]
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(argv, case.folder, log, fresh, case.env, case.unprivileged)
    return pid, running


def _out_of_memory(text: str, pytest_output: bool) -> bool:
    """A memory word in the output; in pytest's, not in the source lines of a traceback
    (indented, or marked ``>``), only in its own lines and the ``E`` lines."""
    if not pytest_output:
        return any(w in text for w in MEMORY_WORDS)
    lines = [x for x in text.splitlines() if x.startswith("E ") or not x[:1].isspace()]
    return any(w in x for x in lines if not x.startswith(">") for w in MEMORY_WORDS)


def comparing() -> frozenset[str]:
    """The families that compare shards: every per-shard family, and token-parity (a
    contract-level family that reads the shards the command names)."""
    from pytest_eagle_contract.plan.registry import FAMILIES

    return frozenset({f.name for f in FAMILIES if f.scope == "shard"} | {"token-parity"})


def compared_nothing(case: Case) -> str:
    """Why a run that passed compared no shard, else "": it runs a family that compares
    shards (:func:`comparing`), and its report (``out/r.json``: check's ``--json``, the
    plugin's ``--eagle-json-report``) says "ok" on 0 shards. No cell passes on zero compared
    items: a family that compared nothing says so (EC009: "passed, incomplete")."""
    if not case.covers & comparing():
        return ""
    try:
        data = json.loads((case.folder / "out" / "r.json").read_text("utf-8"))
    except (OSError, ValueError):
        return ""
    reports = data.get("reports", [data]) if isinstance(data, dict) else []
    for report in reports:
        line = str(report.get("summary", "")) if isinstance(report, dict) else ""
        if line.startswith("ok:") and " on 0 shard(s)" in line:
            return f"passed having compared no shard: {line}"
    return ""


def _verdict(run: _Running, status: int, rss: int) -> Result:
    case = run.case
    code = os.waitstatus_to_exitcode(status)
    text = run.log.read_text("utf-8", "replace") if run.log.exists() else ""
    markers = [p for m in MARKERS for p in case.folder.rglob(m)]
    markers += [p for m in MARKERS for w in case.watch for p in w.rglob(m)]
    after = _digests(case)
    changed = after != run.before
    guard = case.folder / "out" / "hostile-guard.txt"
    raw = guard.read_text("utf-8", "replace") if guard.exists() else ""
    allowed = PYTEST_CODES if case.shell.startswith("pytest") else CLI_CODES
    if markers:
        verdict = "payload ran"
    elif changed:
        verdict = "overwrote"
    elif run.killed:
        verdict = "hang"
    elif rss > RSS_LIMIT or (
        # a memory word counts where the run did not end cleanly: a finding that quotes
        # the child's own address-space cap refusing a map (pyarrow mapping an 8 GiB
        # sparse file past ADDRESS_SPACE; peak RSS 0.33 GiB) is the cap working
        _out_of_memory(text, case.shell.startswith("pytest"))
        and (code not in allowed or "Traceback (most recent call last)" in text)
    ):
        verdict = ">4GB"
    elif (
        "Traceback (most recent call last)" in text
        or code not in allowed
        or raw
        or any(w in text for w in CRASH_WORDS)
    ):
        verdict = "traceback"
        if raw:
            text = f"{text}\n[guard] {raw}"
    elif case.expect and code not in case.expect:
        verdict = "changed verdict"
        text = f"{text}\n[verdict] exit {code}; a normal run exits {case.expect}"
    elif case.verify is not None and (missing := case.verify(case.folder)):
        verdict, text = "no finding", f"{missing}\n{text}"
    elif code == 0 and (nothing := compared_nothing(case)):
        verdict, text = "zero compared", f"{nothing}\n{text}"
    else:
        verdict = "ok"
    if changed:
        moved = sorted(k for k in {*after, *run.before} if after.get(k) != run.before.get(k))
        text = f"{text}\n[changed] {' '.join(moved[:5])}"
    took = time.monotonic() - run.start
    return Result(case, verdict, code, took, rss, text[-3000:])


def run_all(
    cases: list[Case],
    jobs: int,
    timeout: float,
    fresh: bool,
    logs: Path,
    budget: float | None = None,
    record: Path | None = None,
) -> list[Result]:
    """Run every case, ``jobs`` at a time. Past ``budget`` seconds no new case starts (the
    running ones finish); with ``record`` each result is also appended there as a JSON line
    as it comes, so a run cut short keeps what it measured."""
    results: list[Result] = []
    queue = list(enumerate(cases))
    running: dict[int, _Running] = {}
    began = time.monotonic()
    while queue or running:
        if budget is not None and time.monotonic() - began > budget and queue:
            print(f"\nbudget of {budget:.0f} s spent: {len(queue)} runs not started", flush=True)
            queue = []
            if not running:
                break
        while queue and len(running) < jobs:
            i, case = queue.pop(0)
            pid, run = _start(case, logs / f"{i:04d}.log", fresh)
            running[pid] = run
        pid, status, usage = os.wait4(-1, os.WNOHANG)
        if pid == 0:
            now = time.monotonic()
            for child, run in running.items():
                if not run.killed and now - run.start > (run.case.timeout or timeout):
                    run.killed = True
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(child, signal.SIGKILL)  # xdist workers too
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(child, signal.SIGKILL)
            time.sleep(0.02)
            continue
        run = running.pop(pid)
        run.server.close()
        result = _verdict(run, status, usage.ru_maxrss * 1024)
        results.append(result)
        if record is not None:
            _record(record, result)
        mark = "." if result.verdict == "ok" else "!"
        print(mark, end="" if len(results) % 80 else "\n", flush=True)
    print()
    return results


def _record(path: Path, r: Result) -> None:
    import json

    line = {
        "surface": r.case.surface,
        "name": r.case.name,
        "family": r.case.family,
        "shell": r.case.shell,
        "covers": sorted(r.case.covers),
        "argv": r.case.argv,
        "folder": str(r.case.folder),
        "verdict": r.verdict,
        "code": r.code,
        "seconds": round(r.seconds, 2),
        "rss": r.rss,
        "tail": r.tail,
    }
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def report(results: list[Result]) -> None:
    surfaces = list(dict.fromkeys(r.case.surface for r in results))
    width = max(len(s) for s in [*surfaces, "total"]) + 2
    cell = max(len(c) for c in CLASSES) + 2  # "changed verdict" ran into "traceback" at 13
    print("surface".ljust(width) + "".join(c.rjust(cell) for c in ("inputs", *CLASSES)))
    for surface in [*surfaces, "total"]:
        rows = [r for r in results if surface in ("total", r.case.surface)]
        counts = Counter(r.verdict for r in rows)
        cells = [str(len(rows)), *(str(counts[c]) for c in CLASSES)]
        print(surface.ljust(width) + "".join(c.rjust(cell) for c in cells))
    worst = max(results, key=lambda r: r.rss)
    slowest = max(results, key=lambda r: r.seconds)
    print(f"peak RSS {worst.rss / GIB:.2f} GiB ({worst.case.surface}: {worst.case.name})")
    print(f"slowest {slowest.seconds:.1f} s ({slowest.case.surface}: {slowest.case.name})")
    codes = Counter(r.code for r in results)
    print("exit codes:", dict(sorted(codes.items())))
    for r in results:
        if r.verdict != "ok":
            print(f"\n--- {r.verdict}: {r.case.surface}: {r.case.name} (exit {r.code})")
            print(f"    {' '.join(r.case.argv)}  [in {r.case.folder}]")
            print("    " + r.tail[-800:].replace("\n", "\n    "))
