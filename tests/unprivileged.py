"""Run a command as a user without root's power to write anywhere (issue 41): what a CI
runner's unprivileged user, a read-only home or a read-only checkout look like.

Three ways, the first that works here:

- ``user``: this process is not root; the mode bits already bind it.
- ``nobody``: root, and the user ``nobody`` (65534) can start this interpreter and import
  the package and torch (a CI image whose Python lives under /usr): the child becomes nobody.
- ``no-caps``: root, where nobody cannot reach the interpreter (one built under /root, mode
  700). A stand-in for another user: the child stays uid 0 but gives up every capability
  (the bounding set, then the effective, permitted and inheritable sets, as
  ``setpriv --bounding-set=-all --inh-caps=-all`` does), so without CAP_DAC_OVERRIDE the
  kernel checks the mode bits for it as for any owner: a folder of mode 555 cannot be
  written, one of mode 000 cannot be read, and an exec'd child gets no capability back.

:func:`drop` is the ``preexec_fn`` (or, in a forked run, the call) that does it; the
folders such a run reads must be readable by it (:func:`open_dir`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

NOBODY = 65534
_PR_CAPBSET_DROP = 24
_CAP_V3 = 0x20080522


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _no_caps() -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for cap in range(last + 1):  # first, while CAP_SETPCAP is still held
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap})")
    header, data = _Header(_CAP_V3, 0), (_Data * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _works(become: object) -> bool:
    probe = "import torch, pytest_eagle_contract.shells.cli; open('/etc/passwd').close()"
    try:
        done = subprocess.run(
            [sys.executable, "-c", probe],
            preexec_fn=become,  # type: ignore[arg-type]
            capture_output=True,
            cwd="/",
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


@functools.cache
def how() -> str | None:
    """``user``, ``nobody`` or ``no-caps`` (see the module), or None: none works here."""
    if os.geteuid() != 0:
        return "user"
    if _works(_nobody):
        return "nobody"
    if _works(_no_caps):
        return "no-caps"
    return None


def drop() -> None:
    """In the child: become what :func:`how` says (nothing for ``user``)."""
    kind = how()
    if kind == "nobody":
        _nobody()
    elif kind == "no-caps":
        _no_caps()
    elif kind is None:
        raise RuntimeError("no way to run unprivileged here")


def open_dir(prefix: str) -> Path:
    """A fresh folder under the system's temporary folder that ``nobody`` can enter
    (pytest's own are mode 700); the caller removes it (:func:`remove`)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


def readable(root: Path) -> None:
    """Everything under ``root`` readable (and its folders enterable) by anyone."""
    for here, _dirs, files in os.walk(root):
        os.chmod(here, 0o755)
        for name in files:
            p = os.path.join(here, name)
            if not os.path.islink(p):
                os.chmod(p, 0o644)


def read_only(root: Path, keep: tuple[str, ...] = ()) -> None:
    """``chmod -R a-w root``, but for the entries ``keep`` right under it (``root`` itself
    is read-only too: nothing new can be made beside them)."""
    for here, dirs, files in os.walk(root):
        if Path(here) == root:
            dirs[:] = [d for d in dirs if d not in keep]
            files = [f for f in files if f not in keep]
        for name in files:
            p = os.path.join(here, name)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode & ~0o222)
        os.chmod(here, os.stat(here).st_mode & ~0o222)


def remove(root: Path) -> None:
    """Remove a tree this module made read-only or unreadable (modes back first: a
    non-root owner can neither list nor empty such a folder)."""
    import shutil

    os.chmod(root, 0o755)
    for here, dirs, _ in os.walk(root):
        for name in dirs:  # before os.walk lists them
            p = os.path.join(here, name)
            if not os.path.islink(p):
                os.chmod(p, 0o755)
    shutil.rmtree(root, ignore_errors=True)
