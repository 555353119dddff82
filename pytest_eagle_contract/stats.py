"""Per-token L2 norms, computed streaming: never a float32 copy of a whole tensor."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

CHUNK_ELEMENTS = 1 << 17  # 512 KiB of float32 per chunk: stays in L2 (18 rows at H=7168)


@dataclass(frozen=True)
class NormStats:
    """Summary of a slot's per-token L2 norms over its finite rows."""

    mean: float
    median: float
    p5: float
    p95: float
    tokens: int
    nonfinite_tokens: int
    first_nonfinite: int | None

    @property
    def flatness(self) -> float:
        """p95 / p5: 1.0 for a perfectly constant norm."""
        return self.p95 / self.p5 if self.p5 > 0 else math.inf

    def to_dict(self) -> dict[str, float]:
        return {k: v for k, v in asdict(self).items() if k in ("mean", "median", "p5", "p95")}


def token_norms(x: torch.Tensor, chunk_rows: int | None = None) -> torch.Tensor:
    """L2 norm of every row of a [T, H] tensor, as float32 [T], a chunk of rows at a time.

    Each chunk is converted into one reused float32 buffer (:data:`CHUNK_ELEMENTS`, sized
    to stay in cache) and reduced there: no float32 copy of the whole tensor exists."""
    import torch

    rows = x.shape[0]
    step = chunk_rows or max(1, CHUNK_ELEMENTS // max(1, x.shape[-1]))
    out = torch.empty(rows, dtype=torch.float32)
    buffer = torch.empty((min(step, rows), *x.shape[1:]), dtype=torch.float32)
    for start in range(0, rows, step):
        chunk = x[start : start + step]
        into = buffer[: chunk.shape[0]]
        into.copy_(chunk.abs() if chunk.is_complex() else chunk)
        torch.linalg.vector_norm(into, dim=-1, out=out[start : start + step])
    return out


def _real(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` as ``dtype`` whatever it holds (float8, integers; complex by magnitude)."""
    return (x.abs() if x.is_complex() else x).to(dtype)


def norm_stats(x: torch.Tensor) -> NormStats:
    """One streaming pass: norms, quantiles, and the rows holding NaN or Inf."""
    import torch

    if x.dim() != 2:  # not [T, H]: nothing to measure (the structure family says why)
        nan = math.nan
        return NormStats(nan, nan, nan, nan, 0, 0, None)
    norms = token_norms(x)
    finite = torch.isfinite(norms)
    bad_rows = (~finite).nonzero().flatten()
    # A finite row can only give a non-finite norm by overflow: confirm row by row.
    bad = [
        int(r) for r in bad_rows if not bool(torch.isfinite(_real(x[int(r)], torch.float64)).all())
    ]
    good = norms[finite]
    if good.numel() == 0:
        nan = math.nan
        return NormStats(nan, nan, nan, nan, int(norms.numel()), len(bad), bad[0] if bad else None)
    q = torch.quantile(good, torch.tensor([0.05, 0.5, 0.95]))
    return NormStats(
        float(good.mean()),
        float(q[1]),
        float(q[0]),
        float(q[2]),
        int(norms.numel()),
        len(bad),
        bad[0] if bad else None,
    )


EMBED_RMS = 0.05  # per-element RMS below which a flat slot reads as an embedding
EMBED_FLATNESS = 2.0
EMBED_RELATIVE = 0.2  # and well below every other slot's median
POST_NORM_FLATNESS = 1.08


def guess(stats: NormStats, hidden_size: int, others: list[NormStats]) -> str | None:
    """A plain-words guess of what a slot is, only where the evidence is clear."""
    if stats.tokens == 0 or math.isnan(stats.median) or stats.median <= 0:
        return None
    rms = stats.median / math.sqrt(hidden_size)
    smallest_other = min((o.median for o in others if not math.isnan(o.median)), default=None)
    relatively_small = smallest_other is None or stats.median < EMBED_RELATIVE * smallest_other
    if rms < EMBED_RMS and stats.flatness < EMBED_FLATNESS and relatively_small:
        return "embedding-like"
    if stats.flatness < POST_NORM_FLATNESS and stats.tokens >= 8:
        return "post-norm-like"
    return None


GUESS_WORDS = {
    "embedding-like": "small, flat per-token norm, as token embeddings have",
    "post-norm-like": "nearly constant per-token norm, as after the final RMSNorm",
}
