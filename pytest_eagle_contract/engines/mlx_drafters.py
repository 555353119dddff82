"""The drafter kind mlx-vlm really runs a draft as, and when it drops the drafter
(``mlx_drafters_rules.json``, written by ``scripts/gen_mlx_drafters.py`` from each mlx-vlm
wheel's ``speculative/drafters/__init__.py``, ``server/generation.py`` and
``generate/dispatch.py``).

Per release: the kind a draft requires comes from its config's ``model_type`` (else
``speculators_model_type``) through ``DRAFTER_KIND_BY_MODEL_TYPE``; from 0.7.0 a type whose
name holds ``mtp``, or a config declaring ``num_nextn_predict_layers``, requires ``mtp`` too.
Without ``--draft-kind`` (or ``MLX_VLM_DRAFT_KIND``) a draft whose type requires nothing runs
as ``DEFAULT_DRAFTER_KIND`` (``dflash``); a ``--draft-kind`` the required kind contradicts is
overridden with a log line. The server and ``mlx_vlm.generate`` then validate the pair, and
a refusal (kind ``mtp`` with another hidden size than the target's; in 0.6.x, a type named
``mtp`` the table does not list) drops the drafter and decodes token by token, with a log
line and no error. A drafter's own ``validate_target_compatibility`` is not read here.
"""

from __future__ import annotations

import functools
import itertools
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .rule_table import RuleTable

_TABLE = RuleTable("mlx_drafters_rules.json", "mlx-vlm", "0.7.10")
ENV = "MLX_VLM_DRAFT_KIND"
"""The variable ``--draft-kind`` sets and the server reads when no kind is passed."""
COMMANDS = ("mlx_vlm.server", "mlx_vlm.generate")


@dataclass(frozen=True)
class Served:
    """What one mlx-vlm release runs a draft as: ``kind`` after its resolution, ``asked``
    (the launch's kind, None: auto), ``required`` (the kind the draft's type requires), and
    ``dropped`` (why it then drops the drafter; empty when it keeps it)."""

    version: str
    kind: str
    asked: str | None
    required: str | None
    model_type: str | None
    dropped: str


def releases() -> list[str]:
    return _TABLE.releases()


@functools.cache
def _rules(version: str) -> tuple[dict[str, Any], dict[str, str]]:
    row = _TABLE.row(version, " has no drafter kinds")
    kinds = {
        name: r["kind"]
        for r in _TABLE.data()["kinds"]
        if _TABLE.covers(r, version)
        for name in r["kinds"]
    }
    return row, kinds


def model_type(config: Mapping[str, Any]) -> str | None:
    found = config.get("model_type") or config.get("speculators_model_type")
    return found if isinstance(found, str) else None


def _nextn(config: Mapping[str, Any]) -> bool:
    for cfg in (config, config.get("text_config")):
        if isinstance(cfg, Mapping):
            count = cfg.get("num_nextn_predict_layers")
            if isinstance(count, int) and not isinstance(count, bool) and count > 0:
                return True
    return False


def _required(reads: list[str], kinds: dict[str, str], config: Mapping[str, Any]) -> str | None:
    mt = model_type(config)
    if mt in kinds:
        return kinds[mt]
    if "mtp-name" in reads and "mtp" in str(mt).lower():
        return "mtp"
    if "nextn" in reads and _nextn(config):
        return "mtp"
    return None


def _width(config: Mapping[str, Any]) -> Any:
    text = config.get("text_config")
    inner = text if isinstance(text, Mapping) else config
    return (
        config.get("backbone_hidden_size")
        or config.get("target_hidden_size")
        or inner.get("hidden_size")
    )


def served(
    version: str, config: Mapping[str, Any], asked: str | None, target_hidden: int | None
) -> Served:
    """What mlx-vlm ``version`` runs the draft whose config.json is ``config`` as, launched
    with kind ``asked`` (None: no ``--draft-kind``), for a target ``target_hidden`` wide."""
    row, kinds = _rules(version)
    required = _required(row["resolve_reads"], kinds, config)
    if asked is None:
        kind = required or row["default_kind"]
    else:
        kind = required if required is not None and required != asked else asked
    dropped = ""
    if row["drops_drafter_in"]:
        checked = _required(row["validate_reads"], kinds, config)
        width = _width(config)
        if checked is not None and kind != checked:
            mt = model_type(config)
            dropped = f"its validation requires kind {checked!r} for model_type {mt!r}"
        elif kind == "mtp" and None not in (width, target_hidden) and width != target_hidden:
            dropped = f"the MTP drafter is {width} wide, the target {target_hidden}"
    return Served(version, kind, asked, required, model_type(config), dropped)


def launched(command: str, env: Mapping[str, str]) -> tuple[bool, str | None]:
    """Whether ``command`` runs mlx-vlm's server or generate command with a drafter, and the
    kind it asks for (``--draft-kind``, else ``MLX_VLM_DRAFT_KIND`` in ``env``; None: auto)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return False, None
    runs = any(w in COMMANDS or w.endswith(("/mlx_vlm.server", "/mlx_vlm.generate")) for w in words)
    runs = runs or any(
        a == "mlx_vlm" and b in ("server", "generate") for a, b in itertools.pairwise(words)
    )
    drafted = any(w == "--draft-model" or w.startswith("--draft-model=") for w in words)
    if not runs or not (drafted or env.get("MLX_VLM_DRAFT_MODEL")):
        return False, None
    for i, w in enumerate(words):
        if w == "--draft-kind" and i + 1 < len(words):
            return True, words[i + 1]
        if w.startswith("--draft-kind="):
            return True, w.partition("=")[2]
    return True, env.get(ENV) or None
