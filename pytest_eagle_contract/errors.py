"""Every exception pytest-eagle-contract raises, and the one shape of "a coded problem".

    EagleContractError            base of everything below
     ├── ContractError            the contract file is invalid (exit code 2); carries every problem
     ├── UsageError               bad arguments or paths given to the CLI or plugin (exit code 2)
     └── CodedError               a problem with a rule code, raised where it is met and turned
          │                       into a Finding by the check that called (never a traceback)
          ├── ShardReadError      a shard cannot be read (EC001-EC003)
          ├── Unservable          the engine would not serve this case (EC510)
          ├── CaptureError        the server gave no usable capture (EC702-EC705)
          ├── CaptureFileError    a capture file is unreadable or inconsistent (EC707)
          ├── NoCapture           no capture of a shard exists (EC706)
          └── ContractViolation   a training batch breaks the contract (the guard): the
                                  batch's first finding, with its index and slot

Problems found *in the data* are never exceptions: they are :class:`Finding` objects.
A :class:`Problem` is a coded problem that is not raised (a launch-line lint, a resolver
note): the same three fields as :class:`CodedError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from .findings import Finding, RuleCode, Severity


class EagleContractError(Exception):
    """Base class of every error this package raises."""


@dataclass(frozen=True)
class ContractProblem:
    """One thing wrong with a contract file, located like a compiler error."""

    file: str
    line: int
    column: int
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        key = f" {self.path}:" if self.path else ""
        return f"{where}:{key} {self.message}"


class ContractError(EagleContractError):
    """A contract file could not be loaded; ``problems`` lists every reason."""

    def __init__(self, problems: list[ContractProblem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))

    @classmethod
    def single(
        cls, file: Path | str, message: str, line: int = 1, column: int = 1, path: str = ""
    ) -> ContractError:
        return cls([ContractProblem(str(file), line, column, path, message)])


class UsageError(EagleContractError):
    """The command line or plugin options ask for something impossible."""


@dataclass(frozen=True)
class Problem:
    """A coded problem that is reported, not raised."""

    code: RuleCode
    message: str
    hint: str = ""
    severity: Severity = "error"

    def __str__(self) -> str:
        return f"{self.code} {self.message}"


class CodedError(EagleContractError):
    """A problem with a rule code, a message and a hint that says what to change."""

    def __init__(self, code: RuleCode, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.code: RuleCode = code
        self.message = message
        self.hint = hint

    @property
    def problem(self) -> Problem:
        return Problem(self.code, self.message, self.hint)


class _OneCode(CodedError):
    """A coded error whose class fixes the code."""

    rule: ClassVar[RuleCode]

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(self.rule, message, hint)


class ShardReadError(CodedError):
    """A shard cannot be read: EC001 unreadable, EC002 truncated, EC003 unsafe."""


class CaptureError(CodedError):
    """The server gave no usable capture (EC702-EC705)."""

    def __str__(self) -> str:
        return f"{self.code} {self.message}" + (f"\n  hint: {self.hint}" if self.hint else "")


class ServerUnreachable(CaptureError):
    """Nothing answered at the URL (EC705): refused, timed out, no such host."""


class Unservable(_OneCode):
    """The engine would not serve this case (EC510)."""

    rule = "EC510"


class SilentlyWrong(Unservable):
    """The engine runs this case but feeds the draft something no layer is (zeros, other
    tokens' rows), with no abort and no error: refused like an unservable case (EC510), and
    said to be silent, which is worse than an abort."""


class CaptureFileError(_OneCode):
    """A capture file is unreadable or inconsistent (EC707)."""

    rule = "EC707"


class NoCapture(_OneCode):
    """Neither a live server nor the capture files hold a capture of the shard (EC706)."""

    rule = "EC706"


class ContractViolation(CodedError):
    """A training batch breaks the contract (raised by ``Guard.check``): ``finding`` is the
    batch's first finding (``code``, ``slot`` are its own), ``batch`` the batch's index in
    the run, ``findings`` every finding of that batch."""

    def __init__(self, batch: int, findings: list[Finding]) -> None:
        first = findings[0]
        super().__init__(first.code, first.message, first.hint)
        self.batch = batch
        self.slot = first.slot
        self.finding = first
        self.findings = findings

    def __str__(self) -> str:
        from .render import format_finding

        more = len(self.findings) - 1
        tail = f"\n({more} more finding(s) in this batch: .findings)" if more else ""
        return f"batch {self.batch} breaks the contract\n{format_finding(self.finding)}{tail}"
