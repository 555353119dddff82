"""Per-file summaries kept between audits, keyed by file identity.

One JSON-lines file per contract content (and tool version) in the cache folder (default
``$XDG_CACHE_HOME/eagle-contract/audit``, never inside a shard folder). Each finished file
is appended and flushed at once, so an interrupted audit resumes where it stopped; a file
whose path, size, mtime or inode changed is read again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from ..errors import UsageError
from ..version import __version__, cache_root
from .report import findings_of
from .summaries import FileSummary

Identity = tuple[str, int, int, int]
MAX_LINE = 1 << 20  # a summary line is a few KiB; a longer one is not ours


def default_dir() -> Path:
    return cache_root() / "audit"


def identity(path: str) -> Identity:
    st = os.stat(path)
    return (path, st.st_size, st.st_mtime_ns, st.st_ino)


class Cache:
    """The summaries of one contract's audits, and the file new ones are appended to.

    ``folder`` is the one ``--cache`` names, which must be usable (a usage error names it
    when it cannot be read or written), or None for the default folder, which is
    best-effort: where it cannot be named, made, read or written the audit reads every shard
    and keeps nothing, with one note under ``-v``."""

    def __init__(self, folder: Path | None, contract_text: bytes, roots: Sequence[Path]) -> None:
        self.asked = folder is not None
        self.path: Path | None = None
        self._known: dict[str, FileSummary] = {}
        self._lines = 0
        self._out: IO[str] | None = None
        self.problem = ""  # why summaries stopped being kept (a full disk, say); "" if not
        try:
            where = folder if folder is not None else default_dir()
        except OSError as exc:
            self._give_up(str(exc))
            return
        real = Path(os.path.realpath(where))
        for root in roots:
            top = Path(os.path.realpath(root))
            if top.is_dir() and (real == top or real.is_relative_to(top)):
                if folder is None:  # XDG_CACHE_HOME inside the shard folder
                    self._give_up(f"{real} is inside the shard folder {root}")
                    return
                raise UsageError(
                    f"--cache {folder} is inside the shard folder {root}: the audit never "
                    "writes there; choose another folder"
                )
        key = hashlib.sha256(contract_text + b"\0" + __version__.encode()).hexdigest()[:20]
        self.path = real / f"{key}.jsonl"
        self._load()
        self._open()

    @property
    def kept(self) -> bool:
        """Whether the summaries of this audit are being kept."""
        return self.path is not None and not self.problem

    def _give_up(self, why: str) -> None:
        """Keep nothing more (the default folder: one note under ``-v``)."""
        self.problem = self.problem or why
        if not self.asked:
            from ..version import cache_skipped

            cache_skipped("the audit cache", why)

    def _load(self) -> None:
        assert self.path is not None
        try:
            f = open(self.path, encoding="utf-8")
        except FileNotFoundError:
            return
        except OSError as exc:
            if self.asked:
                raise UsageError(f"--cache {self.path}: {exc.strerror or exc}") from None
            self._give_up(f"cannot read {self.path}: {exc.strerror or exc}")
            return
        with f:
            try:
                while line := f.readline(MAX_LINE + 1):
                    self._lines += 1
                    try:
                        summary = FileSummary.from_dict(json.loads(line))
                        findings_of(summary)  # every finding rebuilds
                    except (ValueError, TypeError, RecursionError):
                        continue  # a line cut short by an interruption, or not ours
                    self._known[summary.path] = summary
            except OSError as exc:  # EISDIR, EIO: what was read so far stays
                self._give_up(f"cannot read {self.path}: {exc.strerror or exc}")

    def _open(self) -> None:
        """Open the file for appending now: a folder that cannot be written is known before
        any shard is read (``--cache``: a usage error)."""
        assert self.path is not None
        if self.problem:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._out = open(self.path, "a", encoding="utf-8")
        except OSError as exc:
            if self.asked:
                why = f"--cache {self.path.parent}: cannot write: {exc.strerror or exc}"
                raise UsageError(why) from None
            self._give_up(f"cannot write {self.path}: {exc.strerror or exc}")

    def get(self, path: str, label: str) -> FileSummary | None:
        """The kept summary of ``path`` (shown as ``label``) when the file is still the
        same one."""
        kept = self._known.get(path)
        return kept if kept is not None and kept.label == label and _same(kept) else None

    def put(self, summary: FileSummary) -> None:
        """Keep ``summary`` now (appended and flushed: it survives an interruption). A cache
        that cannot be written is given up (``problem`` says why); the audit goes on."""
        self._known[summary.path] = summary
        if self._out is None or self.problem:
            return
        try:
            self._out.write(json.dumps(summary.to_dict()) + "\n")
            self._out.flush()
            self._lines += 1
        except OSError as exc:
            self._give_up(f"cannot write the audit cache {self.path}: {exc.strerror or exc}")

    def close(self) -> None:
        """Close; compact the file when it holds lines of changed, gone or repeated files."""
        if self._out is not None:
            try:
                self._out.close()
            except OSError as exc:
                self._give_up(f"cannot write {self.path}: {exc.strerror or exc}")
            self._out = None
        current = [s for p, s in self._known.items() if _same(s)]
        if self.problem or self.path is None or self._lines <= len(current):
            return
        tmp = self.path.with_suffix(".tmp")
        try:  # compaction is tidiness: on failure the longer file stays, still valid
            tmp.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in current), "utf-8")
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)


def _same(summary: FileSummary) -> bool:
    try:
        return identity(summary.path) == summary.identity
    except OSError:
        return False
