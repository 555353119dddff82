"""speculators (0.9.0) training with the contract guard: its own CLI's setup
(``speculators/train/cli.py``) with one change, the train loader wrapped in a
``GuardedLoader``. Run it as you run ``python -m speculators.train``, with this file in
place of the entry point; ``args``, the draft and ``hidden_size`` are built exactly as
there (see docs/online.md).

The loader's collator runs in spawned worker processes; ``GuardedLoader`` checks each batch
in the training process, as ``Trainer.train_epoch`` takes it, so the guard's batch count
and running profiles are the run's own.
"""

from __future__ import annotations

import logging
from typing import Any

from speculators.models.eagle3.data import shift_batch
from speculators.train.dataloader import create_train_val_loaders
from speculators.train.trainer import Trainer, TrainerConfig

from pytest_eagle_contract import Guard, GuardedLoader

logging.basicConfig(level=logging.INFO)


def train(args: Any, draft_model: Any, hidden_size: int, transfer: Any, dtype: Any) -> None:
    """speculators' ``main`` from its loaders on, guarded. ``args`` are its parsed
    arguments; ``transfer`` its hidden-states backend (``from_train_args``)."""
    train_loader, val_loader = create_train_val_loaders(
        data_path=args.data_path,
        total_seq_len=args.total_seq_len,
        hidden_states_dtype=dtype,
        transfer=transfer,
        vllm_endpoint=args.vllm_endpoint,
        on_missing=args.on_missing,
        verifier_name_or_path=args.verifier_name_or_path,
        request_timeout=args.request_timeout,
        max_retries=args.max_retries,
        generation_validation_retries=args.generation_validation_retries,
        max_consecutive_generation_failures=args.max_consecutive_generation_failures,
        hidden_size=hidden_size,
        num_target_layers=3,
        num_workers=args.num_workers,
        prefetch_factor=args.prefetch_factor,
        preprocess=shift_batch,
        train_data_ratio=args.train_data_ratio,
        seed=args.seed,
    )
    # The contract: format speculators, slots = the three aux layers then the verifier's
    # last layer (pre-norm), with norm bounds from `eagle-contract infer` on a few files
    # the same generator wrote. Its EAGLE-3 batches drop each sample's first token
    # (shift_batch), so the guard cannot identify their slots with a target model: run
    # `eagle-contract check --target-model DIR` on the stored files for that.
    guard = Guard("contracts/run7.yaml", warmup=200, every=100)
    config = TrainerConfig(
        lr=args.lr,
        num_epochs=args.epochs,
        save_path=args.save_path,
        hidden_states_dtype=dtype,
    )
    trainer = Trainer(draft_model, config, GuardedLoader(train_loader, guard), val_loader)
    try:
        trainer.run_training()
    finally:
        logging.getLogger(__name__).info("contract guard: %s", guard.summary())
