"""Find a contract's shard files and take a seeded sample of them."""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..contract.model import Contract
from ..errors import UsageError
from ..tree import files_matching
from .formats import FORMATS, SHARD_GLOBS

DEFAULT_SAMPLE = 10
Sampling = int | None  # None: every shard


def _natural_key(path: Path) -> list[object]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def discover(root: Path, format: str = "auto") -> list[Path]:
    """Every shard file under ``root`` (recursively), in natural order."""
    if root.is_file():
        return [root]
    if not root.exists():
        raise UsageError(f"shard path {root} does not exist")
    if not root.is_dir():  # a FIFO or a device: never opened (a FIFO would block)
        raise UsageError(f"shard path {root} is not a regular file or a folder")
    globs = FORMATS[format].globs if format != "auto" else SHARD_GLOBS
    return sorted(set(files_matching(root, globs)), key=_natural_key)


def choose(paths: Sequence[Path], sample: Sampling, seed: int) -> list[Path]:
    """A deterministic, seeded sample of ``paths``, kept in natural order."""
    if sample is None or sample >= len(paths):
        return list(paths)
    picked = random.Random(seed).sample(range(len(paths)), sample)
    return [paths[i] for i in sorted(picked)]


def parse_sample(text: str | int | None) -> Sampling:
    if text is None:
        return DEFAULT_SAMPLE
    if isinstance(text, int):
        value = text
    elif text.strip().lower() == "all":
        return None
    else:
        try:
            value = int(text)
        except ValueError:
            raise UsageError(f"--sample takes a positive number or 'all', not {text!r}") from None
    if value < 1:
        raise UsageError(f"--sample takes a positive number or 'all', not {value}")
    return value


def roots_of(contract: Contract, shards: Iterable[Path] | None = None) -> tuple[Path, ...]:
    """The shard files or folders a run reads: those the command names, else the contract's
    own ``training.shards`` (none: empty)."""
    training = contract.training
    if shards:
        return tuple(shards)
    if training is None or training.shards is None:
        return ()
    return (training.shards,)


def labelled(roots: Iterable[Path], format: str = "auto") -> list[tuple[Path, str]]:
    """Every shard file under ``roots`` in natural order, each with its display label (its
    path under its root, or its name); a root that holds none raises :class:`UsageError`."""
    out: list[tuple[Path, str]] = []
    for root in roots:
        found = discover(root, format)
        if not found:
            raise UsageError(f"no shard files under {root} (format {format})")
        for path in found:
            out.append((path, path.relative_to(root).as_posix() if root.is_dir() else path.name))
    return out


def shard_paths(
    contract: Contract, shards: Iterable[Path] | None, sample: Sampling, seed: int
) -> list[tuple[Path, str]]:
    """The sampled shards of a contract with their display labels."""
    training = contract.training
    if training is None:
        return []
    roots = roots_of(contract, shards)
    if not roots:
        raise UsageError(
            f"{contract.path}: no shards given: set training.shards in the contract "
            "or pass shard paths"
        )
    found = labelled(roots, training.format)
    keep = set(choose([p for p, _ in found], sample, seed))
    return [(p, label) for p, label in found if p in keep]
