"""The shard formats of the EAGLE-3 ecosystem (docs/formats.md): one module per format, one
line per format in ``FORMATS``. Detection is derived from the registry."""

from __future__ import annotations

from collections.abc import Collection

from ...named import by_name
from . import eagle_legacy, specforge, speculators, speculators_v1, trtllm
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
    it holds, else the first whose file names end like it (``.ckpt``: SpecForge)."""
    by_keys = next((f for f in _BY_KEYS if f.signature in keys), None)
    if by_keys is not None:
        return by_keys
    return next((f for f in FORMATS.values() if name.endswith(f.suffixes)), None)
