"""The package's version (pyproject.toml's) and the user's cache folder, for the caches and
reports that record what made them."""

from __future__ import annotations

import os
from pathlib import Path

__version__ = "0.1.0"


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/eagle-contract`` (else ``~/.cache/eagle-contract``): the audit's
    and the sharpness verdicts' caches are folders under it."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "eagle-contract"
