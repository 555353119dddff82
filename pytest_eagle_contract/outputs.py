"""Every file the tool writes goes through here, under one set of rules:

- never onto what the run reads: a contract, a shard or anything under a shard folder, a
  capture, the target model (``inputs``);
- an existing file is replaced only where the command expects it (``replace``: ``infer -o
  --force``, a baseline update, a capture of the same ids), where it is this tool's own
  earlier output (``ours``: bytes its first 4 KiB hold, as a previous report does) or empty;
- never onto a folder, a device or a FIFO (``/dev/full``), through a link to nothing, or
  onto a file named like a shard; never into a folder this user cannot write (refused
  before the work, not after it);
- atomically: a temporary file beside the target, then ``os.replace``, so a full disk or an
  error leaves the old file as it was (or none), never half of one;
- in a folder output, never through a link inside it (it could lead out of the folder).

Every refusal is a :class:`UsageError` (exit code 2) that names the flag and the path.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from .errors import UsageError

if TYPE_CHECKING:
    from typing import Unpack

SHARD_SUFFIXES = (".ckpt", ".gz", ".pt", ".pth", ".bin", ".safetensors", ".arrow")
_HEAD = 4096


def inputs(*paths: Path | str | None) -> tuple[Path, ...]:
    """The resolved paths a run reads (files, and folders that hold shards)."""
    return tuple(Path(os.path.realpath(p)) for p in paths if p is not None)


def _refuse(flag: str, path: Path, why: str) -> UsageError:
    return UsageError(f"{flag} {path}: {why}" if flag else f"{path}: {why}")


class Rules(TypedDict, total=False):
    """What :func:`checked_output` allows (the module's rules): ``reads``, the run's :func:`inputs`;
    ``replace``, an existing file may be replaced; ``ours``, it may where its first 4 KiB
    hold these bytes (``kind``: what such a file is, for the refusal; default a report of
    this tool); ``force``, the flag that allows replacing (named in the refusal);
    ``parents``, its folder may be missing (:func:`write_text` creates it)."""

    reads: Sequence[Path]
    replace: bool
    ours: bytes | None
    kind: str
    force: str
    parents: bool


def _not_input(flag: str, path: Path, reads: Iterable[Path]) -> Path:
    """``path`` resolved, refused when it is an input of the run or inside one."""
    real = Path(os.path.realpath(path))
    for item in reads:
        if real == item or (item.is_dir() and real.is_relative_to(item)):
            where = "is" if real == item else f"is inside {item}, "
            raise _refuse(flag, path, f"{where} an input of this run; write somewhere else")
    return real


def checked_output(path: Path, flag: str, **rules: Unpack[Rules]) -> Path:
    """The file ``path`` names (links resolved) once it passes the :class:`Rules`; a path
    that cannot even be looked at (under a folder of another user's) is refused too."""
    try:
        return _checked(path, flag, rules)
    except OSError as exc:  # pathlib's is_dir() and exists() raise EACCES
        raise _refuse(flag, path, f"cannot write: {exc.strerror or exc}") from None


def _checked(path: Path, flag: str, rules: Rules) -> Path:
    if path.is_symlink() and not path.exists():
        raise _refuse(flag, path, "is a link to nothing; refusing to write through it")
    real = _not_input(flag, path, rules.get("reads", ()))
    if real.is_dir():
        raise _refuse(flag, path, "is a folder; give a file name")
    if real.exists():
        if not real.is_file():
            raise _refuse(flag, path, "is not a regular file (a device or a FIFO)")
        if real.name.endswith(SHARD_SUFFIXES):
            raise _refuse(flag, path, "looks like a shard; it is never replaced")
        empty = real.stat().st_size == 0  # nothing to lose (a `mktemp` name)
        ours = rules.get("ours")
        if not (rules.get("replace") or empty or (ours is not None and ours in _head(real))):
            kind = rules.get("kind", "a report of this tool")
            what = "the file exists" + (f" and is not {kind}" if ours else "")
            force = rules.get("force")
            also = f", or add {force}" if force else ""
            raise _refuse(flag, path, f"{what}; remove it or choose another path{also}")
    if not (rules.get("parents") or real.parent.is_dir()):
        raise UsageError(f"{flag}: folder {path.parent} does not exist")
    _writable(real.parent, flag, path)
    return real


def _writable(folder: Path, flag: str, path: Path) -> None:
    """Refuse now, before any work, a folder that cannot be written (read-only, or another
    user's): the nearest one that exists, where :func:`write_text` would create the rest."""
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    if not folder.is_dir():
        raise _refuse(flag, path, f"cannot write: {folder} is a file, not a folder")
    if os.access(folder, os.W_OK | os.X_OK):
        return
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    why = "on a read-only file system" if read_only else "not writable by this user"
    raise _refuse(flag, path, f"cannot write: {folder} is {why}")


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(_HEAD)
    except OSError:
        return b""


def write_text(path: Path, text: str, flag: str, **rules: Unpack[Rules]) -> Path:
    """Check ``path`` (:func:`checked_output`) and write ``text`` to it atomically, UTF-8."""
    real = checked_output(path, flag, **rules)
    if rules.get("parents"):
        try:
            real.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _refuse(flag, path, f"cannot create its folder: {exc.strerror or exc}") from None
    with atomic(real, flag) as tmp:
        tmp.write_bytes(text.encode("utf-8"))
    return real


@contextmanager
def atomic(real: Path, flag: str) -> Iterator[Path]:
    """A temporary path beside ``real``, moved onto it when the block ends; on any error
    the temporary file is removed and ``real`` is left as it was. Write errors (a full
    disk, no permission) become a :class:`UsageError`."""
    try:
        fd, name = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    except OSError as exc:
        raise _refuse(flag, real, f"cannot write: {exc.strerror or exc}") from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, _mode(real))
        os.replace(tmp, real)
    except (OSError, RuntimeError) as exc:  # torch.save wraps write errors in RuntimeError
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise _refuse(flag, real, f"cannot write: {text.splitlines()[0][:200]}") from None
    except Exception as exc:
        if type(exc).__name__ != "SafetensorError":
            raise
        raise _refuse(flag, real, f"cannot write: {str(exc)[:200]}") from None
    finally:
        tmp.unlink(missing_ok=True)


def _mode(real: Path) -> int:
    """An existing file's permissions, else what the umask gives a new file."""
    try:
        return os.stat(real).st_mode & 0o7777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def folder(
    path: Path, flag: str, *, reads: Sequence[Path] = (), within: Iterable[str] = ()
) -> Path:
    """Check a folder the tool writes files in and create it: not a file, not an input nor
    inside one, and no link at or under the entries ``within`` it that will be written."""
    try:
        if path.exists() and not path.is_dir():
            raise _refuse(flag, path, "is a file, not a folder")
        real = _not_input(flag, path, reads)
        for name in within:
            _no_links(path, path / name, flag)
        real.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # pathlib's exists() raises EACCES
        raise _refuse(flag, path, f"cannot create: {exc.strerror or exc}") from None
    return real


def _no_links(root: Path, top: Path, flag: str) -> None:
    if top.is_symlink():
        raise _refuse(flag, root, f"{top} is a link; refusing to write through it")
    if not top.is_dir():
        return
    from .tree import walk

    for here, dirs, files in walk(top):
        for name in dirs + files:
            if os.path.islink(os.path.join(here, name)):
                link = Path(here, name)
                raise _refuse(flag, root, f"{link} is a link; refusing to write through it")
