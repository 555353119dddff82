"""What the training-loop guard costs: a training step of a tiny EAGLE-3-like draft on CPU,
with and without ``Guard.check`` on its batch, side by side in one run.

    python benchmarks/bench_guard.py [--hidden 128] [--tokens 512] [--vocab 4096] [--steps 30]

Each round times, in a rotating order, the step alone (twice: the second is the noise
floor), the step after a check that is not a profiled one (the schedule's steady state:
structure, ids, mask, the finiteness screen) and the step after a profiled check (the
norm profile too). The batches are SpecForge
``TrainBatch`` tensors (bf16 states of a realistic per-slot norm profile) that the contract
accepts. It prints the medians, the overheads, and the overhead averaged over a run on the
schedule (``--warmup``, ``--every``, ``--run-steps``). docs/online.md holds the figures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from online_loop import draft_and_optimizer, train_step

from pytest_eagle_contract import Guard
from pytest_eagle_contract.shards.synthetic import states_with_norms

MEDIANS = (3.0, 9.0, 20.0, 64.0)  # aux slots growing with depth, then the post-norm target


def contract_text(hidden: int, vocab: int, tokens: int) -> str:
    slots = "\n".join(
        f"    - {{layer: {layer}, norm: {{median: {m}, rtol: 0.2}}}}"
        for layer, m in zip(("residual:2", "residual:8", "residual:13", "final_norm"), MEDIANS)
    )
    return f"""contract: bench-guard
version: 1
target: {{arch: LlamaForCausalLM, num_hidden_layers: 16, hidden_size: {hidden},
         vocab_size: {vocab}, dtype: bfloat16}}
training:
  format: specforge
  slots:
{slots}
  sequence: {{max_length: {tokens}}}
"""


def batches(n: int, hidden: int, vocab: int, tokens: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        states = [states_with_norms(tokens, hidden, m, 0.2, g, torch.bfloat16) for m in MEDIANS]
        mask = torch.ones(1, tokens, dtype=torch.long)
        mask[0, : tokens // 3] = 0
        out.append(
            {
                "input_ids": torch.randint(0, vocab, (1, tokens), generator=g),
                "attention_mask": torch.ones(1, tokens, dtype=torch.long),
                "loss_mask": mask,
                "hidden_state": torch.cat(states[:3], -1)[None],
                "target": states[3][None],
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=30, help="rounds (each times all three)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--run-steps", type=int, default=10_000)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    folder = Path(tempfile.mkdtemp())
    path = folder / "bench.yaml"
    path.write_text(contract_text(a.hidden, a.vocab, a.tokens))
    steady = Guard(path, warmup=1, every=10**9)  # batch 0 profiles, never again
    profiled = Guard(path, warmup=10**9, every=1)  # every batch profiles
    data = batches(8, a.hidden, a.vocab, a.tokens)
    steady.check(data[0])  # the steady guard's one profiled batch, off the clock
    draft, optimizer = draft_and_optimizer(a.hidden, a.vocab)
    for batch in data[:3]:  # warm the allocator and the kernels
        train_step(draft, optimizer, batch)
        profiled.check(batch)

    def plain(b: dict[str, torch.Tensor]) -> None:
        train_step(draft, optimizer, b)

    def with_steady(b: dict[str, torch.Tensor]) -> None:
        steady.check(b)
        train_step(draft, optimizer, b)

    def with_profiled(b: dict[str, torch.Tensor]) -> None:
        profiled.check(b)
        train_step(draft, optimizer, b)

    arms: list[tuple[str, Callable[[dict[str, torch.Tensor]], None]]] = [
        ("step", plain),
        ("step again", plain),  # the noise floor: the same step, timed as another arm
        ("step + check", with_steady),
        ("step + profiled check", with_profiled),
    ]
    times: dict[str, list[float]] = {name: [] for name, _ in arms}
    checks: dict[str, list[float]] = {"check": [], "profiled check": []}
    for r in range(a.steps):
        batch = data[r % len(data)]
        for k in range(len(arms)):
            name, run = arms[(r + k) % len(arms)]
            t = time.perf_counter()
            run(batch)
            times[name].append(time.perf_counter() - t)
        for name, guard in (("check", steady), ("profiled check", profiled)):
            t = time.perf_counter()
            guard.check(batch)
            checks[name].append(time.perf_counter() - t)
    assert steady.violations == profiled.violations == 0, (steady.last, profiled.last)
    med = {k: statistics.median(v) for k, v in {**times, **checks}.items()}
    step = med["step"]
    print(
        f"draft H={a.hidden}, vocab {a.vocab}, {a.tokens} tokens a batch, "
        f"{a.threads} thread(s), {a.steps} rounds; medians:"
    )
    for name, values in {**times, **checks}.items():
        q1, _, q3 = statistics.quantiles(values, n=4)
        print(f"  {name:<22} {med[name] * 1e3:8.2f} ms   (quartiles {q1 * 1e3:.2f}-{q3 * 1e3:.2f})")
    k, n, s = a.warmup, a.every, a.run_steps
    prof, cheap = med["profiled check"] / step, med["check"] / step
    profiled_share = (min(k, s) + max(0, s - k) / n) / s
    mean = profiled_share * prof + (1 - profiled_share) * cheap
    print(
        f"overhead, from the checks timed alone: steady state {cheap:.2%} of a step, "
        f"a profiled batch {prof:.2%}; over {s} steps with warmup={k}, every={n}: {mean:.2%}"
    )
    paired = {
        name: statistics.median(w - p for w, p in zip(times[name], times["step"])) / step
        for name in ("step again", "step + check", "step + profiled check")
    }
    print(
        "overhead, end to end (the median of each round's step + check minus its step): "
        f"steady state {paired['step + check']:+.2%}, profiled "
        f"{paired['step + profiled check']:+.2%}; noise floor (the same step again) "
        f"{paired['step again']:+.2%}"
    )


if __name__ == "__main__":
    main()
