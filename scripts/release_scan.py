"""What the release-rule generators share (gen_vllm_rules.py, gen_llamacpp_rules.py,
gen_mlx_rules.py, gen_tpu_rules.py): fetching every release file the index lists, reading
each one in version order, running one function of a release on its own, folding the
per-release facts into rows over release ranges, and writing or checking the JSON table.

A generator says what is its own in a ``Scan`` (the project on the index, its file names,
where the table goes, how one release is read and how the releases fold) and hands it to
``main``. Nothing here imports a release's package: files are read with zipfile or tarfile.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import copy
import json
import multiprocessing
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Facts = dict[str, Any]


def version_key(version: str) -> tuple[int, ...]:
    """A release's order: its numbers (``0.8.5.post1`` -> (0, 8, 5, 1))."""
    return tuple(int(x) for x in re.findall(r"\d+", version))


@dataclass(frozen=True)
class Scan:
    """One generator's own parts."""

    project: str  # the name on the package index: "vllm", "llama-cpp-python"
    pattern: str  # one release's file, "{version}" in it: "vllm-{version}-*.whl"
    out: Path  # the committed table
    derive: Callable[[Path], Facts | None]  # one release's facts, None without EAGLE-3
    tables: Callable[[dict[str, Facts]], Facts]  # the releases, oldest first, as the table
    first: tuple[int, ...] = ()  # the oldest release fetched and read
    pip_options: tuple[str, ...] = ()  # what else ``pip download`` is told
    jobs: int = 1  # releases read at once unless --jobs says

    def version(self, path: Path) -> str:
        head, _, tail = self.pattern.partition("{version}")
        rest = re.escape(tail).replace(r"\*", ".*")
        found = re.fullmatch(re.escape(head) + "(.+?)" + rest, path.name)
        if found is None:
            raise SystemExit(f"{path.name}: not a {self.project} release file")
        return found.group(1)

    def files(self, folder: Path) -> list[Path]:
        """The release files in ``folder`` from ``first`` on, oldest first."""
        found = [
            (version_key(self.version(p)), p) for p in folder.glob(self.pattern.format(version="*"))
        ]
        return [p for key, p in sorted(found) if key >= self.first]


def download(scan: Scan, folder: Path) -> None:
    """Fetch every release the index lists from ``scan.first`` on (``pip download --no-deps``),
    keeping the files already in ``folder``."""
    releases = listed(scan.project, scan.first)
    fetch_missing(folder, scan.project, scan.pattern, releases, scan.pip_options)


def listed(project: str, first: tuple[int, ...] = ()) -> list[str]:
    """The releases of ``project`` the index lists (``pip index versions``: no pre-releases),
    from ``first`` on, newest first."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", project]
    out = subprocess.run(cmd, capture_output=True, text=True)
    found = re.search(r"Available versions: (.*)", out.stdout)
    if found is None:
        raise SystemExit(f"pip index versions {project} gave no list:\n{out.stdout}{out.stderr}")
    return [v for v in found.group(1).split(", ") if version_key(v) >= first]


def fetch_missing(
    folder: Path, project: str, pattern: str, releases: Iterable[str], pip_options: Iterable[str]
) -> None:
    """``pip download --no-deps`` (with ``pip_options``) each of ``releases`` of ``project``
    into ``folder`` where no file ``pattern`` names for it is there already (the engine
    release tests' wheels, tests/download_*_wheels.py, come through here too)."""
    folder.mkdir(parents=True, exist_ok=True)
    for version in releases:
        if not list(folder.glob(pattern.format(version=version))):
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *pip_options]
            subprocess.run([*cmd, f"{project}=={version}", "-d", str(folder)], check=True)


