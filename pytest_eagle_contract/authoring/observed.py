"""What ``infer`` and ``--eagle-contract-update`` measure on trusted shards: per slot the
per-shard median norms, and the bounds drawn from them (docs/first-contract.md).

Bounds are drawn for a false-alarm rate: a shard's median over T tokens varies from shard to
shard about as 1/sqrt(T) (log scale), so the trusted shards' medians and lengths give a
Student-t prediction of a fresh shard's median (n - 1 degrees of freedom: from few shards
the prediction is wide). Each slot's *quiet* bounds leave ``RATE`` / slots of fresh shards
outside, and never less than the old margin (the range widened by itself, at least
``MIN_MARGIN``). Where two slots' quiet bounds would overlap, a swap of the two would pass:
unless a reference capture tells them apart, they are cut at the point between their
medians that is equally unlikely for both, and the rate those cut bounds give is stated.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ShardReadError, UsageError
from ..shards.reading import Sample, Slot, dtype_name, read_sample
from ..shards.stats import norm_stats

if TYPE_CHECKING:
    from ..shards.stored import Array

MIN_MARGIN = 0.05  # bounds reach at least 5 % beyond the observed medians
RATE = 1e-4  # quiet bounds: fresh good shards failing a norm bound, all slots together
ALARMING = 1e-3  # an estimated rate above this is a warning (issue 22: at most 1 in 1,000)
CUT_GAP = 0.1  # share of the gap between two slots' medians a cut leaves to neither slot
MIN_SHARE = 0.2  # and the least share of the rest it leaves each of the two
SAFETY = 0.01  # sharp with bounds 1 % wider (a bf16 norm rounds by 0.4 %)
TIGHT = 1e-3  # the narrowest bounds reach this share beyond the trusted medians
MIN_SCALE = 1e-4  # the least shard-to-shard spread assumed (log scale: 0.01 %)


@dataclass
class Observed:
    """Per slot, one median norm per shard, and what the shards hold besides."""

    format: str
    hidden_size: int
    dtypes: list[str]
    medians: list[list[float]]  # per slot, one median per shard
    lengths: list[int]
    shards: int
    metadata: dict[str, Any]
    ids_dtype: str
    mask_dtype: str
    probe: tuple[Array, list[Array]] | None = field(default=None, repr=False)  # ids, states
    rows: list[int] = field(default_factory=list)  # per shard, the tokens its medians are over


def observe(
    paths: Sequence[Path], format: str, hidden_size: int | None, workers: int = 1
) -> Observed:
    """What ``paths`` hold; with ``workers`` > 1 the norms are measured in worker processes
    (one file per task), the rest read here from the memory-mapped files."""
    measured = _measure_all(paths, format, hidden_size, workers)
    medians: list[list[float]] = []
    dtypes: list[str] = []
    lengths: list[int] = []
    fmt_name = ""
    hidden = hidden_size
    metadata: dict[str, Any] = {}
    ids_dtype = mask_dtype = "int64"
    probe = None
    rows: list[int] = []
    for path in paths:
        try:
            sample = read_sample(path, format, arrays=True)
        except ShardReadError as exc:
            raise UsageError(f"{path}: {exc.code} {exc.message}: infer needs good shards") from None
        hidden, slots, problems = _split(sample, hidden)
        if problems:
            raise UsageError(f"{path}: {'; '.join(problems)}: pass --hidden-size")
        if fmt_name and (sample.format.name != fmt_name or len(slots) != len(medians)):
            raise UsageError(
                f"{path}: {sample.format.name} with {len(slots)} slots differs from "
                f"the first shard ({fmt_name}, {len(medians)} slots)"
            )
        fmt_name = sample.format.name
        metadata = metadata or sample.metadata
        if not medians:
            medians = [[] for _ in slots]
            dtypes = [s.dtype for s in slots]
            if sample.ids is not None:
                ids_dtype = dtype_name(sample.ids.dtype)
            if sample.mask is not None:
                mask_dtype = dtype_name(sample.mask.dtype)
        for slot in slots:
            medians[slot.index].append(_median(measured.get(path), hidden, slot))
        rows.append(int(slots[0].array.shape[0]) if slots and slots[0].array.dim() == 2 else 0)
        ids = sample.ids
        if ids is not None:
            lengths.append(int(ids.numel()))
            states = [s.array for s in slots]
            if probe is None and all(s.dim() == 2 and s.shape[0] == ids.numel() for s in states):
                probe = (ids, states)
    if hidden is None or not medians:
        raise UsageError("the shards hold no hidden states: infer needs at least one slot")
    return Observed(
        fmt_name,
        hidden,
        dtypes,
        medians,
        lengths,
        len(paths),
        metadata,
        ids_dtype,
        mask_dtype,
        probe,
        rows,
    )


Measured = tuple[int | None, list[float]]  # the width a file's slots were split by, medians


def _measure(task: tuple[Path, str, int | None]) -> Measured | None:
    """A worker's part: one file's per-slot median norms (None when it cannot be read:
    the caller reads it again and says why)."""
    path, format, hidden = task
    try:
        sample = read_sample(path, format, arrays=True)
    except ShardReadError:
        return None
    hidden, slots, _ = _split(sample, hidden)
    return hidden, [norm_stats(s.array).median for s in slots]


def _split(sample: Sample, hidden: int | None) -> tuple[int | None, list[Slot], list[str]]:
    """``sample``'s slots split by ``hidden``, else by the last state's own width, with
    that width and why any key could not be split."""
    if hidden is None:
        first, _ = sample.slots(None)
        hidden = int(first[-1].array.shape[-1]) if first else None
    slots, problems = sample.slots(hidden)
    return hidden, slots, problems


def _measure_all(
    paths: Sequence[Path], format: str, hidden: int | None, workers: int
) -> dict[Path, Measured | None]:
    from ..pool import executor, imap, single_threaded

    if workers <= 1 or len(paths) <= 1:
        with single_threaded():  # as a worker would: torch's threads lose on small chunks
            return {p: _measure((p, format, hidden)) for p in paths}
    with executor(min(workers, len(paths))) as pool:
        done = imap(_measure, [(p, format, hidden) for p in paths], pool)
        return {task[0]: future.result() for task, future in done}


def _median(measured: Measured | None, hidden: int | None, slot: Slot) -> float:
    """The slot's median norm: from the worker when it split the file alike, else here."""
    if measured is not None and measured[0] == hidden and slot.index < len(measured[1]):
        return measured[1][slot.index]
    return norm_stats(slot.array).median


