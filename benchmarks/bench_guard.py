"""What the training-loop guard costs: a training step of a tiny EAGLE-3-like draft on CPU,
with and without ``Guard.check`` on its batch, side by side in one run, and the check with
and without the slot identity (``target_model=``: a reference capture of the target).

    python benchmarks/bench_guard.py [--hidden 128] [--tokens 512] [--vocab 4096] [--steps 30]

Each round times, in a rotating order, the step alone (twice: the second is the noise
floor), the step after a check that is not a profiled one (the schedule's steady state:
structure, ids, mask, the finiteness screen), the step after a profiled check (the norm
profile too) and the step after a profiled check that also runs the slot identity (EC604:
the target on the first 64 tokens of the batch's row). The batches are SpecForge
``TrainBatch`` tensors captured from a tiny random-weight Llama made in code (16 layers,
the draft's width and vocabulary: ``models.tiny``), bf16, at the contract's layers, whose
bounds are their measured medians +-20%. It prints the medians, the overheads, and the
overhead averaged over a run on the schedule (``--warmup``, ``--every``,
``--identify-every``, ``--run-steps``) without and with the identity. docs/online.md holds
the figures.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from online_loop import draft_and_optimizer, train_step

from pytest_eagle_contract import Guard
from pytest_eagle_contract.layers import Layer
from pytest_eagle_contract.models.reference import capture_canonical
from pytest_eagle_contract.models.tiny import TinySpec, tiny_target
from pytest_eagle_contract.shards.stats import norm_stats

LAYERS = tuple(map(Layer.parse, ("residual:2", "residual:8", "residual:13", "final_norm")))
NUM_LAYERS = 16


def contract_text(hidden: int, vocab: int, tokens: int, medians: list[float]) -> str:
    slots = "\n".join(
        f"    - {{layer: {layer}, norm: {{median: {m:.6g}, rtol: 0.2}}}}"
        for layer, m in zip(LAYERS, medians)
    )
    return f"""contract: bench-guard
version: 1
target: {{arch: LlamaForCausalLM, num_hidden_layers: {NUM_LAYERS}, hidden_size: {hidden},
         vocab_size: {vocab}, dtype: bfloat16}}
training:
  format: specforge
  slots:
{slots}
  sequence: {{max_length: {tokens}}}
