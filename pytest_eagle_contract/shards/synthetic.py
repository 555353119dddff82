"""Synthetic hidden states with chosen per-token norm profiles (no model needed).

Used for Kimi-K2.5-sized shards in the benchmark and the tests: real statistics, no data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# Kimi-K2.5 EAGLE-3 shards as inspected: embed, residual:3, residual:31, residual:59 (pre-norm)
KIMI_MEDIANS = (1.0383, 37.1650, 174.3977, 111.3359)
KIMI_SPREADS = (0.03, 0.35, 0.45, 0.40)  # log-normal sigma of the per-token norm
KIMI_HIDDEN, KIMI_VOCAB, KIMI_LAYERS, KIMI_TOKENS, KIMI_MASKED = 7168, 163840, 61, 1281, 1235


def states_with_norms(
    tokens: int,
    hidden: int,
    median: float,
    spread: float,
    generator: torch.Generator,
    dtype: torch.dtype,
) -> torch.Tensor:
    """[tokens, hidden] whose per-token L2 norms are log-normal around ``median``.

    The middle token gets exactly ``median`` so the median is what was asked for.
    """
    import torch

    x = torch.randn(tokens, hidden, generator=generator)
    x /= torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    z = torch.randn(tokens, generator=generator)
    z -= z.median()
    z += 0.01 * torch.sign(z)  # keep neighbours clear of the middle token after rounding
    x *= (median * torch.exp(spread * z)).unsqueeze(-1)
    out = x.to(dtype)
    mid = int(z.abs().argmin())
    out[mid] = _row_with_norm(x[mid], median, dtype)
    return out


def _row_with_norm(row: torch.Tensor, norm: float, dtype: torch.dtype) -> torch.Tensor:
    """The rescaling of ``row`` whose ``dtype`` rounding has L2 norm closest to ``norm``."""
    import torch

    from .stats import token_norms

    scales = 1.0 + torch.linspace(-2e-4, 2e-4, 4001, dtype=torch.float64)
    candidates = row.double().unsqueeze(0) * scales.unsqueeze(1) * norm / float(row.norm())
    candidates = candidates.to(dtype)
    errors = (torch.from_numpy(token_norms(candidates)).double() - norm).abs()
    return candidates[int(errors.argmin())]


def kimi_like_sample(
    seed: int = 0,
    tokens: int = KIMI_TOKENS,
    hidden: int = KIMI_HIDDEN,
    medians: Sequence[float] = KIMI_MEDIANS,
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """input_ids, loss_mask and 4 bf16 slots with Kimi-K2.5's measured norm profile."""
    import torch

    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, KIMI_VOCAB, (tokens,), generator=g)
    loss_mask = torch.ones(tokens, dtype=torch.long)
    loss_mask[: tokens - round(tokens * KIMI_MASKED / KIMI_TOKENS)] = 0
    slots = [
        states_with_norms(tokens, hidden, m, s, g, torch.bfloat16)
        for m, s in zip(medians, KIMI_SPREADS)
    ]
    return input_ids, loss_mask, slots