# -- bounds ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """One slot's per-shard medians as a prediction of a fresh shard's median.

    On a log scale, shard i's median over ``T_i`` tokens is taken as ``mean + e_i`` with
    ``e_i`` of spread ``tau / sqrt(T_i)`` (a median's sampling error; tiny transformers
    follow it closely, see docs/sharpness.md), ``mean`` and ``tau`` estimated with weights
    ``T_i``; a fresh shard's length is drawn like the trusted ones'. ``df`` is n - 1 (0:
    one shard, nothing to predict from)."""

    low: float  # the least and greatest trusted median
    high: float
    center: float  # the median of the trusted medians
    mean: float  # log scale
    scales: tuple[float, ...]  # per trusted length: the prediction's spread (log scale)
    df: int

    @classmethod
    def of(cls, values: Sequence[float], rows: Sequence[int] = ()) -> Spread:
        lo, hi, center = min(values), max(values), statistics.median(values)
        n = len(values)
        if n < 2 or lo <= 0 or not math.isfinite(hi):
            return cls(lo, hi, center, math.log(center) if center > 0 else 0.0, (), 0)
        weights = [float(t) for t in rows] if len(rows) == n and min(rows) > 0 else [1.0] * n
        total = sum(weights)
        logs = [math.log(v) for v in values]
        mean = sum(w * x for w, x in zip(weights, logs)) / total
        tau2 = sum(w * (x - mean) ** 2 for w, x in zip(weights, logs)) / (n - 1)
        scales = tuple(max(MIN_SCALE, math.sqrt(tau2 * (1 / w + 1 / total))) for w in weights)
        return cls(lo, hi, center, mean, scales, n - 1)

    def margin(self) -> tuple[float, float]:
        """The range widened by itself on each side, at least ``MIN_MARGIN``."""
        lo, hi, center = self.low, self.high, self.center
        margin = max(MIN_MARGIN, (hi - lo) / center if center else MIN_MARGIN)
        return lo / (1 + margin), hi * (1 + margin)

    def tight(self) -> tuple[float, float]:
        """The trusted medians' range and hardly more: the narrowest bounds they pass."""
        return self.low / (1 + TIGHT), self.high * (1 + TIGHT)

    def rate(self, low: float, high: float) -> float | None:
        """The share of fresh shards whose median falls outside [low, high] (None: one
        trusted shard predicts nothing)."""
        if not self.df:
            return None
        a = math.log(low) if low > 0 else -math.inf
        b = math.log(high) if high > 0 else -math.inf
        out = 0.0
        for s in self.scales:
            out += t_sf((self.mean - a) / s, self.df) + t_sf((b - self.mean) / s, self.df)
        return out / len(self.scales)

    def quiet(self, rate: float) -> tuple[float, float]:
        """The margin bounds, widened (evenly on the log scale) until ``rate`` of fresh
        shards fall outside."""
        low, high = self.margin()
        if not self.df:
            return low, high
        lo, hi = 0.0, 1.0
        while self._outside(hi) > rate and hi < MAX_REACH:
            lo, hi = hi, hi * 2
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self._outside(mid) > rate else (lo, mid)
        return min(low, math.exp(self.mean - hi)), max(high, math.exp(self.mean + hi))

    def _outside(self, w: float) -> float:
        return sum(2 * t_sf(w / s, self.df) for s in self.scales) / len(self.scales)

    @property
    def typical(self) -> float:
        """The prediction's spread over the trusted lengths (root mean square)."""
        return math.sqrt(sum(s * s for s in self.scales) / len(self.scales)) if self.df else 0.0


