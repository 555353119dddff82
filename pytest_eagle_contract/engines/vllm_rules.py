"""vLLM's EAGLE-3 rules per release, as data (``vllm_rules.json``).

Written by ``scripts/gen_vllm_rules.py`` from each released wheel's own code (never an
installed vllm): per release range, the draft config.json keys each model runner reads (in
order, with what it adds to the ids), the default runner, the default ids and the draft fc's
width; per architecture and range, the capture rule of its layer loop. See docs/layers.md.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from .rule_table import RuleTable, span


@dataclass(frozen=True)
class Choice:
    """How a release picks the model runner for an EAGLE-3 launch: ``how`` is ``only`` (one
    runner feeds aux states), ``env`` (``VLLM_USE_V2_MODEL_RUNNER``'s fixed default) or
    ``auto`` (the variable unset, ``VllmConfig.use_v2_model_runner`` decides: ``others``
    names the architectures it starts on the other runner, ``"v1:moe"``, and why;
    ``fallbacks`` are the features that make it start V1 instead)."""

    how: str
    default: str
    why: str
    others: dict[str, str]
    lists: tuple[str, ...]
    fallbacks: tuple[str, ...]


@dataclass(frozen=True)
class Release:
    """What one vLLM release does with a draft's ids (the row covering it)."""

    version: str
    span: str
    runners: dict[str, tuple[tuple[str, int], ...]]  # runner -> ((dotted key, + to ids), ...)
    default_runner: str
    default_ids: str  # "2,L//2,L-3"
    fc_from: tuple[str, ...]  # config keys sizing the fc ("len:K": the length of K's ids)
    fc_default: int
    choice: Choice


@dataclass(frozen=True)
class Capture:
    """One architecture's layer loop: id k feeds residual:k+plus; ``id0``: ``embed`` (the
    embedding output), ``crash`` (``hidden_states + residual`` with residual None) or
    ``layer`` (a layer output like any other); the largest id reached is L - 1 + last.
    ``via``: a multimodal wrapper's language model (its architecture or class) whose loop
    this is, ``text_config`` when the checkpoint names it (then there is no rule here);
    ``wrapper``: the wrapper's model file."""

    plus: int
    id0: str
    last: int
    file: str
    span: str
    via: str | None = None
    wrapper: str | None = None


_TABLE = RuleTable("vllm_rules.json", "vLLM", "0.10.1")
_data, releases, _v, _covers = _TABLE.data, _TABLE.releases, _TABLE.version, _TABLE.covers


@functools.cache
def release(version: str) -> Release:
    """The rules of ``version``. Raises Unservable outside the covered releases."""
    row = _TABLE.row(version)
    return Release(
        version,
        span(row),
        {name: tuple((k, s) for k, s in keys) for name, keys in row["runners"].items()},
        row["default_runner"],
        row["default_ids"],
        tuple(row["fc"]["from"]),
        row["fc"]["default"],
        _choice(row["runner_choice"]),
    )


def _choice(data: dict[str, Any]) -> Choice:
    return Choice(
        data["how"],
        data["default"],
        data["why"],
        dict(data.get("others", {})),
        tuple(data.get("lists", ())),
        tuple(data.get("fallbacks", ())),
    )


@functools.cache
def capture(arch: str, version: str) -> Capture | None:
    for row in _data()["archs"]:
        if arch in row["archs"] and _covers(row, version):
            via, wrapper = row.get("via"), row.get("wrapper")
            if via == "text_config":
                return Capture(0, "", 0, "", span(row), via, wrapper)
            return Capture(
                row["plus"], row["id0"], row["last"], row["file"], span(row), via, wrapper
            )
    return None


def spans_of(arch: str) -> list[str]:
    """The release ranges in which ``arch`` is served, adjacent rows joined (a rule that
    changes at a release still serves the architecture on both sides)."""
    order = {v: n for n, v in enumerate(releases())}
    rows = sorted(
        (r for r in _data()["archs"] if arch in r["archs"]), key=lambda r: order[r["since"]]
    )
    joined: list[dict[str, Any]] = []
    for row in rows:
        if joined and joined[-1]["until"] == row["since"]:
            joined[-1]["until"] = row["until"]
        else:
            joined.append({"since": row["since"], "until": row["until"]})
    return [span(r) for r in joined]


@functools.cache
def known_archs() -> frozenset[str]:
    """Every architecture served in some covered release."""
    return frozenset(a for row in _data()["archs"] for a in row["archs"])


@functools.cache
def eagle_keys() -> tuple[str, ...]:
    """Every EAGLE draft config key some covered release's runner reads ids from (the
    DFlash and DSpark keys, other drafting methods, are left out)."""
    keys = {k for r in _data()["rows"] for ks in r["runners"].values() for k, _ in ks}
    return tuple(sorted(k for k in keys if "eagle" in k))
