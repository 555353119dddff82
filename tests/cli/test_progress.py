"""Progress on a terminal, none in a pipe (docs/cli.md, "Output"): the command runs with its
stderr on a pseudo-terminal, as in a person's shell, or on a pipe, as in CI or `2>log`."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_eagle_contract.shells import demo

ERASE = b"\r\x1b[K"


@pytest.fixture(scope="module")
def shard(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One demo shard and the target's weights."""
    root = tmp_path_factory.mktemp("progress")
    good, _ = demo.write_demo_shards(root, shards=1, save_target=True)
    (path,) = sorted(good.rglob("*.ckpt"))
    return path, root / "target"


def _run(args: list[str], *, tty: bool, env: dict[str, str]) -> tuple[int, bytes, bytes]:
    """``eagle-contract ARGS``: stdout on a pipe, stderr on a pseudo-terminal (``tty``) or a
    pipe; returns the exit code, stdout and stderr as written."""
    exe = Path(sys.executable).with_name("eagle-contract")
    full = {k: v for k, v in os.environ.items() if k != "CI"}  # progress never shows in CI
    full.update({"TERM": "xterm", "PYTHONWARNINGS": "ignore", **env})
    if not tty:
        res = subprocess.run([str(exe), *args], capture_output=True, env=full, timeout=300)
        return res.returncode, res.stdout, res.stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen([str(exe), *args], stdout=subprocess.PIPE, stderr=slave, env=full)
    os.close(slave)
    seen = bytearray()
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the command closed its end
            break
        if not data:
            break
        seen += data
    os.close(master)
    assert proc.stdout is not None
    out = proc.stdout.read()
    return proc.wait(timeout=300), out, bytes(seen)


@pytest.mark.slow
def test_a_terminal_sees_progress_and_the_output_stays_clean(shard: tuple[Path, Path]) -> None:
    path, target = shard
    args = ["identify", str(path), "--target-model", str(target)]
    code, out, err = _run(args, tty=True, env={"EAGLE_CONTRACT_PROGRESS_DELAY": "0"})
    assert code == 0, err
    assert ERASE in err and b"identify: loading the target" in err, err
    assert err.rstrip(b"\r\n").endswith(ERASE), "the line is erased at the end"
    assert b"\x1b" not in out and b"\r" not in out  # stdout holds the result only
    assert b"slot" in out and b"residual:2" in out


@pytest.mark.slow
def test_a_pipe_sees_no_progress(shard: tuple[Path, Path]) -> None:
    path, target = shard
    args = ["identify", str(path), "--target-model", str(target)]
    code, out, err = _run(args, tty=False, env={"EAGLE_CONTRACT_PROGRESS_DELAY": "0"})
    assert code == 0, err
    assert b"\r" not in err and b"\x1b" not in err and b"loading" not in err, err
    assert b"residual:2" in out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flag", "env"),
    [("-q", {}), ("", {"TERM": "dumb"}), ("", {"CI": "true"})],
    ids=["-q", "TERM=dumb", "CI"],
)
def test_no_progress_when_asked_or_where_it_cannot_be_drawn(
    shard: tuple[Path, Path], flag: str, env: dict[str, str]
) -> None:
    path, target = shard
    args = ["identify", str(path), "--target-model", str(target), *([flag] if flag else [])]
    code, out, err = _run(args, tty=True, env={"EAGLE_CONTRACT_PROGRESS_DELAY": "0", **env})
    assert code == 0, err
    assert ERASE not in err and b"loading the target" not in err, err
    assert b"residual:2" in out


def test_a_quick_command_draws_nothing_on_a_terminal() -> None:
    """The line waits a second (DELAY): a command done sooner leaves the terminal as it was."""
    code, out, err = _run(["explain", "EC401"], tty=True, env={})
    assert code == 0
    assert ERASE not in err and b"\x1b" not in err
    assert b"EC401" in out


def test_transformers_bars_are_off_for_the_call_and_as_they_were_after() -> None:
    """The tool turns transformers' bars off around its own calls only: a user who turned
    them off (or on) keeps that setting (models/quiet.py)."""
    import importlib

    from transformers.utils import logging

    from pytest_eagle_contract.models.quiet import no_progress_bars

    hub = importlib.import_module("huggingface_hub.utils.tqdm")
    before = logging.is_progress_bar_enabled(), dict(hub.progress_bar_states)
    try:
        for users in (True, False):
            (logging.enable_progress_bar if users else logging.disable_progress_bar)()
            hub.progress_bar_states["some.group"] = users
            saved = dict(hub.progress_bar_states)
            with no_progress_bars():
                assert not logging.is_progress_bar_enabled()
            assert logging.is_progress_bar_enabled() is users
            assert hub.progress_bar_states == saved
            with pytest.raises(RuntimeError), no_progress_bars():
                raise RuntimeError("a failing call restores them too")
            assert logging.is_progress_bar_enabled() is users
    finally:
        (logging.enable_progress_bar if before[0] else logging.disable_progress_bar)()
        hub.progress_bar_states.clear()
        hub.progress_bar_states.update(before[1])
