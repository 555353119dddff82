"""Size limits a user may raise through an environment variable, and the bounded JSON
reader that applies them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Final

from .errors import UsageError

# the most layers a target (or a draft) may have here: contract-v1.schema.json's maximum for
# target.num_hidden_layers, a plausibility bound (Llama-3.1-405B has 126, DeepSeek-V3 61).
# A layer count above it is this tool's refusal, not an engine's: the tap formulas build one
# tap per layer, so an unbounded count would allocate unboundedly (docs/security.md)
MOST_LAYERS: Final = 1024


def check_layers(what: str, n: int) -> None:
    """Raise UsageError where the layer count ``n`` (named ``what``) is above MOST_LAYERS."""
    if n > MOST_LAYERS:
        raise UsageError(
            f"{what} is {n}, above {MOST_LAYERS}: this tool's limit on a layer count (the "
            "contract schema's bound on num_hidden_layers; no real model comes near it, "
            "docs/security.md)"
        )


def env_bytes(name: str, default: int) -> int:
    """The byte count in the environment variable ``name``, else ``default``; anything but
    a positive whole number is a usage error."""
    given = os.environ.get(name, "").strip()
    if not given:
        return default
    if not given.isdigit() or int(given) < 1:
        raise UsageError(f"{name}={given!r}: expected a positive number of bytes")
    return int(given)


JSON_MAX_BYTES_ENV = "EAGLE_TARGET_JSON_MAX_BYTES"
DEFAULT_JSON_MAX_BYTES = 64 << 20  # the largest real index (DeepSeek-V3) is under 10 MiB


def read_json_object(path: Path, cannot: str) -> dict[str, Any]:
    """The JSON object in ``path``, read no further than ``EAGLE_TARGET_JSON_MAX_BYTES``
    (a link to /dev/zero or a huge file is refused, not read). Raises UsageError, whose
    message starts with ``cannot``."""
    import stat

    limit = env_bytes(JSON_MAX_BYTES_ENV, DEFAULT_JSON_MAX_BYTES)
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # a FIFO would block, a device never end
            raise UsageError(f"{cannot}: not a regular file")
        with path.open("rb") as f:
            data = f.read(limit + 1)
        value = None if len(data) > limit else json.loads(data.decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise UsageError(f"{cannot}: {first_line(exc)}") from None
    if len(data) > limit:
        raise UsageError(
            f"{cannot}: larger than {limit} bytes (set {JSON_MAX_BYTES_ENV} to raise the limit)"
        )
    if not isinstance(value, dict):
        raise UsageError(f"{cannot}: a JSON {type(value).__name__}, not an object")
    return value


def first_line(exc: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    lines = str(exc).splitlines()
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"
