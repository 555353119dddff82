"""Exit codes of every command, defined once: the enum, and the epilog every ``--help`` ends
with (docs/cli.md's list is tested against it)."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """What ``eagle-contract COMMAND`` exits with (the pytest plugin keeps pytest's codes)."""

    OK = 0
    """everything checked holds"""
    FINDINGS = 1
    """findings (an unreadable shard among many is one)"""
    USAGE = 2
    """invalid contract, input or arguments: the run stopped before judging the data"""
    UNAVAILABLE = 69
    """the serving engine could not be reached (EC705) before any shard was compared or
    recorded: the run says nothing about the data (sysexits' EX_UNAVAILABLE)"""
    INTERRUPTED = 130
    """interrupted (Ctrl-C: what was reported is kept, as a shell's 128 + SIGINT)"""


EXIT_OK = ExitCode.OK
EXIT_FINDINGS = ExitCode.FINDINGS
EXIT_USAGE = ExitCode.USAGE
EXIT_UNAVAILABLE = ExitCode.UNAVAILABLE
EXIT_INTERRUPTED = ExitCode.INTERRUPTED

_SHORT = {
    ExitCode.OK: "everything checked holds",
    ExitCode.FINDINGS: "findings",
    ExitCode.USAGE: "invalid contract, input or arguments",
    ExitCode.UNAVAILABLE: "the serving engine could not be reached (EC705), nothing compared",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
}


def epilog() -> str:
    """The lines every ``--help`` ends with."""
    return "exit codes:\n" + "\n".join(f"  {int(c):<4} {_SHORT[c]}" for c in ExitCode)