MAX_REACH = 20.0  # log scale: quiet bounds never reach past e**20 of the mean
REACH_STEPS = 6  # bisection steps when a slot's bounds must be narrowed for sharpness

Bounds = tuple[float, float]


@dataclass(frozen=True)
class Fit:
    """Drafted bounds per slot, how sure they are, and what was given up for sharpness."""

    bounds: list[Bounds]
    rates: list[float | None]  # per slot: fresh good shards outside (None: not known)
    cut: list[tuple[int, int]]  # pairs of slots cut apart so that a swap fails
    reach: list[float]  # per slot: 1 quiet, 0 the margin rule, -1 the medians' range
    shards: int

    @classmethod
    def of(cls, bounds: list[Bounds]) -> Fit:
        """Bounds alone (how sure they are not known)."""
        return cls(bounds, [None] * len(bounds), [], [1.0] * len(bounds), 0)

    @property
    def rate(self) -> float | None:
        """Estimated share of fresh good shards failing some norm bound (a sum over slots:
        at most that)."""
        if any(r is None for r in self.rates):
            return None
        return sum(r for r in self.rates if r is not None)

    @property
    def quiet(self) -> bool:
        """Nothing was cut or narrowed: the bounds are the quiet ones."""
        return not self.cut and all(r >= 1.0 for r in self.reach)


def draw(
    spreads: Sequence[Spread], reach: Sequence[float], cut: bool = True
) -> tuple[list[Bounds], list[tuple[int, int]]]:
    """Each slot's bounds between its margin bounds (reach 0) and its quiet bounds (1), or
    the trusted medians' range (-1), then,
    with ``cut``, pairs whose bounds would overlap cut apart (never short of a trusted
    median; pairs whose trusted medians overlap cannot be cut)."""
    n = len(spreads)
    out: list[Bounds] = []
    for sp, f in zip(spreads, reach):
        mlo, mhi = sp.margin()
        tlo, thi = _quiet(sp, RATE / max(n, 1)) if f >= 0 else sp.tight()
        out.append((_between(mlo, tlo, abs(f)), _between(mhi, thi, abs(f))))
    pairs: list[tuple[int, int]] = []
    if not cut:
        return out, pairs
    for a in range(n):
        for b in range(a + 1, n):
            if spreads[a].high < spreads[b].low:
                i, j = a, b
            elif spreads[b].high < spreads[a].low:
                i, j = b, a
            else:
                continue  # the medians overlap: norms cannot tell the two apart
            cut_at = _cut(spreads[i], spreads[j], out[i][1], out[j][0])
            if cut_at is not None:
                out[i] = (out[i][0], min(out[i][1], cut_at[0]))
                out[j] = (max(out[j][0], cut_at[1]), out[j][1])
                pairs.append((a, b))
    return out, pairs


@functools.lru_cache(maxsize=256)
def _quiet(spread: Spread, rate: float) -> Bounds:
    return spread.quiet(rate)


def _between(margin: float, to: float, f: float) -> float:
    """``f`` of the way from the margin bound to ``to`` (log scale)."""
    if f >= 1.0 or margin <= 0 or to <= 0:
        return to if f >= 1.0 else margin
    return math.exp(math.log(margin) + f * (math.log(to) - math.log(margin)))


