"""Contracts the JSON Schema already passed, remembered between runs, so that a second run
of the same contract does not import jsonschema (with ``referencing``, ``attrs`` and the
metaschemas: 40-60 ms of every command's start-up, docs/audit.md "The read path").

The schema's verdict is a pure function of what the key holds: the contract's composed
YAML data (every value, as the validator sees it), the schema's text and which jsonschema
is installed. Only a pass is kept (a failure is reported with its lines, and its cost does
not matter). One empty file per key in ``$XDG_CACHE_HOME/eagle-contract/valid``; a
folder that cannot be made, read or written changes nothing but the time: the schema runs,
and one note says so under ``-v`` (:func:`..version.cache_skipped`).
``EAGLE_CONTRACT_SCHEMA_CACHE=off`` runs it every time.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ..errors import UsageError

ENV = "EAGLE_CONTRACT_SCHEMA_CACHE"
_OFF = frozenset({"0", "off", "no", "false"})
MAX_ENTRIES = 256  # the newest kept


def key(data: Any, schema_text: str) -> str | None:
    """The key of ``data``'s verdict under ``schema_text``; None when there is no cache
    (turned off, or jsonschema not installed: the validator then says so)."""
    if os.environ.get(ENV, "").strip().lower() in _OFF:
        return None
    from ..version import installed

    validator = installed("jsonschema")
    if validator is None:
        return None
    try:
        text = json.dumps([data, schema_text, validator], sort_keys=True, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def passed(k: str) -> bool:
    """Whether the schema passed the data of key ``k`` before (False where the cache
    cannot be read: a folder of another user's, say)."""
    try:
        return (_folder() / k).is_file()
    except OSError as exc:  # pathlib raises EACCES (only ENOENT and the like mean False)
        _skipped(exc)
        return False


def remember(k: str, contract: Path) -> None:
    """Keep that the schema passed the data of key ``k`` (read from ``contract``)."""
    from ..outputs import inputs, write_text
    from ..version import prune

    try:
        where = _folder() / k
        write_text(where, "", "", reads=inputs(contract), replace=True, parents=True)
    except (UsageError, OSError) as exc:  # a cache that cannot be written changes nothing
        _skipped(exc)
        return
    prune(where.parent, MAX_ENTRIES)


def _skipped(problem: Exception) -> None:
    from ..version import cache_skipped

    cache_skipped("the schema cache", problem)


def _folder() -> Path:
    from ..version import cache_root

    return cache_root() / "valid"
