"""The guard's adapters against the trainers' own released code (``tox -e trainers``):
SpecForge 0.2.0's EAGLE-3 collators and ``TrainBatch``, speculators 0.9.0's ``CollateFn``
in a torch ``DataLoader``. Skipped where the trainer is not installed (the default run
stays offline: tests/unit/test_guard.py builds the same layouts by hand)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_eagle_contract import ContractViolation, Guard, GuardedLoader, specforge_collator
from pytest_eagle_contract.layers import Layer

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

from online_loop import AUX, SPEC, TARGET, tiny_target  # noqa: E402
from test_guard import SPECULATORS_LAYERS, measured_contract  # noqa: E402
from trainer_exports import trainer_module  # noqa: E402

from pytest_eagle_contract.models.reference import capture_canonical  # noqa: E402

DEMO = ROOT / "contracts" / "demo-tiny-llama-eagle3.yaml"


@pytest.fixture(scope="module")
def target() -> Any:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield tiny_target(SPEC)
    torch.set_num_threads(before)


def captured(target: Any, n: int, seed: int) -> tuple[torch.Tensor, dict[Layer, torch.Tensor]]:
    ids = torch.randint(0, SPEC.vocab_size, (n,), generator=torch.Generator().manual_seed(seed))
    return ids, capture_canonical(target, ids)


def test_specforge_offline_normalizer_and_server_collator(target: Any) -> None:
    """A stored SpecForge shard through SpecForge's own EAGLE-3 normalizer (the training
    tensors: hidden_state, target, ...) and its server collator, then into a TrainBatch."""
    eagle3 = trainer_module("specforge.algorithms.eagle3.data")
    contracts = trainer_module("specforge.runtime.contracts")

    def sample(seed: int, aux: list[Layer]) -> dict[str, torch.Tensor]:
        ids, states = captured(target, 80, seed)
        raw = {  # prepare_hidden_states.py's shard dict
            "input_ids": ids,
            "loss_mask": (torch.arange(80) >= 20).long(),
            "aux_hidden_state": torch.cat([states[a] for a in aux], -1)[None].bfloat16(),
            "hidden_state": states[TARGET][None].bfloat16(),
        }
        out: dict[str, torch.Tensor] = eagle3.normalize_offline_sample(raw, max_len=64)
        return out

    guard = Guard(DEMO, warmup=10, every=10)
    collate = specforge_collator(guard, eagle3.build_server_collator())
    batch = collate([sample(1, AUX), sample(2, AUX)])
    assert batch["hidden_state"].shape == (2, 64, 3 * SPEC.hidden_size)
    assert guard.checked == 1 and guard.violations == 0
    train_batch = contracts.TrainBatch(["a"], "eagle3", batch, {"target_repr": "hidden_state"})
    assert guard.check(train_batch) == []
    with pytest.raises(ContractViolation) as caught:
        collate([sample(3, [AUX[0], AUX[2], AUX[1]])])
    assert (caught.value.batch, caught.value.code, caught.value.slot) == (2, "EC401", 1)


def test_speculators_collate_fn_in_a_data_loader(target: Any, tmp_path: Path) -> None:
    """speculators' own ``CollateFn`` packs the samples its dataset yields; the guarded
    loader checks what the trainer receives; an empty batch (every generation failed) is
    padding only and passes."""
    data = trainer_module("speculators.train.data")
    shift_batch = trainer_module("speculators.models.eagle3.data").shift_batch
    contract = measured_contract(tmp_path, target, "speculators", SPECULATORS_LAYERS)

    def item(seed: int, last: Layer = SPECULATORS_LAYERS[-1]) -> dict[str, torch.Tensor]:
        ids, states = captured(target, 70 + seed, seed)
        # ArrowDataset._get_raw_data then BaseDataset.__getitem__
        return {
            "hidden_states": torch.cat([states[a] for a in AUX], -1),
            "input_ids": ids,
            "verifier_last_hidden_states": states[last],
            "loss_mask": (torch.arange(len(ids)) >= 20).long(),
            "lengths": torch.tensor([len(ids)]),
            "position_ids": torch.arange(len(ids)),
        }

    collate = data.CollateFn(
        400, SPEC.hidden_size, num_target_layers=3, dtype=torch.bfloat16, preprocess=shift_batch
    )
    samples = [item(1), item(2), item(3), item(4)]
    loader = torch.utils.data.DataLoader(samples, batch_size=2, collate_fn=collate)
    guard = Guard(contract, warmup=10, every=10)
    batches = list(GuardedLoader(loader, guard))
    assert len(batches) == 2 and guard.violations == 0
    assert batches[0]["hidden_states"].shape == (1, 400, 3 * SPEC.hidden_size)
    empty = collate([data.create_empty_sample(SPEC.hidden_size)])  # every sample unavailable
    assert guard.check(empty) == [] and guard.padding_rows == 1
    shifted = collate([item(5, Layer.parse("residual:7"))])
    with pytest.raises(ContractViolation) as caught:
        guard.check(shifted)
    assert (caught.value.code, caught.value.slot) == ("EC401", 3)


def test_speculators_shifted_batches_say_the_slot_identity_cannot_run(
    target: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """speculators' EAGLE-3 preprocess (``shift_batch``, train/cli.py) drops each sample's
    first token (input_ids[1:] beside hidden_states[:-1]): no reference capture reproduces
    such a row, so the guard with a target model says so (EC009, once), never a false EC604;
    the same samples collated without the shift are identified and pass."""
    data = trainer_module("speculators.train.data")
    shift_batch = trainer_module("speculators.models.eagle3.data").shift_batch
    contract = measured_contract(tmp_path, target, "speculators", SPECULATORS_LAYERS)

    def item(seed: int) -> dict[str, torch.Tensor]:
        ids, states = captured(target, 70 + seed, seed)
        return {
            "hidden_states": torch.cat([states[a] for a in AUX], -1),
            "input_ids": ids,
            "verifier_last_hidden_states": states[SPECULATORS_LAYERS[-1]],
            "loss_mask": (torch.arange(len(ids)) >= 20).long(),
            "lengths": torch.tensor([len(ids)]),
            "position_ids": torch.arange(len(ids)),
        }

    samples = [item(1), item(2)]
    plain = data.CollateFn(400, SPEC.hidden_size, num_target_layers=3, dtype=torch.bfloat16)
    guard = Guard(contract, warmup=10, target_model=target, identify_every=1)
    assert guard.check(plain(samples)) == [] and guard.identified == 1
    shifted = data.CollateFn(
        400, SPEC.hidden_size, num_target_layers=3, dtype=torch.bfloat16, preprocess=shift_batch
    )
    with caplog.at_level(logging.WARNING, logger="pytest_eagle_contract.guard"):
        assert guard.check(shifted(samples)) == [] and guard.check(shifted(samples)) == []
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "EC009" in said[0] and "shift_batch" in said[0], said
    assert guard.identified == 1 and guard.violations == 0


def test_specforge_feature_loader_with_the_guarded_collator(target: Any) -> None:
    """SpecForge's own ``FeatureDataLoader`` over its ``LocalFeatureStore`` (what its
    ``Trainer`` builds from the ``collate_fn`` it is given), in order and with prefetch
    threads: clean batches pass as ``TrainBatch``es; a bad sample stops the iteration with
    the violation, from the loader's thread."""
    data_plane = trainer_module("specforge.runtime.data_plane")
    eagle3 = trainer_module("specforge.algorithms.eagle3.data")

    def refs(store: Any, bad: int | None) -> list[Any]:
        out = []
        for i in range(6):
            ids, states = captured(target, 64, 100 + i)
            aux = [AUX[1], AUX[0], AUX[2]] if i == bad else AUX
            features = {
                "input_ids": ids[None],
                "attention_mask": torch.ones(1, 64, dtype=torch.long),
                "loss_mask": (torch.arange(64) >= 16).long()[None],
                "hidden_state": torch.cat([states[a] for a in aux], -1)[None].bfloat16(),
                "target": states[TARGET][None].bfloat16(),
            }
            meta = {"target_repr": "hidden_state", "strategy": "eagle3"}
            out.append(store.put(features, sample_id=f"s{i}", metadata=meta))
        return out

    for workers in (0, 2):  # the target runs in the loader's threads with 2
        store = data_plane.LocalFeatureStore()
        guard = Guard(DEMO, warmup=10, every=10, target_model=target, identify_every=1)
        loader = data_plane.FeatureDataLoader(
            store,
            refs=refs(store, None),
            batch_size=2,
            collate_fn=specforge_collator(guard, eagle3.build_server_collator()),
            num_workers=workers,
            strategy="eagle3",
        )
        batches = list(loader)
        assert [type(b).__name__ for b in batches] == ["TrainBatch"] * 3
        assert (guard.checked, guard.identified, guard.violations) == (3, 3, 0)
    store = data_plane.LocalFeatureStore()
    guard = Guard(DEMO, warmup=10, every=10)
    loader = data_plane.FeatureDataLoader(
        store,
        refs=refs(store, bad=5),
        batch_size=2,
        collate_fn=specforge_collator(guard, eagle3.build_server_collator()),
        strategy="eagle3",
    )
    with pytest.raises(ContractViolation) as caught:
        list(loader)
    assert (caught.value.batch, caught.value.code) == (2, "EC401")
    assert caught.value.finding.file == "batch 2 row 1"
