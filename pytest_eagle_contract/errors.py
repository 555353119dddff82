"""The exceptions pytest-eagle-contract raises.

    EagleContractError            base of everything below
     ├── ContractError            the contract file is invalid (exit code 2); carries every problem
     └── UsageError               bad arguments or paths given to the CLI or plugin (exit code 2)

Problems found *in the data* are never exceptions: they are :class:`Finding` objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
    def single(cls, file: Path | str, message: str, line: int = 1, column: int = 1,
               path: str = "") -> ContractError:
        return cls([ContractProblem(str(file), line, column, path, message)])


class UsageError(EagleContractError):
    """The command line or plugin options ask for something impossible."""