"""


def batches(n: int, model: Any, vocab: int, tokens: int) -> list[dict[str, torch.Tensor]]:
    """``n`` one-row SpecForge batches of ``tokens`` random ids, captured from ``model``."""
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        ids = torch.randint(0, vocab, (tokens,), generator=g)
        states = capture_canonical(model, ids)
        mask = torch.ones(1, tokens, dtype=torch.long)
        mask[0, : tokens // 3] = 0
        out.append(
            {
                "input_ids": ids[None],
                "attention_mask": torch.ones(1, tokens, dtype=torch.long),
                "loss_mask": mask,
                "hidden_state": torch.cat([states[x] for x in LAYERS[:3]], -1)[None].bfloat16(),
                "target": states[LAYERS[3]][None].bfloat16(),
            }
        )
    return out


def run_shares(k: int, n: int, m: int, s: int) -> tuple[float, float]:
    """Of ``s`` steps on the schedule (warmup ``k``, every ``n``), the share of profiled
    batches and of identified ones (every ``m``-th profiled batch, from the first)."""
    profiled = min(k, s) + (math.ceil((s - k) / n) if s > k else 0)
    return profiled / s, math.ceil(profiled / m) / s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=30, help="rounds (each times every arm)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--identify-every", type=int, default=20)
    ap.add_argument("--run-steps", type=int, default=10_000)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model = tiny_target(TinySpec("llama", NUM_LAYERS, a.hidden, a.vocab))
    data = batches(8, model, a.vocab, a.tokens)
    medians = [
        statistics.median(
            norm_stats(b[k][0, :, i * a.hidden : (i + 1) * a.hidden]).median for b in data
        )
        for k, i in (("hidden_state", 0), ("hidden_state", 1), ("hidden_state", 2), ("target", 0))
    ]
    folder = Path(tempfile.mkdtemp())
    path = folder / "bench.yaml"
    path.write_text(contract_text(a.hidden, a.vocab, a.tokens, medians))
    steady = Guard(path, warmup=1, every=10**9)  # batch 0 profiles, never again
    profiled = Guard(path, warmup=10**9, every=1)  # every batch profiles
    identifying = Guard(path, warmup=10**9, every=1, target_model=model, identify_every=1)
    steady.check(data[0])  # the steady guard's one profiled batch, off the clock
    draft, optimizer = draft_and_optimizer(a.hidden, a.vocab)
    for batch in data[:3]:  # warm the allocator and the kernels
        train_step(draft, optimizer, batch)
        profiled.check(batch)
        identifying.check(batch)

    def plain(b: dict[str, torch.Tensor]) -> None:
        train_step(draft, optimizer, b)

    def guarded(guard: Guard) -> Callable[[dict[str, torch.Tensor]], None]:
        def run(b: dict[str, torch.Tensor]) -> None:
            guard.check(b)
            train_step(draft, optimizer, b)

        return run

    arms: list[tuple[str, Callable[[dict[str, torch.Tensor]], None]]] = [
        ("step", plain),
        ("step again", plain),  # the noise floor: the same step, timed as another arm
        ("step + check", guarded(steady)),
        ("step + profiled check", guarded(profiled)),
        ("step + identified check", guarded(identifying)),
    ]
    alone = {"check": steady, "profiled check": profiled, "identified check": identifying}
    times: dict[str, list[float]] = {name: [] for name, _ in arms}
    checks: dict[str, list[float]] = {name: [] for name in alone}
    for r in range(a.steps):
        batch = data[r % len(data)]
        for k in range(len(arms)):
            name, run = arms[(r + k) % len(arms)]
            t = time.perf_counter()
            run(batch)
            times[name].append(time.perf_counter() - t)
        for name, guard in alone.items():
            t = time.perf_counter()
            guard.check(batch)
            checks[name].append(time.perf_counter() - t)
    guards = (steady, profiled, identifying)
    assert all(g.violations == 0 for g in guards), [g.last for g in guards]
    assert identifying.identified == identifying.checked, identifying.summary()
    med = {k: statistics.median(v) for k, v in {**times, **checks}.items()}
    step = med["step"]
    print(
        f"draft H={a.hidden}, vocab {a.vocab}, {a.tokens} tokens a batch, target "
        f"{NUM_LAYERS} layers; {a.threads} thread(s), {a.steps} rounds; medians:"
    )
    for name, values in {**times, **checks}.items():
        q1, _, q3 = statistics.quantiles(values, n=4)
        print(f"  {name:<24} {med[name] * 1e3:8.2f} ms   (quartiles {q1 * 1e3:.2f}-{q3 * 1e3:.2f})")
    cheap, prof = med["check"] / step, med["profiled check"] / step
    ident = med["identified check"] / step
    print(
        f"overhead, from the checks timed alone: steady state {cheap:.2%} of a step, "
        f"a profiled batch {prof:.2%}, a profiled batch with the slot identity {ident:.2%}"
    )
    k, n, m, s = a.warmup, a.every, a.identify_every, a.run_steps
    for label, steps in (("the warmup's", k), (f"{s}", s)):
        if steps <= 0:
            continue
        p_share, i_share = run_shares(k, n, m, steps)
        without = p_share * prof + (1 - p_share) * cheap
        with_id = without + i_share * (ident - prof)
        print(
            f"  over {label} steps with warmup={k}, every={n}: without identity {without:.2%}, "
            f"with identity (identify_every={m}) {with_id:.2%} "
            f"({i_share * steps:.0f} identified batch(es))"
        )
    paired = {
        name: statistics.median(w - p for w, p in zip(times[name], times["step"])) / step
        for name in (
            "step again",
            "step + check",
            "step + profiled check",
            "step + identified check",
        )
    }
    print(
        "overhead, end to end (the median of each round's step + check minus its step): "
        f"steady state {paired['step + check']:+.2%}, profiled "
        f"{paired['step + profiled check']:+.2%}, identified "
        f"{paired['step + identified check']:+.2%}; noise floor (the same step again) "
        f"{paired['step again']:+.2%}"
    )


if __name__ == "__main__":
    main()
