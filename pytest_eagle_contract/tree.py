"""Files under a folder, walked without recursion.

Python 3.11's ``Path.rglob`` and ``os.walk`` recurse once per level, so a folder tree a
thousand levels deep ends in ``RecursionError``. This walk keeps its own stack, follows a
linked folder once (a link back up the tree is not a loop), and skips what it cannot list.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Iterator
from pathlib import Path


def walk(root: Path) -> Iterator[tuple[Path, list[str], list[str]]]:
    """``(folder, sub-folder names, file names)`` for ``root`` and every folder below it,
    top-down; a folder reached twice (through links) is listed once."""
    seen: set[tuple[int, int]] = set()
    stack = [root]
    while stack:
        here = stack.pop()
        try:
            st = here.stat()
            with os.scandir(here) as entries:
                listed = list(entries)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        dirs: list[str] = []
        files: list[str] = []
        for entry in listed:
            try:
                folder = entry.is_dir()
            except OSError:  # a link to itself, a name that vanished: not a folder
                folder = False
            (dirs if folder else files).append(entry.name)
        yield here, dirs, files
        stack.extend(here / d for d in sorted(dirs, reverse=True))


def files_matching(root: Path, patterns: Iterable[str], regular: bool = True) -> list[Path]:
    """Files under ``root`` whose names match one of ``patterns`` (``*.ckpt``): regular
    files only, or with ``regular=False`` everything so named (folders, FIFOs, devices,
    dangling links), for a caller that reports them."""
    wanted = tuple(patterns)
    out = []
    for here, dirs, files in walk(root):
        for name in files if regular else [*dirs, *files]:
            if any(fnmatch.fnmatchcase(name, p) for p in wanted):
                path = here / name
                if not regular or path.is_file():
                    out.append(path)
    return out