def main(scan: Scan, argv: list[str] | None, doc: str | None) -> int:
    """``GENERATOR FOLDER [--out FILE] [--check] [--download] [--jobs N]``: write the table
    the release files in FOLDER give, or (``--check``) exit 1 where it differs from
    ``--out``; ``--download`` only fetches the releases."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("folder", type=Path, help=f"the {scan.project} release files")
    parser.add_argument("--out", type=Path, default=scan.out)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--download", action="store_true")
    parser.add_argument(
        "--jobs", type=int, default=scan.jobs, help=f"releases read at once ({scan.jobs})"
    )
    args = parser.parse_args(argv)
    if args.download:
        download(scan, args.folder)
        return 0
    files = scan.files(args.folder)
    releases: dict[str, Facts] = {}
    for path, rules in zip(files, _read_all(scan.derive, files, args.jobs)):
        version = scan.version(path)
        print(version, "no EAGLE-3" if rules is None else "ok", file=sys.stderr)
        if rules is not None:
            releases[version] = rules
    return write_or_check(scan.tables(releases), args.out, args.check, f"{len(releases)} releases")


def write_or_check(
    table: Facts, out: Path, check: bool, read: str, source: str = "the releases' code"
) -> int:
    """Write ``table`` as ``out``'s JSON, or (``check``) compare it with ``out``: 1 where they
    differ. ``read`` says what the table was read from ("27 releases", "99 refs")."""
    text = json.dumps(table, indent=1) + "\n"
    if check:
        if out.read_text("utf-8") != text:
            print(f"{out} differs from {source}", file=sys.stderr)
            return 1
        print(f"{out} agrees with {read}", file=sys.stderr)
        return 0
    out.write_text(text, "utf-8")
    return 0


def fold(facts: list[tuple[str, Facts | None]]) -> list[Facts]:
    """One row (``since``, ``until`` exclusive, the facts) per run of releases, oldest first,
    with equal facts; a release without facts (None) is skipped and breaks no run."""
    out: list[Facts] = []
    for version, fact in facts:
        if fact is None:
            continue
        if out and {k: v for k, v in out[-1].items() if k not in ("since", "until")} == fact:
            continue
        if out:
            out[-1]["until"] = version
        out.append({"since": version, "until": None, **fact})
    return out


def _read_all(
    derive: Callable[[Path], Facts | None], files: list[Path], jobs: int
) -> Iterable[Facts | None]:
    if jobs <= 1:
        return map(derive, files)
    with multiprocessing.Pool(jobs) as pool:
        return pool.map(derive, files)


def spans(versions: list[str], facts: dict[str, Any]) -> Iterator[tuple[str, str | None, Any]]:
    """Runs of consecutive releases with equal facts (absent: None, not yielded), as (first
    release, the release after the run or None for the newest, the facts)."""
    start = 0
    for n in range(1, len(versions) + 1):
        if n == len(versions) or facts.get(versions[n]) != facts.get(versions[start]):
            if facts.get(versions[start]) is not None:
                until = versions[n] if n < len(versions) else None
                yield versions[start], until, facts[versions[start]]
            start = n


def rows(releases: dict[str, Facts], leave_out: set[str]) -> list[Facts]:
    """One row (``since``, ``until`` exclusive, the facts) per run of releases whose facts,
    ``leave_out`` set aside, are equal."""
    general = {v: {k: r[k] for k in r if k not in leave_out} for v, r in releases.items()}
    return [{"since": a, "until": b, **f} for a, b, f in spans(list(releases), general)]


def grouped(
    releases: dict[str, Facts],
    part: str,
    as_row: Callable[[Any], Facts] | None = None,
    sort_keys: bool = False,
    by_release: bool = True,
) -> list[Facts]:
    """Per name under each release's ``part`` (an architecture, a model folder), its runs of
    equal rules; names with the same run and rule share one row (``since``, ``until``, the
    rule as ``as_row`` spells it, ``part``: the names), ordered by ``since`` then first name
    (``by_release``) or as first met."""
    versions = list(releases)
    found: dict[str, list[str]] = {}
    for name in sorted({n for r in releases.values() for n in r[part]}):
        per = {v: r[part].get(name) for v, r in releases.items()}
        for a, b, rule in spans(versions, per):
            row = {"since": a, "until": b, **(rule if as_row is None else as_row(rule))}
            found.setdefault(json.dumps(row, sort_keys=sort_keys), []).append(name)
    out = [{**json.loads(key), part: names} for key, names in found.items()]
    if by_release:
        out.sort(key=lambda r: (version_key(r["since"]), r[part][0]))
    return out


class Wheel:
    """A release wheel's files, read with zipfile (the package is never imported)."""

    def __init__(self, path: Path) -> None:
        self.zip = zipfile.ZipFile(path)
        self.version = path.name.split("-")[1]
        self.names = set(self.zip.namelist())

    def text(self, name: str) -> str | None:
        return self.zip.read(name).decode("utf-8") if name in self.names else None

    def tree(self, name: str) -> ast.Module | None:
        text = self.text(name)
        return None if text is None else ast.parse(text)


def compile_alone(
    fn: ast.FunctionDef, filename: str, fill: Callable[[], object] = lambda: None
) -> Callable[..., Any]:
    """One function of a release on its own, to be run on probe inputs: decorators and
    annotations stripped, every global name it uses bound to ``fill()`` (None, or a stub
    that answers anything)."""
    fn = copy.deepcopy(fn)
    fn.decorator_list, fn.returns = [], None
    for arg in [*fn.args.args, *fn.args.kwonlyargs]:
        arg.annotation = None
    names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} - set(dir(builtins))
    scope: dict[str, Any] = {name: fill() for name in names}
    module = ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[]))
    exec(compile(module, filename, "exec"), scope)
    function: Callable[..., Any] = scope[fn.name]
    return function
