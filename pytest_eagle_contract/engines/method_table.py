"""method_rules.json, the DFlash2 / DSpark / mlx-vlm rows read from the engines' releases
(``scripts/gen_method_rules.py``): the table alone, below both engines/dflash.py (mlx-vlm's
DFlash rows) and engines/dflash_family.py (DFlash2, DSpark), which read it."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import Unservable
from ..layers import Layer
from .base import Position


@functools.cache
def table() -> dict[str, Any]:
    """method_rules.json, read once."""
    data: dict[str, Any] = json.loads(Path(__file__).with_name("method_rules.json").read_text())
    return data


def releases(engine: str, method: str) -> list[str]:
    """The releases of ``engine`` read for ``method`` that serve it, oldest first."""
    data = table()[engine]
    return [v for v in data["releases"] if serves(row(engine, v), method)]


def read_releases(engine: str) -> list[str]:
    """Every release of ``engine`` whose wheel was read for method_rules.json."""
    return list(table()[engine]["releases"])


def row(engine: str, version: str) -> dict[str, Any] | None:
    """The method_rules.json row of ``engine`` ``version`` (None: not read, or before any)."""
    from packaging.version import Version

    data = table()[engine]
    if version not in data["releases"]:
        return None
    v = Version(version)
    for found in data["rows"]:
        if Version(found["since"]) <= v and (found["until"] is None or v < Version(found["until"])):
            return dict(found)
    return None


def serves(found: Mapping[str, Any] | None, method: str) -> bool:
    """Whether the row ``found`` serves ``method`` (dflash2 or dspark)."""
    if found is None:
        return False
    return bool(found["dflash2"] if method == "dflash2" else found["dspark"])


def span(found: Mapping[str, Any]) -> str:
    """The releases a row covers, in words."""
    return f"{found['since']}" + (f"-{found['until']} (excl.)" if found["until"] else " on")


def mlx_taps(
    row: Mapping[str, Any], arch: str | None, taps: Sequence[int], num_layers: int, where: str
) -> tuple[str, tuple[Position, ...]]:
    """mlx-vlm's capture of ``taps`` on the target model folder ``arch`` (``row``'s
    ``models``: a loop that appends layer i's output for id i, ``residual:i+1``): the folder
    and the positions, for every drafter that reads the target's states (DFlash, DFlash2,
    DSpark). Raises Unservable (``where``: the release and file that refuse)."""
    if not arch:
        raise Unservable("give --arch: the mlx-vlm model folder (model_type), e.g. qwen3_5")
    models: dict[str, str] = row["models"]
    folder = arch.lower()
    rule = models.get(folder)
    if rule is None:
        raise Unservable(
            f"{where}: models/{arch[:60]} captures no layer states for a drafter "
            f"(read: {', '.join(sorted(models))})"
        )
    if rule != "after":
        raise Unservable(
            f"{where}: models/{folder}/language.py captures other than a layer's output "
            + ("(the mean over its hyper-connection copies) " if rule == "hc_mean" else "")
            + "(not followed here)"
        )
    bad = [t for t in taps if t < 0 or t >= num_layers]
    if bad:
        raise Unservable(f"{where}: ids {bad} lie outside the target's [0, {num_layers})")
    return folder, tuple(Position(t, t, Layer(t + 1)) for t in taps)
