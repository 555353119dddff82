"""The shard formats of the EAGLE-3 ecosystem, as data (see docs/formats.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Packing = Literal["concat", "single", "list", "stacked"]
"""How a key holds slots: ``concat`` [1,T,n*H] split along the last dim; ``single`` one
[1,T,H] or [T,H]; ``list`` a list of [T,H]; ``stacked`` [T,n,H] split along axis 1."""


@dataclass(frozen=True)
class Format:
    name: str
    globs: tuple[str, ...]
    ids_key: str
    mask_key: str | None
    states: tuple[tuple[str, Packing], ...]
    optional_keys: frozenset[str] = frozenset()
    description: str = ""

    @property
    def required_keys(self) -> frozenset[str]:
        keys = {self.ids_key, *(key for key, _ in self.states)}
        if self.mask_key is not None:
            keys.add(self.mask_key)
        return frozenset(keys)


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format(
            "specforge", ("*.ckpt", "*.ckpt.gz"), "input_ids", "loss_mask",
            (("aux_hidden_state", "concat"), ("hidden_state", "single")),
            description="SpecForge prepare_hidden_states.py: rows_{g}-{g+2000}/data_{i}.ckpt[.gz]",
        ),
        Format(
            "speculators-v1", ("data_*.pt",), "input_ids", "loss_mask",
            (("hidden_states", "list"),),
            description="speculators v1 data generation: data_{i}.pt, list of [T,H] states",
        ),
        Format(
            "speculators", ("hs_*.safetensors",), "token_ids", "loss_mask",
            (("hidden_states", "stacked"),), optional_keys=frozenset({"loss_mask"}),
            description="speculators (2026): hidden_states/hs_{i}.safetensors, [T,k,H]",
        ),
        Format(
            "eagle-legacy", ("*.ckpt",), "input_ids", "loss_mask", (("hidden_state", "single"),),
            optional_keys=frozenset({"attention_mask"}),
            description="EAGLE-1/2 (SafeAILab) ge_data: {idx}/data_{n}.ckpt, post-norm last state",
        ),
    )
}
FORMAT_NAMES = ("auto", *FORMATS)


def guess_from_name(name: str) -> str | None:
    """Format suggested by a file name alone (``.ckpt`` is SpecForge until its keys say legacy)."""
    if name.endswith((".ckpt", ".ckpt.gz")):
        return "specforge"
    if name.endswith(".pt"):
        return "speculators-v1"
    if name.endswith(".safetensors"):
        return "speculators"
    return None


def guess_from_keys(name_guess: str | None, keys: set[str]) -> str | None:
    if "aux_hidden_state" in keys:
        return "specforge"
    if "token_ids" in keys:
        return "speculators"
    if "hidden_states" in keys:
        return "speculators-v1"
    if "hidden_state" in keys:
        return "eagle-legacy"
    return name_guess


SHARD_GLOBS = tuple(sorted({g for f in FORMATS.values() for g in f.globs}))