def _cut(lower: Spread, upper: Spread, high: float, low: float) -> Bounds | None:
    """Where the lower slot's bounds must end and the upper's begin so that they keep
    ``CUT_GAP`` of the gap between their medians free; None when they already do. Both
    ends are equally unlikely for their slot's fresh medians (as many spreads from its
    mean), and each slot keeps at least ``MIN_SHARE`` of the rest of the gap."""
    if lower.high <= 0:  # a zero slot: the gap on the plain scale
        share = (1 - CUT_GAP) / 2 * (upper.low - lower.high)
        end, begin = lower.high + share, upper.low - share
        return None if high <= end and low >= begin else (end, begin)
    x, y = math.log(lower.high), math.log(upper.low)
    g = CUT_GAP * (y - x)
    if math.log(high) + g <= (math.log(low) if low > 0 else -math.inf):
        return None
    si, sj = lower.typical, upper.typical
    if si and sj:  # both ends as many spreads from their slot's mean
        k = (upper.mean - lower.mean - g) / (si + sj)
        c = lower.mean + si * k + g / 2
    else:
        c = (x + y) / 2
    keep = MIN_SHARE * (y - x - g)  # each slot keeps some of the gap beyond its medians
    c = min(max(c, x + g / 2 + keep), y - g / 2 - keep)
    return math.exp(c - g / 2), math.exp(c + g / 2)


def fit_bounds(
    medians: Sequence[Sequence[float]],
    rows: Sequence[int] = (),
    sharp: Callable[[list[Bounds]], bool] | None = None,
    cut: bool = True,
) -> Fit:
    """Bounds for every slot: quiet where ``sharp`` (the sharpness self-test on a contract
    with these bounds) allows, else narrowed slot by slot towards the margin rule (or, when
    that is not sharp either, towards the trusted medians' range), the slot most at risk of
    false alarms widened first. When even the range is not sharp, the margin rule (the
    caller says why)."""
    spreads = [Spread.of(v, rows) for v in medians]
    n = len(spreads)

    def fit(reach: list[float]) -> Fit:
        bounds, pairs = draw(spreads, reach, cut)
        rates = [sp.rate(lo, hi) for sp, (lo, hi) in zip(spreads, bounds)]
        return Fit(bounds, rates, pairs, reach, len(medians[0]) if medians else 0)

    def ok(reach: list[float]) -> bool:
        """Sharp with room to spare: each bound not set by a cut widened by ``SAFETY``, so
        that no mutation gets through by less than the dtype's rounding (the self-test's
        hardest record can then be built; where it cannot, it tries an easier one)."""
        assert sharp is not None
        uncut, _ = draw(spreads, reach, False)
        bounds, _ = draw(spreads, reach, cut)
        return sharp(
            [
                (lo / (1 + SAFETY) if lo == ulo else lo, hi * (1 + SAFETY) if hi == uhi else hi)
                for (lo, hi), (ulo, uhi) in zip(bounds, uncut)
            ]
        )

    if sharp is None or ok([1.0] * n):
        return fit([1.0] * n)
    for base in (0.0, -1.0):
        if ok([base] * n):
            break
    else:
        return fit([0.0] * n)
    floor = fit([base] * n)
    reach = [base] * n
    for k in sorted(range(n), key=lambda k: -(floor.rates[k] or 0.0)):
        trial = [*reach[:k], 1.0, *reach[k + 1 :]]
        if ok(trial):
            reach = trial
            continue
        lo, hi = base, 1.0
        for _ in range(REACH_STEPS):
            mid = (lo + hi) / 2
            trial[k] = mid
            lo, hi = (mid, hi) if ok(trial) else (lo, mid)
        reach[k] = lo
    return fit(reach)


def bounds_from(values: list[float], others: Sequence[list[float]] = ()) -> tuple[float, float]:
    """Quiet bounds on a slot's median norm from its per-shard ``values``, cut against
    ``others`` (other slots' per-shard medians) as :func:`fit_bounds` does."""
    return fit_bounds([values, *others]).bounds[0]


def describe_rate(rate: float | None, shards: int) -> str:
    """``1 in 27,000 fresh shards`` and kin, for the contract's comment and infer's notes."""
    if rate is None:
        if shards < 2:
            return f"not known (drafted from {shards} shard: draft from 10 or more)"
        return "not known (a slot's median norms are zero)"
    if rate < 1e-9:
        return "fewer than 1 in 1,000,000,000 fresh shards"
    one_in = 1 / rate
    digits = max(0, math.floor(math.log10(one_in)) - 1)
    return f"1 in {round(one_in, -digits):,.0f} fresh shards"


# -- Student's t -----------------------------------------------------------------------------


def t_sf(t: float, df: int) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom."""
    if t != t:
        return 1.0
    if t < 0:
        return 1.0 - t_sf(-t, df)
    if math.isinf(t):
        return 0.0
    return 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (continued fraction)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        step = 1.0
        for aa in (
            m * (b - m) * x / ((a - 1 + 2 * m) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 1 + 2 * m)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            step = d * c
            h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return h
