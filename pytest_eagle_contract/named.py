"""Registries keyed by name (the engines, the shard formats): built and read one way."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol, TypeVar

from .errors import EagleContractError


class _Named(Protocol):
    @property
    def name(self) -> str: ...


T = TypeVar("T", bound=_Named)


def by_name(items: Iterable[T]) -> dict[str, T]:
    """``items`` keyed by their ``name``, in order. Raises ValueError for a name given twice
    (one entry would silently hide the other)."""
    found: dict[str, T] = {}
    for item in items:
        if item.name in found:
            raise ValueError(f"two entries are named {item.name!r}")
        found[item.name] = item
    return found


def lookup(registry: Mapping[str, T], name: str, kind: str) -> T:
    """``registry[name]``; an unknown name is an :class:`EagleContractError` that lists the
    known ones (``kind``: what they are, for the message: "engine")."""
    try:
        return registry[name]
    except KeyError:
        known = ", ".join(registry)
        raise EagleContractError(f"unknown {kind} {name!r}: one of {known}") from None
