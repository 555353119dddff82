"""The shard formats of the EAGLE-3 ecosystem (docs/formats.md): one module per format, one
line per format in ``FORMATS``. Detection is derived from the registry."""

from __future__ import annotations

from collections.abc import Collection

from ...named import by_name
from . import (
    eagle_legacy,
    specforge,
    specforge_dflash,
    specforge_dspark,
    speculators,
    speculators_v1,
    trtllm,
)
from .base import Format, Packing, Slot, dtype_name

__all__ = [
    "FORMATS",
    "FORMAT_NAMES",
    "SHARD_GLOBS",
    "Format",
    "Packing",
    "Slot",
    "detect",
    "dtype_name",
]

FORMATS: dict[str, Format] = by_name(
    [
        specforge.FORMAT,
        speculators_v1.FORMAT,
        speculators.FORMAT,
        eagle_legacy.FORMAT,
        trtllm.FORMAT,
        specforge_dflash.FORMAT,  # after speculators-v1: both sign with hidden_states
        specforge_dspark.FORMAT,  # its target_last_hidden_states sits in no other's files
    ]
)
FORMAT_NAMES = ("auto", *FORMATS)
SHARD_GLOBS = tuple(sorted({g for f in FORMATS.values() for g in f.globs}))


def _inside_others(fmt: Format) -> int:
    return sum(
        fmt.signature in other.required_keys for other in FORMATS.values() if other is not fmt
    )


# A format whose signature key also sits in another format's files (EAGLE legacy's
# hidden_state in SpecForge's) is tried after it.
_BY_KEYS = sorted(FORMATS.values(), key=_inside_others)


def detect(name: str, keys: Collection[str]) -> Format | None:
    """The format of a file with this name and these keys: the first whose signature key
    it holds (of two alike, the one whose file names end like it: ``hidden_states`` in a
    ``.ckpt`` is SpecForge's DFlash, in a ``.pt`` speculators v1's), else the first whose file
    names end like it (``.ckpt``: SpecForge)."""
    by_keys = [f for f in _BY_KEYS if f.signature in keys]
    if by_keys:
        return next((f for f in by_keys if name.endswith(f.suffixes)), by_keys[0])
    return next((f for f in FORMATS.values() if name.endswith(f.suffixes)), None)
