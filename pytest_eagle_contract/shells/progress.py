"""Progress for long commands: one status line on stderr, only where a person watches it.

The line is drawn when stderr is a terminal (not a pipe, a file or a CI log), ``TERM`` is not
``dumb``, ``CI`` is unset and ``-q`` was not given, and only once the work has gone on for
``DELAY`` seconds (a quick command draws nothing). It reads ``check: checking 3/12  4 s``: the
command, its phase, a count where the phase has one, and the phase's time so far, redrawn by
a small thread every ``TICK`` seconds, so a phase that computes for half a minute without
a count still shows it is alive. Anything the command prints (stdout, through
``terminal.QuietPipe``) erases the line first; the thread draws it again on its next tick.
When the outermost phase ends the line is erased: what stays on the terminal is the output.

    with phase("probe", "running the target"):       # a phase without a count
        ...
    for unit in steps(units, len(units), "checking"):  # a phase counted i/N
        ...

git and tqdm do the same (progress on stderr, only on a terminal; docs/cli.md, "Progress").
No third-party bar is used: transformers' own are turned off around the calls that would
draw them (models/quiet.py).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TextIO, TypeVar

T = TypeVar("T")

DELAY = 1.0
"""Seconds of work before the line is first drawn (``EAGLE_CONTRACT_PROGRESS_DELAY``
overrides it: 0 draws at once, as the tests do)."""
TICK = 0.25
"""Seconds between two redraws."""

_quiet = False
_lock = threading.RLock()


def set_quiet(quiet: bool) -> None:
    """``-q``: no progress at all for the rest of this process."""
    global _quiet
    _quiet = quiet


def wanted(stream: TextIO | None = None) -> bool:
    """Whether a status line may be drawn on ``stream`` (default: stderr)."""
    stream = stream if stream is not None else sys.stderr
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False
    return tty and not _quiet and os.environ.get("TERM", "") != "dumb" and not os.environ.get("CI")


class _Status:
    """The one line of this process: the phases open now (innermost last), drawn by a
    thread while the outermost is open."""

    def __init__(self) -> None:
        self.stack: list[list[object]] = []  # [label, done, total, started]
        self.stream: TextIO | None = None
        self.drawn = False
        self.began = 0.0
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def text(self, width: int) -> str:
        label, done, total, started = self.stack[-1]
        assert isinstance(started, float)
        if len(self.stack) > 1:  # the command, then what it does now
            label = f"{self.stack[0][0]}: {label}"
        count = f" {done}/{total}" if total else ""
        line = f"{label}{count}  {_elapsed(time.monotonic() - started)}"
        return line if len(line) < width else line[: width - 2] + "…"

    def draw(self) -> None:
        with _lock:
            if not self.stack or self.stream is None:
                return
            if time.monotonic() - self.began < _delay():
                return
            try:
                width = os.get_terminal_size(self.stream.fileno()).columns
            except (OSError, ValueError, AttributeError):
                width = 0
            width = width if width >= 20 else 80  # a terminal that gives no size (0)
            try:
                self.stream.write("\r\x1b[K" + self.text(width))
                self.stream.flush()
            except (OSError, ValueError):  # the terminal went away: draw nothing more
                self.stack.clear()
                return
            self.drawn = True

    def erase(self) -> None:
        with _lock:
            if self.drawn and self.stream is not None:
                try:
                    self.stream.write("\r\x1b[K")
                    self.stream.flush()
                except (OSError, ValueError):
                    pass
            self.drawn = False

    def run(self) -> None:
        while not self.stop.wait(TICK):
            self.draw()


_status = _Status()


def erase() -> None:
    """Take the line off the terminal before something else is written there (the thread
    draws it again on its next tick)."""
    if _status.drawn:
        _status.erase()


@contextmanager
def phase(label: str, total: int | None = None) -> Iterator[_Counter]:
    """Show ``label`` (and ``done/total`` through the yielded counter) while the block runs;
    nested phases show the innermost. Nothing at all unless :func:`wanted`."""
    if not wanted():
        yield _Counter(None)
        return
    entry: list[object] = [label, 0, total, time.monotonic()]
    with _lock:
        outermost = not _status.stack
        _status.stack.append(entry)
        if outermost:
            _status.stream = getattr(sys.stderr, "raw", sys.stderr)  # not terminal.Erasing
            _status.began = time.monotonic()
            _status.stop.clear()
            _status.thread = threading.Thread(target=_status.run, daemon=True)
            _status.thread.start()
    try:
        yield _Counter(entry)
    finally:
        with _lock:
            if entry in _status.stack:
                _status.stack.remove(entry)
            last = not _status.stack
        if last:
            _status.stop.set()
            if _status.thread is not None:
                _status.thread.join()
            _status.erase()
            _status.stream = None


class _Counter:
    """What a phase's block advances: ``done/total``."""

    def __init__(self, entry: list[object] | None) -> None:
        self._entry = entry

    def advance(self, n: int = 1) -> None:
        if self._entry is not None:
            done = self._entry[1]
            assert isinstance(done, int)
            self._entry[1] = done + n


def steps(items: Iterable[T], total: int, label: str) -> Iterator[T]:
    """Yield ``items``, counting them ``label i/total`` on the status line."""
    with phase(label, total) as counter:
        for item in items:
            yield item
            counter.advance()


def _delay() -> float:
    try:
        return max(0.0, float(os.environ.get("EAGLE_CONTRACT_PROGRESS_DELAY", DELAY)))
    except ValueError:
        return DELAY


def _elapsed(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole} s" if whole < 60 else f"{whole // 60}:{whole % 60:02d}"
