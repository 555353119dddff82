"""The package's version (pyproject.toml's), the user's cache folder, and what the caches
under it key on and how they are kept small."""

from __future__ import annotations

import os
from pathlib import Path

__version__ = "0.1.0"


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/eagle-contract`` (else ``~/.cache/eagle-contract``): the audit's
    cache, the sharpness verdicts and the schema's passes are folders under it."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "eagle-contract"


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
