"""What the engine release tests (``tox -e *-releases``) share: the folder of release wheels
(or sdists) an environment variable names, with ``scripts/`` (the rule generators) put on the
path, and one release's wheel in it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def wheel_folder(variable: str, project: str, env: str, files: str = "wheels") -> Path:
    """The folder ``$variable`` names, ``scripts/`` importable; without it the calling test
    module is skipped (never part of the default test run)."""
    wheels = os.environ.get(variable)
    if not wheels:
        pytest.skip(
            f"set {variable} to a folder of {project} {files} (tox -e {env})",
            allow_module_level=True,
        )
    sys.path.insert(0, str(SCRIPTS))
    return Path(wheels)


def one_wheel(folder: Path, name: str, release: str) -> Path:
    """The one ``{name}-{release}-*.whl`` in ``folder``."""
    (path,) = folder.glob(f"{name}-{release}-*.whl")
    return path
