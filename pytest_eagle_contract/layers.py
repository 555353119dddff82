"""Canonical layer coordinates shared by every part of the tool.

``embed``        token embeddings, the residual stream entering layer 0
``residual:k``   residual stream entering layer k (1 <= k <= L), before any norm
``final_norm``   output of the last layer after the model's final norm

``residual:0`` is accepted as an alias of ``embed``. See docs/layers.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

_RESIDUAL = re.compile(r"^residual:([0-9]{1,6})$", re.ASCII)
EMBED: Final = "embed"
FINAL_NORM: Final = "final_norm"


@dataclass(frozen=True, order=True)
class Layer:
    """One canonical hidden state. ``index`` is 0 for embed, k for residual:k, -1 for final_norm."""

    index: int

    @classmethod
    def parse(cls, text: str) -> Layer:
        text = text.strip()
        if text == EMBED:
            return cls(0)
        if text == FINAL_NORM:
            return cls(-1)
        match = _RESIDUAL.match(text)
        if match is None:
            raise ValueError(
                f"{text[:40]!r} is not a canonical layer: use 'embed', 'residual:K' or 'final_norm'"
            )
        return cls(int(match.group(1)))

    @property
    def is_embed(self) -> bool:
        return self.index == 0

    @property
    def is_final_norm(self) -> bool:
        return self.index == -1

    def __str__(self) -> str:
        if self.index == 0:
            return EMBED
        if self.index == -1:
            return FINAL_NORM
        return f"residual:{self.index}"

    def check_bounds(self, num_layers: int) -> None:
        if self.index > num_layers:
            raise ValueError(f"{self} is beyond the target's {num_layers} layers")
