"""SpecForge (0.2.0) online EAGLE-3 training with the contract guard: the consumer side of
its disaggregated online run, as its launcher builds it
(``specforge/training/disaggregated.py``), with one more argument: ``collate_fn``, SpecForge's
own EAGLE-3 server collator wrapped by ``specforge_collator`` (see docs/online.md).

SpecForge's loader collates in its prefetch threads (``dataloader_num_workers``); the guard
checks each batch there, under a lock, in the order the batches are collated. A violation
raised there fails ``Trainer.fit`` through SpecForge's own failure path
(``on_fit_failure``: the producer is told the consumer failed).
"""

from __future__ import annotations

from typing import Any

from specforge.algorithms.eagle3.data import build_server_collator
from specforge.launch import build_disagg_online_consumer

from pytest_eagle_contract import Guard, specforge_collator


def guarded_consumer(consumer_args: dict[str, Any]) -> Any:
    """``build_disagg_online_consumer(**consumer_args)`` with the guard in its collator.
    ``consumer_args`` are the ones SpecForge's launcher passes (algorithm, feature_store,
    channel, draft_model, optimizer_factory, run_id, output_dir, batch_size, ...)."""
    # The contract: format specforge, slots = the aux layers SGLang captures (in order),
    # then final_norm; norm bounds measured by `eagle-contract infer` on a few offline
    # shards of the same target and server. The target runs in the SGLang server, not here:
    # to name a one-layer shift the norms cannot see (EC604), add target_model= its folder
    # (loaded in float32 on this process's CPU) or a copy loaded as you choose (docs/online.md).
    guard = Guard("contracts/run7.yaml", warmup=200, every=100)
    collate = specforge_collator(guard, build_server_collator(), target_repr="hidden_state")
    return build_disagg_online_consumer(**consumer_args, collate_fn=collate)


def train(consumer_args: dict[str, Any]) -> int:
    trainer = guarded_consumer(consumer_args)
    steps: int = trainer.fit()
    return steps
