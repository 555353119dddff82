"""The sharpness self-test's verdict, kept between runs, so a second ``check`` of the same
contract does not run the test again (docs/cli.md, "The sharpness verdict cache").

The verdict (the findings, as they are rendered) is a pure function of what the key holds:
the parsed contract (its path, every field, the line of every key), the identity (path, size,
mtime, inode) of the files the test reads beside it (``serving.draft_config`` and the draft's
weights), the tool (its version, and the name, size and modification time of each of its
files, so an edited checkout is a new tool), torch (the witness records' random streams),
the installed SGLang (what an unpinned engine resolves to) and Python. The test uses
fixed seeds and no Hypothesis.

One JSON file per key in ``$XDG_CACHE_HOME/eagle-contract/sharpness`` (beside the audit's
cache), written through :mod:`..outputs`. An entry that cannot be read or written changes
nothing: the test runs, and one note says so under ``-v`` (:func:`..version.cache_skipped`).
``EAGLE_CONTRACT_SHARPNESS_CACHE=off`` runs the test every time.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..contract.model import Contract
from ..errors import UsageError
from ..findings import Finding

ENV = "EAGLE_CONTRACT_SHARPNESS_CACHE"
OFF = frozenset({"0", "off", "no", "false"})
KIND = "eagle-contract sharpness verdict"
MAX_ENTRY = 1 << 22  # bytes: a verdict is a few KiB; a longer file is not ours
MAX_ENTRIES = 256  # entries kept; the oldest go first


def _folder() -> Path:
    from ..version import cache_root

    return cache_root() / "sharpness"


def cached_verdict(contract: Contract, run: Callable[[Contract], list[Finding]]) -> list[Finding]:
    """``run(contract)``'s findings: the kept verdict when there is one, else run and kept."""
    if os.environ.get(ENV, "").strip().lower() in OFF:
        return run(contract)
    try:
        key = _key(contract)
        path = _folder() / f"{key}.json"
    except (OSError, TypeError, ValueError) as exc:
        _warn(f"cannot key the sharpness verdict of {contract.path}: {exc}")
        return run(contract)
    found = _read(path, key)
    if found is None:
        found = run(contract)
        _write(path, key, contract, found)
    return found


def _key(contract: Contract) -> str:
    parts = {
        "contract": _plain(contract),
        "files": _files(contract),
        "tool": _tool(),
    }
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _plain(value: object) -> Any:
    """``value`` as JSON with one spelling: dataclasses by field, sets sorted, exact floats."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return sorted([str(k), _plain(v)] for k, v in value.items())
    if isinstance(value, frozenset | set):
        return sorted(json.dumps(_plain(v), sort_keys=True) for v in value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, str | int):
        return value
    raise TypeError(f"no stable form for a {type(value).__name__}")


def _files(contract: Contract) -> list[list[object]]:
    """Identity of the draft config and weights the layout check reads (none when the
    contract names no draft)."""
    serving = contract.serving
    if serving is None or serving.draft_config is None:
        return []
    config = serving.draft_config
    if config.is_dir():
        config = config / "config.json"
    weights = sorted(config.parent.glob("*.safetensors")) if config.parent.is_dir() else []
    return [_identity(p) for p in [config, *weights]]


def _identity(path: Path) -> list[object]:
    try:
        st = os.stat(path)
    except OSError as exc:
        return [str(path), f"missing: {exc.errno}"]
    return [os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ino]


@functools.cache
def _tool() -> list[object]:
    from ..version import __version__, installed

    return [
        __version__,
        _fingerprint(Path(__file__).resolve().parents[1]),
        installed("torch"),
        installed("sglang"),
        sys.version.split()[0],
    ]


def _fingerprint(root: Path) -> str:
    """Every file below ``root`` (the package) by name, size and modification time, as
    Python's own bytecode cache tells an edited source: an edit, a checkout or a reinstall
    is a new tool, without reading the package's 4 MB on every run."""
    code = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            st = os.stat(os.path.join(folder, name))
            where = os.path.relpath(os.path.join(folder, name), root)
            code.update(f"{where}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return code.hexdigest()


def _read(path: Path, key: str) -> list[Finding] | None:
    """The kept findings, or None when there are none (or none that read back whole)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_ENTRY + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        _warn(f"cannot read {path}: {exc.strerror or exc}")
        return None
    try:
        data = json.loads(raw.decode("utf-8")) if len(raw) <= MAX_ENTRY else None
        if not (isinstance(data, dict) and data.get("kind") == KIND and data.get("key") == key):
            return None
        return [Finding.from_dict(d) for d in data["findings"]]
    except (ValueError, TypeError, KeyError, RecursionError):
        return None  # cut short or not ours: run the test and write it again


def _write(path: Path, key: str, contract: Contract, found: list[Finding]) -> None:
    from ..outputs import inputs, write_text
    from ..version import prune

    entry = {
        "kind": KIND,
        "key": key,
        "contract": str(contract.path),
        "findings": [f.to_dict() for f in found],
    }
    training, serving = contract.training, contract.serving
    reads = inputs(
        contract.path,
        training.shards if training is not None else None,
        serving.draft_config if serving is not None else None,
    )
    try:
        write_text(
            path,
            json.dumps(entry, indent=1) + "\n",
            "",
            reads=reads,
            replace=True,
            parents=True,
        )
    except (UsageError, OSError, TypeError, ValueError) as exc:
        _warn(str(exc))
        return
    prune(path.parent, MAX_ENTRIES, "*.json")


def _warn(message: str) -> None:
    """One note under ``-v``: the self-test runs without its cache."""
    from ..version import cache_skipped

    cache_skipped("the sharpness cache", message)
