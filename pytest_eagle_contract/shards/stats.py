"""Per-token L2 norms, computed streaming: never a float32 copy of a whole tensor."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch

    from .stored import Array, Stored

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

    Each chunk is read (:meth:`.stored.Stored.chunks`: from the file into a buffer that
    stays in cache, where the file is known), widened into reused float32 buffers
    (:data:`CHUNK_ELEMENTS`, sized to stay in cache) and reduced there: no float32 copy of
    the whole tensor exists. A row whose squares overflow float32 is summed again in float64."""
    import numpy as np

    from .stored import Stored

    rows, width = x.shape[0], x.shape[-1]
    if rows == 0:
        return np.empty(0, np.float32)
    out = np.empty(rows, np.float32)
    step = max(1, CHUNK_ELEMENTS // max(1, width))
    buffer = np.empty((min(rows, step), width), np.float32)
    stored = x if isinstance(x, Stored) else Stored.of(x)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is summed again below
        if stored is None:  # a torch dtype numpy lacks (float8, complex): torch widens it
            import torch

            tensor: Any = x
            for start in range(0, rows, step):
                into = buffer[: min(step, rows - start)]
                into[...] = _real(tensor[start : start + step], torch.float32).numpy()
                _reduce(into, out[start : start + len(into)])
        else:
            squares = _squares(stored, buffer)
            for start, chunk in stored.chunks(step):
                squares(chunk, out[start : start + len(chunk)])
    np.sqrt(out, out=out)
    for r in np.flatnonzero(np.isinf(out)):  # a finite row whose squares overflowed float32
        row = _row64(x, stored, int(r))
        out[r] = np.sqrt(np.dot(row, row))
    return out


Squares = Callable[[Any, Any], None]  # a chunk of raw rows' sums of squares into out


def _reduce(into: Any, out: Any) -> None:
    import numpy as np

    np.vecdot(into, into, out=out)  # a BLAS dot per row: faster than einsum


def _row64(x: Array, stored: Stored | None, r: int) -> Any:
    """Row ``r`` in float64."""
    import numpy as np

    if stored is None:
        import torch

        return _real(x[r], torch.float64).numpy()  # type: ignore[arg-type]
    return stored[r].values().astype(np.float64)


def _squares(stored: Stored, buffer: Any) -> Squares:
    """How to sum the squares of a chunk of ``stored``'s raw rows: numpy widens the dtypes
    it holds (bfloat16 as bits) into ``buffer``, a chunk at a time."""
    import numpy as np

    from .stored import widen_bf16

    raw, width = stored.raw, stored.raw.shape[-1]
    if stored.dtype == "bfloat16" and width % 2 == 0 and raw.strides[-1] == 2:
        return _bf16_pairs(buffer)

    def by_numpy(chunk: Any, out: Any) -> None:
        into = buffer[: len(chunk)]
        if stored.dtype == "bfloat16":
            widen_bf16(chunk, into)
        else:
            np.copyto(into, chunk, casting="unsafe")
        _reduce(into, out)

    return by_numpy


def _bf16_pairs(buffer: Any) -> Squares:
    """Sums of squares of bfloat16 rows read two elements (one uint32 word) at a time: the
    high element is the word with its low half cleared, the low one the word shifted up, so
    neither needs widening (about a fifth faster than widening each element)."""
    import numpy as np

    rows, half = buffer.shape[0], buffer.shape[1] // 2
    flat = buffer.view(np.uint32).reshape(-1)  # two contiguous [rows, H/2] halves
    high, low = flat[: rows * half].reshape(rows, half), flat[rows * half :].reshape(rows, half)
    more = np.empty(rows, np.float32)

    def squares(chunk: Any, out: Any) -> None:
        n, words = len(chunk), chunk.view(np.uint32)
        np.bitwise_and(words, 0xFFFF0000, out=high[:n])
        np.left_shift(words, 16, out=low[:n])
        _reduce(high[:n].view(np.float32), out)
        _reduce(low[:n].view(np.float32), more[:n])
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
    p5, median, p95 = quantiles(np.sort(good), (0.05, 0.5, 0.95))
    return NormStats(
        float(good.mean()),
        float(median),
        float(p5),
        float(p95),
        int(norms.size),
        len(bad),
        bad[0] if bad else None,
    )


def quantiles(ordered: Any, qs: tuple[float, ...]) -> list[float]:
    """``np.quantile(ordered, qs)`` (its default, linear method), to the last bit, of an
    array already sorted: numpy's own goes through ``np.unique``, which imports ``numpy.ma``
    (20-40 ms, paid again by every worker process)."""
    n = len(ordered)
    out = []
    for q in qs:
        at = (n - 1) * q  # numpy's virtual index for the linear method
        below = math.floor(at)
        above = below + 1
        if at >= n - 1:
            below = above = n - 1
        t = at - math.floor(at)
        a, b = ordered[below], ordered[above]
        step = b - a
        out.append(float(b - step * (1 - t) if t >= 0.5 else a + step * t))
    return out


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
