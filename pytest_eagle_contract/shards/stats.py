"""Per-token L2 norms, computed streaming: never a float32 copy of a whole tensor."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch

    from .stored import Array

MAX_WIDTH = 1 << 20  # 32 times any model's hidden size: a wider "state" gets no norms
CHUNK_ELEMENTS = 1 << 19  # 2 MiB of float32 per chunk: stays in L2 (73 rows at H=7168)


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


def token_norms(x: Array) -> np.ndarray[Any, np.dtype[np.float32]]:
    """L2 norm of every row of a [T, H] tensor (torch or stored), as float32 [T], a chunk
    of rows at a time.

    Each chunk is widened into reused float32 buffers (:data:`CHUNK_ELEMENTS`, sized to stay
    in cache) and reduced there: no float32 copy of the whole tensor exists. A row whose
    squares overflow float32 is summed again in float64."""
    import numpy as np

    rows = x.shape[0]
    if rows == 0:
        return np.empty(0, np.float32)
    squares, row64 = _reader(x)
    out = np.empty(rows, np.float32)
    step = max(1, CHUNK_ELEMENTS // max(1, x.shape[-1]))
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is summed again below
        for start in range(0, rows, step):
            squares(start, min(start + step, rows), out[start : start + step])
    np.sqrt(out, out=out)
    for r in np.flatnonzero(np.isinf(out)):  # a finite row whose squares overflowed float32
        row = row64(int(r))
        out[r] = np.sqrt(np.dot(row, row))
    return out


Squares = Callable[[int, int, Any], None]  # rows start:stop's sums of squares into out
Row64 = Callable[[int], Any]  # one row as float64


def _reader(x: Array) -> tuple[Squares, Row64]:
    """How to sum the squares of ``x``'s rows a chunk at a time, and to read one row in
    float64. numpy reads the dtypes it holds (bfloat16 as bits); the others (float8,
    complex) are widened by torch a chunk at a time."""
    import numpy as np

    from .stored import Stored

    width = x.shape[-1]
    buffer = np.empty((max(1, min(x.shape[0], CHUNK_ELEMENTS // max(1, width))), width), np.float32)

    def reduce(into: Any, out: Any) -> None:
        np.vecdot(into, into, out=out)  # a BLAS dot per row: faster than einsum

    if isinstance(x, Stored):
        stored: Stored | None = x
    else:
        tensor = x
        stored = Stored.of(tensor)
    if stored is None:  # a torch dtype numpy lacks
        import torch

        def by_torch(start: int, stop: int, out: Any) -> None:
            into = buffer[: stop - start]
            into[...] = _real(tensor[start:stop], torch.float32).numpy()
            reduce(into, out)

        return by_torch, lambda r: _real(tensor[r], torch.float64).numpy()

    def row64(r: int) -> Any:
        return stored[r].values().astype(np.float64)

    raw = stored.raw
    if stored.dtype == "bfloat16" and width % 2 == 0 and raw.strides[-1] == 2:
        return _bf16_pairs(raw, buffer, reduce), row64

    def by_numpy(start: int, stop: int, out: Any) -> None:
        reduce(stored[start:stop].values(buffer[: stop - start]), out)

    return by_numpy, row64


def _bf16_pairs(raw: Any, buffer: Any, reduce: Callable[[Any, Any], None]) -> Squares:
    """Sums of squares of bfloat16 rows read two elements (one uint32 word) at a time: the
    high element is the word with its low half cleared, the low one the word shifted up, so
    neither needs widening (about a fifth faster than widening each element)."""
    import numpy as np

    words = raw.view(np.uint32)
    rows, half = buffer.shape[0], words.shape[-1]
    flat = buffer.view(np.uint32).reshape(-1)  # two contiguous [rows, H/2] halves
    high, low = flat[: rows * half].reshape(rows, half), flat[rows * half :].reshape(rows, half)
    more = np.empty(buffer.shape[0], np.float32)

    def squares(start: int, stop: int, out: Any) -> None:
        n = stop - start
        np.bitwise_and(words[start:stop], 0xFFFF0000, out=high[:n])
        np.left_shift(words[start:stop], 16, out=low[:n])
        reduce(high[:n].view(np.float32), out)
        reduce(low[:n].view(np.float32), more[:n])
        out += more[:n]

    return squares


def _real(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` as ``dtype`` whatever it holds (float8, integers; complex by magnitude)."""
    return (x.abs() if x.is_complex() else x).to(dtype)


def norm_stats(x: Array) -> NormStats:
    """One streaming pass: norms, quantiles, and the rows holding NaN or Inf."""
    import numpy as np

    if x.dim() != 2 or x.shape[-1] > MAX_WIDTH:  # not [T, H]: the structure family says why
        nan = math.nan
        return NormStats(nan, nan, nan, nan, 0, 0, None)
    norms = token_norms(x)
    finite = np.isfinite(norms)
    bad = [int(r) for r in np.flatnonzero(~finite)]  # overflow was summed again: NaN or Inf
    good = norms[finite].astype(np.float64)
    if good.size == 0:
        nan = math.nan
        return NormStats(nan, nan, nan, nan, int(norms.size), len(bad), bad[0] if bad else None)
    p5, median, p95 = np.quantile(good, [0.05, 0.5, 0.95])
    return NormStats(
        float(good.mean()),
        float(median),
        float(p5),
        float(p95),
        int(norms.size),
        len(bad),
        bad[0] if bad else None,
    )


EMBED_RMS = 0.05  # per-element RMS below which a flat slot reads as an embedding
EMBED_FLATNESS = 2.0
EMBED_RELATIVE = 0.2  # and well below every other slot's median
POST_NORM_FLATNESS = 1.08


def looks_like(stats: NormStats, hidden_size: int, others: list[NormStats]) -> str | None:
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
