"""What the CLI does at the terminal: a closed pipe ended quietly (``eagle-contract inspect
--json | head``), and the progress line (progress.py) taken off before anything is printed."""

from __future__ import annotations

import os
from typing import Any, TextIO

from . import progress


class QuietPipe:
    """Wraps stdout: once the reader has gone (BrokenPipeError), the rest is dropped and
    the command still returns its own exit code."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._closed = False

    def write(self, text: str) -> int:
        progress.erase()
        if not self._closed:
            try:
                self._stream.write(text)
            except BrokenPipeError:
                self._close()
        return len(text)

    def flush(self) -> None:
        if not self._closed:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._close()

    def _close(self) -> None:
        self._closed = True
        devnull = os.open(os.devnull, os.O_WRONLY)  # what Python still flushes at exit
        os.dup2(devnull, self._stream.fileno())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class Erasing:
    """Wraps stderr: the progress line is taken off before a message is written (``raw`` is
    the stream itself, which the line is drawn on)."""

    def __init__(self, stream: TextIO) -> None:
        self.raw = stream

    def write(self, text: str) -> int:
        progress.erase()
        return self.raw.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)
