"""A DFlash draft's config as the tap rules read it (``DFlashDraft``), the keys the tap list
is read under and the guessed-list problem (EC522): below engines/dflash.py and the engines
whose DFlash rules it dispatches to (engines/tpu.py, engines/ascend.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ..errors import Problem
from ..layers import Layer

TAP_KEYS = ("dflash_config.target_layer_ids", "target_layer_ids")
_GUESS: Final = "EC522"


@dataclass(frozen=True)
class DFlashDraft:
    """What a DFlash draft's config.json says about its taps."""

    path: Path | None
    found: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # dotted key -> ids
    num_hidden_layers: int | None = None
    num_target_layers: int | None = None
    block_size: int | None = None
    mask_token_id: int | None = None  # as written: a negative id is kept (EC527 names it)
    vocab_size: int | None = None  # the draft's own vocab_size (its embedding's rows)
    sample_from_anchor: bool = False  # speculators: draft the anchor too (block_size tokens)
    speculators: bool = False  # a speculators-format config (``speculators_model_type``)
    speculative_tokens: int | None = None  # speculators: the draft length vLLM reads from it
    # what mlx-vlm's utils.get_model_type routes on: model_type, architectures, whether a
    # dflash_config object is there, and its DSpark markers (projector_type / markov_rank)
    model_type: str | None = None
    architectures: tuple[str, ...] = ()
    has_dflash_config: bool | None = None  # None: not known (a tap list given alone)
    dspark_marked: bool = False

    @property
    def taps(self) -> tuple[int, ...] | None:
        """The tap list as the draft states it (its first DFlash key), or None."""
        return next((self.found[k] for k in TAP_KEYS if k in self.found), None)

    @property
    def tap_key(self) -> str | None:
        return next((k for k in TAP_KEYS if k in self.found), None)


def guess_problem(engine: str, how: str, taps: Sequence[int], layers: Sequence[Layer]) -> Problem:
    """A guessed tap list (EC522): which rule gave which taps and the layers they feed."""
    return Problem(
        _GUESS,
        f"the draft config has no tap list ({' / '.join(TAP_KEYS)}): {engine} {how} = "
        f"{list(taps)}, feeding {', '.join(map(str, layers))}; the draft may have been "
        "trained on other layers",
    )


def mlx_unrouted(version: str) -> str:
    """mlx-vlm on a draft config without ``model_type`` (nor ``speculators_model_type``):
    ``utils.get_model_and_args`` (0.6.15 to 0.7.10 alike) routes by it before anything else
    (``architectures``, ``dflash_config``) and raises ``KeyError('model_type')`` without it."""
    return (
        f"mlx-vlm {version}: a draft config without model_type (nor speculators_model_type): "
        "mlx-vlm's utils routes a draft by it (<model_type>_dflash, or by architectures "
        "after it) and raises KeyError('model_type') at load without it"
    )
