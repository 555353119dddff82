"""The package's version (pyproject.toml's), the user's cache folder, what the caches
under it key on, how they are kept small, and what a run says when one cannot be used.

Every cache is best-effort: a folder that cannot be made, read or written (a read-only or
foreign home, ``XDG_CACHE_HOME`` on a file, a read-only file system) is skipped, and the run
goes on without it, with the same verdict; :func:`cache_skipped` keeps one note per cache,
printed under ``-v`` (docs/security.md, "Caches")."""

from __future__ import annotations

import os
import sys
from pathlib import Path

__version__ = "0.1.0"

REPOSITORY = "pytest-eagle-contract/pytest-eagle-contract"
"""Where the project lives (GitHub owner/name): the one place it is spelled. The docs links
of findings, the JSON Schemas' ``$id`` and the install lines in docs/ci.md, README.md,
action.yml and .pre-commit-hooks.yaml are tested against it (tests/unit/test_ci_snippets.py)."""
HOME = f"https://github.com/{REPOSITORY}"
RAW = f"https://raw.githubusercontent.com/{REPOSITORY}/main"
"""Files as served raw (JSON as JSON, not a page): what an editor fetches a schema from."""
RULES_URL = f"{HOME}/blob/main/docs/rules.md"
"""The rules' page, the one base of every finding's docs link (``#ec401-norm-out-of-bounds``
is its heading's anchor, on GitHub and on the docs site alike)."""


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/eagle-contract`` (else ``~/.cache/eagle-contract``): the audit's
    cache, the sharpness verdicts and the schema's passes are folders under it. A relative
    ``XDG_CACHE_HOME`` is ignored, as the XDG spec says (it would name a folder under
    whatever the working folder is); OSError when no absolute folder can be named (no
    ``HOME`` and no password entry)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            raise OSError("no home folder to keep a cache in (set XDG_CACHE_HOME)")
        base = os.path.join(home, ".cache")
    return Path(base) / "eagle-contract"


_verbosity = 0
_notes: dict[str, str] = {}  # cache -> the one note of this run


def set_verbosity(level: int) -> None:
    """``-v`` given this many times: at 1 or more, a cache's note is printed when it is
    taken (the CLI); at 0 it is only kept (the plugin prints the kept ones at the end)."""
    global _verbosity
    _verbosity = level


def cache_skipped(cache: str, problem: BaseException | str) -> None:
    """``cache`` (``"the schema cache"``, say) cannot be used this run: note it once (a
    note, never an error: the run does the work the cache would have saved)."""
    if cache in _notes:
        return
    if isinstance(problem, OSError):
        where = f"{problem.filename}: " if problem.filename else ""
        why = f": {where}{problem.strerror}" if problem.strerror else f": {problem}"
    else:
        why = f": {problem}"
    _notes[cache] = f"{cache} is skipped{why}; the run goes on without it"
    if _verbosity > 0:
        print(f"eagle-contract: note: {_notes[cache]}", file=sys.stderr)


def cache_notes() -> list[str]:
    """The notes of the caches skipped so far in this process."""
    return list(_notes.values())


def installed(package: str) -> list[object] | None:
    """Which ``package`` is installed, for a cache key: the path, size, mtime and inode of
    its ``__init__`` (an upgrade or a reinstall rewrites it); None when it is not
    importable. A stat: asking importlib.metadata for the version costs its 20-60 ms
    import on every run."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            return None
        st = os.stat(spec.origin)
    except (ImportError, ValueError, OSError):
        return None
    return [os.path.realpath(spec.origin), st.st_size, st.st_mtime_ns, st.st_ino]


def prune(folder: Path, keep: int, pattern: str = "*") -> None:
    """Keep the newest ``keep`` entries of a cache folder (tidiness: a failure keeps more)."""
    try:
        entries = sorted(folder.glob(pattern), key=lambda p: p.stat().st_mtime_ns)
        for old in entries[:-keep]:
            old.unlink(missing_ok=True)
    except OSError:
        pass
