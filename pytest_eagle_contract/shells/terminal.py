"""What the CLI does at the terminal: a progress line for long work, a closed pipe ended
quietly (``eagle-contract inspect --json | head``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TextIO, TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], total: int, label: str) -> Iterator[T]:
    """Yield ``items``, drawing ``label i/total`` on stderr when it is a terminal (never in
    CI logs, pipes or files); the line is erased at the end."""
    shown = sys.stderr.isatty() and not os.environ.get("CI") and total > 1
    for n, item in enumerate(items, 1):
        if shown:
            sys.stderr.write(f"\r{label} {n}/{total}")
            sys.stderr.flush()
        yield item
    if shown:
        sys.stderr.write("\r" + " " * (len(label) + 2 * len(str(total)) + 2) + "\r")
        sys.stderr.flush()


class QuietPipe:
    """Wraps stdout: once the reader has gone (BrokenPipeError), the rest is dropped and
    the command still returns its own exit code."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._closed = False

    def write(self, text: str) -> int:
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
