"""Acceptance profiles: ModelOpt's ``speculation_profile.json``, its identities, a
training-time profile against a deploy-time one, and the draft length it was measured at
against the one served (docs/acceptance-profiles.md).

No released nvidia-modelopt writes the file (0.47.0, the newest on the index, has no
``speculation_profile``). Its fields are those of NVIDIA/Model-Optimizer's open pull requests
#2313 (export), #2247 (specdec_bench) and #2315 (``ar_validate``), as their review threads
quote the writer: ``num_speculative_tokens``, ``conditional_accept_rates``,
``marginal_accept_rates``, ``mean_accept_length`` (per verify step, the bonus token counted),
``acceptance_length_histogram`` (accept length -> steps), ``measurement_conditions`` and, from
the export and benchmark writers only, ``method``. Only those are read; any other field is
kept out of the checks. The identities are the writers' own: ``marginal[i] = P(len >= i+2)``,
``conditional[i] = P(len >= i+2) / P(len >= i+1)``, ``1 + sum(marginal) == mean``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from ..findings import Finding, RuleCode, Severity, codes, finding
from .family import CheckFamily

MAX_PROFILE_BYTES = 4 << 20
"""The largest profile read (a real one is a few KiB)."""
MAX_K = 256
"""The longest per-position vector accepted (no engine drafts more)."""
TOLERANCE = 2e-3
"""How far an identity may miss: the writers round every rate (to 6 decimals; 3 still fits),
and each identity is written as a sum or product of rates, which rounding moves by a few
units of the last decimal."""
NOISE_Z = 3.0
"""EC724 fails a drop only this many standard errors beyond the two profiles' sampling
noise (where both carry their histograms: the steps measured); one-sided, about 1 in 700."""


@dataclass(frozen=True)
class Profile:
    """The fields of one profile that the checks read."""

    path: str
    k: int
    conditional: tuple[float, ...]
    marginal: tuple[float, ...]
    mean: float
    histogram: dict[int, int] = field(default_factory=dict)
    method: str | None = None
    conditions: dict[str, Any] = field(default_factory=dict)
    steps: int = 0  # verify steps (chains, rounds) measured, where no histogram counts them

    def accept_length(self, k: int | None = None) -> float:
        """The mean accept length the marginals give over the first ``k`` positions."""
        return 1.0 + sum(self.marginal[: self.k if k is None else k])


class Unreadable(Exception):
    """A profile that cannot be read: the EC720 message."""


def _fail(code: RuleCode, message: str, path: str, hint: str, **kw: Any) -> Finding:
    return finding(code, message, file=path, hint=hint, **kw)


def read_profile(path: Path) -> Profile:
    """The profile at ``path``; :class:`Unreadable` saying why not."""
    import stat

    try:
        if not stat.S_ISREG(path.stat().st_mode):  # a FIFO would block, a device never end
            raise Unreadable("is not a regular file")
        with path.open("rb") as fh:
            data = fh.read(MAX_PROFILE_BYTES + 1)
    except OSError as exc:
        raise Unreadable(f"cannot be read: {exc.strerror or exc}") from None
    if len(data) > MAX_PROFILE_BYTES:
        raise Unreadable(f"larger than {MAX_PROFILE_BYTES} bytes: not a speculation profile")
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise Unreadable(f"is not JSON: {str(exc)[:120]}") from None
    except RecursionError:
        raise Unreadable("is not JSON this reader takes: nested too deep") from None
    if not isinstance(raw, dict):
        raise Unreadable("is not a JSON object")
    if isinstance(raw.get("measured"), dict):
        return _from_measure(path, raw["measured"])
    if isinstance(raw.get("layouts"), list) and "convention" in raw:
        return _from_probe(path, raw["layouts"])
    k = raw.get("num_speculative_tokens")
    if not isinstance(k, int) or isinstance(k, bool) or not 0 < k <= MAX_K:
        raise Unreadable(f"num_speculative_tokens is {k!r}, not a count in 1..{MAX_K}")
    vectors = {}
    for name in ("conditional_accept_rates", "marginal_accept_rates"):
        value = raw.get(name)
        if not isinstance(value, list) or len(value) != k:
            raise Unreadable(f"{name} is not a list of num_speculative_tokens ({k}) rates")
        if not all(_rate(x) for x in value):
            raise Unreadable(f"{name} holds a value that is not a rate in [0, 1]")
        vectors[name] = tuple(float(x) for x in value)
    mean = raw.get("mean_accept_length")
    if not _number(mean):
        raise Unreadable(f"mean_accept_length is {mean!r:.40}, not a number")
    histogram: dict[int, int] = {}
    hist = raw.get("acceptance_length_histogram", {})
    if not isinstance(hist, dict):
        raise Unreadable("acceptance_length_histogram is not an object of length -> steps")
    for key, count in hist.items():
        try:
            length = int(key)
        except (TypeError, ValueError):
            raise Unreadable(f"acceptance_length_histogram key {key!r} is not a length") from None
        if not _number(count) or not isinstance(count, int) or count < 0:
            raise Unreadable(f"acceptance_length_histogram[{key!r}] is {count!r:.40}, not a count")
        histogram[length] = histogram.get(length, 0) + count
    method = raw.get("method")
    conditions = raw.get("measurement_conditions")
    return Profile(
        str(path),
        k,
        vectors["conditional_accept_rates"],
        vectors["marginal_accept_rates"],
        float(mean),
        histogram,
        method if isinstance(method, str) else None,
        conditions if isinstance(conditions, dict) else {},
    )


def _from_measure(path: Path, measured: dict[str, Any]) -> Profile:
    """``eagle-contract measure --json``'s result as a deploy-time profile: its per-position
    rates are the marginals (the share of rounds that accepted position i), its accept length
    the mean; the conditionals are their ratios."""
    per = measured.get("per_position")
    length = measured.get("accept_length")
    if measured.get("accept_length_is_lower_bound"):
        raise Unreadable("holds measure's lower bound only (llama-server without --metrics)")
    if not isinstance(per, list) or not 0 < len(per) <= MAX_K or not all(_rate(x) for x in per):
        raise Unreadable("holds measure's result without per-position rates")
    if not _number(length):
        raise Unreadable(f"measure's accept_length is {length!r:.40}, not a number")
    marginal = tuple(float(x) for x in per)
    conditional = tuple(
        m / (marginal[i - 1] if i else 1.0) if (marginal[i - 1] if i else 1.0) > 0 else 0.0
        for i, m in enumerate(marginal)
    )
    engine = measured.get("engine")
    return Profile(
        str(path),
        len(marginal),
        conditional,
        marginal,
        float(length),
        method=f"measured on {engine}" if isinstance(engine, str) else "measured",
        steps=_count(measured.get("rounds")),
    )


def _from_probe(path: Path, layouts: list[Any]) -> Profile:
    """``eagle-contract probe --json``'s estimate as a profile: the layout the engine serves
    (the first not the trainer's alone, as the gate reads it), its ``per_step`` the
    conditional rates (the share of chains reaching step s+1 that accept it), the marginals
    their running products, its ``accept_length`` the mean."""
    rows = [x for x in layouts if isinstance(x, dict)]
    row = next((x for x in rows if x.get("name") != "trainer"), rows[0] if rows else None)
    if row is None:
        raise Unreadable("holds probe's result without a layout")
    per, length = row.get("per_step"), row.get("accept_length")
    if not isinstance(per, list) or not 0 < len(per) <= MAX_K or not all(_rate(x) for x in per):
        raise Unreadable("holds probe's result without per-step rates")
    if not _number(length):
        raise Unreadable(f"probe's accept_length is {length!r:.40}, not a number")
    conditional = tuple(float(x) for x in per)
    marginal: list[float] = []
    for c in conditional:
        marginal.append(c * (marginal[-1] if marginal else 1.0))
    return Profile(
        str(path),
        len(conditional),
        conditional,
        tuple(marginal),
        float(length),
        method=f"probe estimate, layout {row.get('name')!s}",
        steps=_count(row.get("chains")),
    )


def _count(x: object) -> int:
    """A step count as measure (``rounds``) and probe (``chains``) write it; 0 when absent
    (or past what a float holds: the noise is then unknown)."""
    return x if _number(x) and isinstance(x, int) and x > 0 else 0


def _number(x: object) -> TypeGuard[int | float]:
    """A finite JSON number a float holds (a 400-digit integer is none: OverflowError)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def _rate(x: object) -> bool:
    return _number(x) and 0.0 <= float(x) <= 1.0


def _close(a: float, b: float, tol: float = TOLERANCE) -> bool:
    return abs(a - b) <= tol


def _vector(values: tuple[float, ...] | list[float]) -> str:
    return "[" + ", ".join(f"{v:.4f}" for v in values) + "]"


def identities(p: Profile) -> list[Finding]:
    """EC721-EC723 and EC725 on one profile."""
    out: list[Finding] = []
    said = 1.0 + sum(p.marginal)
    if not _close(said, p.mean, TOLERANCE * (p.k + 1)):
        out.append(
            _fail(
                "EC721",
                f"1 + sum(marginal_accept_rates) is {said:.4f}, mean_accept_length "
                f"{p.mean:.4f}: the two describe other measurements",
                p.path,
                "regenerate the profile from one measurement (the writer's scalar mean and "
                "its histogram must be the same steps)",
                expected=f"{said:.4f}",
                found=f"{p.mean:.4f}",
            )
        )
    derived = [
        p.marginal[i] / (p.marginal[i - 1] if i else 1.0)
        for i in range(p.k)
        if i == 0 or p.marginal[i - 1] > 0
    ]
    # conditional[i] * marginal[i-1] == marginal[i]: in product form a rate rounded to D
    # decimals moves either side by at most 1.5 * 10^-D (as a ratio, by 10^-D / marginal[i-1]:
    # benchmarks/false_alarms_profiles.py measured 38 false alarms in 200 good profiles
    # rounded to 3 decimals that way, none this way)
    bad = [
        i
        for i in range(len(derived))
        if not _close(p.conditional[i] * (p.marginal[i - 1] if i else 1.0), p.marginal[i])
    ]
    if bad:
        out.append(
            _fail(
                "EC722",
                f"conditional_accept_rates differ from marginal[i] / marginal[i-1] at "
                f"position(s) {bad}",
                p.path,
                "a consumer that reads the other vector gets another draft: the two must "
                "describe one acceptance distribution",
                expected=_vector(derived),
                found=_vector(p.conditional[: len(derived)]),
            )
        )
    out += _histogram(p)
    out += saturated(p.mean, p.k, f"{p.path}: mean_accept_length", file=p.path)
    return out


def _histogram(p: Profile) -> list[Finding]:
    if not p.histogram:
        return []
    steps = sum(p.histogram.values())
    outside = sorted(n for n in p.histogram if not 1 <= n <= p.k + 1 and p.histogram[n])
    if steps == 0 or outside:
        why = (
            f"lengths {outside} lie outside [1, num_speculative_tokens + 1 = {p.k + 1}]"
            if outside
            else "it counts no step"
        )
        return [
            _fail(
                "EC723",
                f"acceptance_length_histogram: {why}",
                p.path,
                "the accept length counts the bonus token: 1 to num_speculative_tokens + 1",
            )
        ]

    def at_least(t: int) -> float:
        return sum(c for n, c in p.histogram.items() if n >= t) / steps

    marginal = [at_least(i + 2) for i in range(p.k)]
    mean = sum(n * c for n, c in p.histogram.items()) / steps
    wrong = [i for i in range(p.k) if not _close(marginal[i], p.marginal[i])]
    if wrong or not _close(mean, p.mean, TOLERANCE * (p.k + 1)):
        return [
            _fail(
                "EC723",
                f"acceptance_length_histogram ({steps} steps) gives mean {mean:.4f} and "
                f"marginals {_vector(marginal)}; the profile says {p.mean:.4f} and "
                f"{_vector(p.marginal)}",
                p.path,
                "the histogram and the rates must come from the same steps",
                expected=f"{mean:.4f}",
                found=f"{p.mean:.4f}",
            )
        ]
    return []


def saturated(
    length: float | None, k: int | None, what: str, *, file: str = "", contract: Any = None
) -> list[Finding]:
    """EC725 when an accept length is exactly 1.0 (nothing accepted: the wrong tensor read,
    no draft loaded) or exactly ``k + 1`` (every draft token accepted: a benchmark knob, a
    draft compared with itself)."""
    if length is None:
        return []
    if length == 1.0:
        why = "not one draft token was accepted: the wrong tensor was read or no draft ran"
        severity: Severity = "error"
    elif k is not None and length == k + 1:
        why = (
            f"every one of the {k} draft tokens was accepted at every step: a faked "
            "acceptance (EC517-EC520) or the target verifying itself"
        )
        # a warning: a draft trained to match a small target on easy prompts does accept every
        # token (a real llama-server, tests/live/test_measure_llamacpp.py: 5.0 of 5)
        severity = "warning"
    else:
        return []
    return [
        finding(
            "EC725",
            f"{what} is exactly {length:g}: {why}",
            file=file,
            contract=contract,
            key="serving.min_accept_length" if contract is not None else "",
            hint="measure again with the benchmark knobs unset and the draft loaded; a real "
            "draft's accept length lies strictly between 1 and the maximum",
            severity=severity,
        )
    ]


def compare(training: Profile, deploy: Profile, max_drop: float) -> list[Finding]:
    """EC724 (the deploy-time profile accepts less) and EC726 (another draft length): the
    two are compared on the draft positions both measured."""
    out: list[Finding] = []
    k = min(training.k, deploy.k)
    if training.k != deploy.k:
        out.append(
            _fail(
                "EC726",
                f"{training.path} was measured at num_speculative_tokens {training.k}, "
                f"{deploy.path} at {deploy.k}: compared on the first {k} position(s)",
                deploy.path,
                "measure both at the draft length served (vLLM num_speculative_tokens = "
                "SGLang --speculative-num-steps)",
                severity="warning",
            )
        )
    was, now = training.accept_length(k), deploy.accept_length(k)
    noise = _noise(training, k) + _noise(deploy, k)  # variance of the difference; 0: unknown
    within_noise = noise > 0 and was - now <= NOISE_Z * math.sqrt(noise)
    if was > 0 and (was - now) / was > max_drop:
        rows = [
            f"  position {i}: conditional {training.conditional[i]:.4f} -> "
            f"{deploy.conditional[i]:.4f}{_position_noise(training, deploy, i)}"
            for i in range(k)
        ]
        out.append(
            _fail(
                "EC724",
                f"the deploy-time profile accepts {now:.3f} tokens a step over the first {k} "
                f"position(s), the training-time one {was:.3f}: {100 * (was - now) / was:.1f}% "
                f"less (at most {100 * max_drop:.0f}% allowed)",
                deploy.path,
                (
                    f"within {NOISE_Z:g} standard errors of the profiles' known sampling noise "
                    f"({math.sqrt(noise):.3f}): measure more steps to tell"
                    if within_noise
                    else "the served draft is not the trained one's equal: check the layout, "
                    "the chat template and the target (doctor), and the measurement conditions"
                ),
                expected=f">= {was * (1 - max_drop):.3f}",
                found=f"{now:.3f}",
                details="\n".join(rows),
                severity="warning" if within_noise else "error",
            )
        )
    return out


def _reached(p: Profile, i: int) -> float:
    """How many of ``p``'s steps reached draft position ``i`` (0: the steps are unknown)."""
    steps = sum(p.histogram.values()) or p.steps
    return steps * (p.marginal[i - 1] if i else 1.0)


def _position_noise(training: Profile, deploy: Profile, i: int) -> str:
    """Whether the drop of the conditional rate at position ``i`` lies beyond ``NOISE_Z``
    standard errors of the two rates' binomial noise (each over the steps that reached it);
    empty where either profile's steps are unknown or no step reached it."""
    a, b = training.conditional[i], deploy.conditional[i]
    n_a, n_b = _reached(training, i), _reached(deploy, i)
    if n_a < 1 or n_b < 1 or b >= a:
        return ""
    se = math.sqrt(a * (1 - a) / n_a + b * (1 - b) / n_b)
    if se == 0 or a - b > NOISE_Z * se:
        return f" (beyond {NOISE_Z:g} standard errors)"
    return f" (within {NOISE_Z:g} standard errors)"


def _noise(p: Profile, k: int) -> float:
    """The variance of ``p``'s accept length over the first ``k`` positions as it was
    measured (the mean of min(length, k + 1) over its steps): from its histogram; else, where
    the steps are known (probe's ``chains``, measure's ``rounds``), from the distribution its
    marginals give (``P(len >= i+2) = marginal[i]``) over that many steps; 0 otherwise."""
    steps = sum(p.histogram.values())
    if steps >= 2:
        values = [(min(n, k + 1), c) for n, c in p.histogram.items()]
        mean = sum(v * c for v, c in values) / steps
        return sum(c * (v - mean) ** 2 for v, c in values) / (steps - 1) / steps
    if p.steps < 2:
        return 0.0
    at_least = [1.0, *p.marginal[:k]]  # P(min(len, k+1) >= j+1), j = 0..k
    probs = [max(at_least[j] - (at_least[j + 1] if j < k else 0.0), 0.0) for j in range(k + 1)]
    mean = sum((j + 1) * q for j, q in enumerate(probs))
    return sum(q * (j + 1 - mean) ** 2 for j, q in enumerate(probs)) / p.steps


def served_length(p: Profile, command: str) -> list[Finding]:
    """EC726 when the launch line drafts another number of tokens than the profile measured
    (each engine's setting brought to one quantity: engines/knobs.py ``draft_length``)."""
    from ..engines.knobs import draft_length

    served = draft_length(command)
    if served is None or served.k == p.k:
        return []
    return [
        _fail(
            "EC726",
            f"the profile was measured at num_speculative_tokens {p.k}; the launch line drafts "
            f"{served.k} ({served.said})",
            p.path,
            "compare acceptance at one draft length: SGLang's --speculative-num-draft-tokens "
            "counts the root token, vLLM's num_speculative_tokens does not",
            expected=p.k,
            found=served.k,
            severity="warning",
        )
    ]


def below_floor(p: Profile, contract: Any) -> list[Finding]:
    """EC727 when the profile's mean accept length lies under the contract's floor
    ``serving.min_accept_length`` (the one floor probe, EC906, and measure, EC712, hold)."""
    serving = getattr(contract, "serving", None)
    floor = serving.min_accept_length if serving is not None else None
    if floor is None or p.mean >= floor:
        return []
    return [
        finding(
            "EC727",
            f"{p.path} ({p.method or 'a speculation profile'}) accepts {p.mean:.3f} tokens a "
            f"verify step at num_speculative_tokens {p.k}, below the contract's floor {floor}",
            file=p.path,
            contract=contract,
            key="serving.min_accept_length",
            expected=f">= {floor}",
            found=f"{p.mean:.3f}",
            hint="the draft accepts too little for this contract: check the served layout "
            "(eagle-contract check), compare with the probe's estimate (probe --json as "
            "--compare), retrain, or lower serving.min_accept_length",
        )
    ]


def check_profiles(
    path: Path,
    against: Path | None = None,
    serving_args: str | None = None,
    max_drop: float = 0.05,
    contract: Any = None,
) -> tuple[list[Finding], list[Profile]]:
    """Every finding on the profile at ``path`` (and ``against``, the deploy-time one, when
    given) and the profiles read; with ``contract``, each held to its acceptance floor."""
    out: list[Finding] = []
    read: list[Profile] = []
    for p in (path, against):
        if p is None:
            continue
        try:
            profile = read_profile(p)
        except Unreadable as exc:
            out.append(
                _fail(
                    "EC720",
                    f"{p} {exc}",
                    str(p),
                    "give the speculation_profile.json ModelOpt writes (export, specdec_bench "
                    "or ar_validate)",
                )
            )
            continue
        read.append(profile)
        out += identities(profile)
        if contract is not None:
            out += below_floor(profile, contract)
        if serving_args:
            out += served_length(profile, serving_args)
    if against is not None and len(read) == 2:
        out += compare(read[0], read[1], max_drop)
    return out, read


def _not_planned(*_: object) -> list[Finding]:
    raise AssertionError("the acceptance-profile family is run by `eagle-contract profile`")


FAMILY = CheckFamily(
    "acceptance-profile",
    "contract",
    "a speculation_profile.json's identities, training against deploy time, the draft length, "
    "the contract's floor (eagle-contract profile)",
    codes=codes("EC72"),
    keys=("serving",),
    run=_not_planned,
    needs=frozenset({"serving"}),
    default=False,
    selectable=False,
)
"""The codes' owner in the registry; the planner never plans it (neither default nor
selectable): ``eagle-contract profile`` runs :func:`check_profiles` itself."""
