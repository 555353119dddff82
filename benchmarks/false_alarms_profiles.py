"""False alarms and misses of the acceptance-profile thresholds (docs/acceptance-profiles.md).

Good profiles are written as the writers write them: an accept-length histogram drawn from a
chain draft whose per-position acceptance falls with depth, the rates derived from it and
rounded to D decimals. The identities (EC721-EC723, ``TOLERANCE``) must stay silent on every
one; a profile whose scalar mean comes from another measurement must not. The drift rule
(EC724, ``--max-drop`` 0.05) is run on two independent measurements of one draft (a false
alarm when it fires) and on a draft whose acceptance really fell by 10 % (a miss when it does
not), at several numbers of verify steps per profile. The same drift rule against a probe
estimate (``probe --json``: per-step conditional rates rounded to 4 decimals over its
``chains``, no histogram) is measured with the probe's own sampling noise counted (its chains
and the variance its rates give) and without it (the rule before: the training histogram's
noise alone).

    python benchmarks/false_alarms_profiles.py [--seeds 200]
"""

from __future__ import annotations

import argparse
import random

from pytest_eagle_contract.checks.profile import Profile, compare, identities


def rates(rng: random.Random, k: int) -> list[float]:
    """A chain draft's per-position acceptance, given the positions before: falling with depth."""
    base = rng.uniform(0.55, 0.95)
    return [base * rng.uniform(0.85, 1.0) ** i for i in range(k)]


def draw(rng: random.Random, p: list[float], steps: int) -> dict[int, int]:
    """An accept-length histogram of ``steps`` verify steps of the draft ``p``."""
    hist: dict[int, int] = {}
    for _ in range(steps):
        n = 1
        while n <= len(p) and rng.random() < p[n - 1]:
            n += 1
        hist[n] = hist.get(n, 0) + 1
    return hist


def profile(hist: dict[int, int], k: int, decimals: int, mean_shift: float = 0.0) -> Profile:
    steps = sum(hist.values())

    def at_least(t: int) -> float:
        return sum(c for n, c in hist.items() if n >= t) / steps

    marginal = [at_least(i + 2) for i in range(k)]
    conditional = [at_least(i + 2) / at_least(i + 1) if at_least(i + 1) else 0.0 for i in range(k)]
    mean = sum(n * c for n, c in hist.items()) / steps + mean_shift
    return Profile(
        "p.json",
        k,
        tuple(round(x, decimals) for x in conditional),
        tuple(round(x, decimals) for x in marginal),
        round(mean, decimals),
        dict(hist),
    )


def identity_table(seeds: int) -> None:
    print(
        "identities (EC721-EC723, tolerance 2e-3): good profiles that fire / shifted means caught"
    )
    print(f"{'decimals':>8} {'good profiles':>14} {'false alarms':>13} {'mean +0.05 caught':>18}")
    for decimals in (6, 4, 3):
        rng = random.Random(decimals)
        alarms = caught = 0
        for _ in range(seeds):
            k = rng.randint(1, 8)
            hist = draw(rng, rates(rng, k), rng.choice([20, 200, 2000, 20000]))
            found = identities(profile(hist, k, decimals))
            alarms += any(f.code in ("EC721", "EC722", "EC723") for f in found)
            caught += any(f.code == "EC721" for f in identities(profile(hist, k, decimals, 0.05)))
        print(f"{decimals:>8} {seeds:>14} {alarms:>13} {caught:>14}/{seeds}")


def _drift(train: Profile, other: Profile) -> str:
    """'error', 'warning' (a drop within the sampling noise) or '' for no EC724."""
    found = [f for f in compare(train, other, 0.05) if f.code == "EC724"]
    return found[0].severity if found else ""


def drift_table(seeds: int) -> None:
    print("\ndrift (EC724, max drop 5 %, 3 standard errors): one draft measured twice / 10 % worse")
    print(f"{'steps':>7} {'same: errors':>13} {'same: warnings':>15} {'worse: missed':>14}")
    for steps in (100, 400, 1600, 6400):
        rng = random.Random(steps)
        errors = warnings = misses = 0
        for _ in range(seeds):
            k = rng.randint(3, 6)
            p = rates(rng, k)
            train = profile(draw(rng, p, steps), k, 6)
            again = _drift(train, profile(draw(rng, p, steps), k, 6))  # the same draft again
            worse = _drift(train, profile(draw(rng, [0.9 * x for x in p], steps), k, 6))
            errors += again == "error"
            warnings += again == "warning"
            misses += worse != "error"
        print(f"{steps:>7} {errors:>9}/{seeds} {warnings:>11}/{seeds} {misses:>10}/{seeds}")


def probe_estimate(hist: dict[int, int], k: int, noise: bool) -> Profile:
    """A probe estimate as ``profile`` reads ``probe --json``: the conditional rates the
    chains give (``per_step``, rounded to 4 decimals), their running products the marginals;
    ``steps`` = the chains where ``noise`` (0: the noise unknown, as before)."""
    chains = sum(hist.values())

    def at_least(t: int) -> float:
        return sum(c for n, c in hist.items() if n >= t) / chains

    conditional = [
        round(at_least(i + 2) / at_least(i + 1), 4) if at_least(i + 1) else 0.0 for i in range(k)
    ]
    marginal: list[float] = []
    for c in conditional:
        marginal.append(c * (marginal[-1] if marginal else 1.0))
    return Profile(
        "probe.json",
        k,
        tuple(conditional),
        tuple(marginal),
        1 + sum(marginal),
        steps=chains if noise else 0,
    )


def probe_table(seeds: int) -> None:
    print(
        "\ndrift against a probe estimate (EC724, max drop 5 %; training profile 2,000 steps): "
        "same draft / 10 % worse"
    )
    print(
        f"{'chains':>7} {'same: errors':>13} {'before':>7} {'same: warnings':>15} "
        f"{'worse: missed':>14} {'before':>7}"
    )
    for chains in (32, 128, 512, 2048):
        rng = random.Random(chains + 1)
        errors = before = warnings = misses = missed_before = 0
        for _ in range(seeds):
            k = rng.randint(3, 6)
            p = rates(rng, k)
            train = profile(draw(rng, p, 2000), k, 6)
            same = draw(rng, p, chains)
            worse = draw(rng, [0.9 * x for x in p], chains)
            now = _drift(train, probe_estimate(same, k, True))
            errors += now == "error"
            warnings += now == "warning"
            before += _drift(train, probe_estimate(same, k, False)) == "error"
            misses += _drift(train, probe_estimate(worse, k, True)) != "error"
            missed_before += _drift(train, probe_estimate(worse, k, False)) != "error"
        print(
            f"{chains:>7} {errors:>9}/{seeds} {before:>3}/{seeds} {warnings:>11}/{seeds} "
            f"{misses:>10}/{seeds} {missed_before:>3}/{seeds}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=200)
    args = ap.parse_args()
    identity_table(args.seeds)
    drift_table(args.seeds)
    probe_table(args.seeds)


if __name__ == "__main__":
    main()
