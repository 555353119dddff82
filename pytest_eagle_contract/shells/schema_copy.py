"""A copy of the contract schema beside a user's contracts (``schema``, ``infer -o``, the
demo): written where it is missing or stale, never over another file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def schema_current(path: Path) -> bool:
    """Whether ``path`` is a file (not a link) that holds the contract schema as shipped."""
    from ..contract.model import schema_path

    try:
        if path.is_symlink() or not path.is_file():
            return False
        return path.read_bytes() == schema_path().read_bytes()
    except OSError:
        return False  # unreadable: the write says why


def write_schema(path: Path, flag: str, *, reads: Sequence[Path] = ()) -> Path:
    """A copy of the contract schema at ``path`` (an earlier copy is refreshed; any other
    file there is refused), for editors to find beside committed contracts. A copy that
    already holds the schema is left as it is (a read-only one too)."""
    from .. import outputs
    from ..contract.model import SCHEMA_MARK, schema_path

    if schema_current(path):
        return path  # nothing to write
    return outputs.write_text(
        path,
        schema_path().read_text("utf-8"),
        flag,
        reads=reads,
        ours=SCHEMA_MARK,
        kind="a copy of the contract schema",
        parents=True,
    )
