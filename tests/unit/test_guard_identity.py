"""Issue 37, item 2: the training-loop guard names a one-layer shift that norms cannot
resolve, with the target model (a folder, or the live module an online trainer holds).

The target is a real transformers Llama made in code whose residual stream grows by about
10% a layer (each block's output projection calibrated to it), so the median norm of
residual:k+1 lies inside bounds measured for residual:k. A stream of SpecForge batches
captured from it at the contract's layers switches, from batch ``SHIFT`` on, to captures
one layer off, as an SGLang upgrade or a +1 convention change would feed them.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_eagle_contract import ContractViolation, Guard
from pytest_eagle_contract.guard.profile import Schedule
from pytest_eagle_contract.layers import Layer
from pytest_eagle_contract.models.reference import capture_canonical
from pytest_eagle_contract.shards.stats import norm_stats

R = Layer.parse
L, H, VOCAB = 8, 64, 512
AUX = [R("residual:2"), R("residual:4"), R("residual:6")]
ONE_OFF = [R("residual:3"), R("residual:5"), R("residual:7")]
TARGET = R("final_norm")
STEP = 1.10  # each layer's median norm over the one below it
SHIFT = 5  # the first batch captured one layer off
# profiled batches 0, 1, 2, 5, 8, 11, 14 ...; identified: every second profiled one, the
# profiled ones 0, 2, 4, 6 ... = batches 0, 2, 8, 14: the shift at 5 is named at 8
WARMUP, EVERY, IDENTIFY_EVERY, NAMED_AT = 2, 3, 2, 8


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _ids(seed: int, tokens: int = 96) -> torch.Tensor:
    return torch.randint(0, VOCAB, (tokens,), generator=torch.Generator().manual_seed(seed))


def _medians(model: Any, seeds: range) -> dict[Layer, list[float]]:
    out: dict[Layer, list[float]] = {}
    for seed in seeds:
        for layer, state in capture_canonical(model, _ids(seed)).items():
            out.setdefault(layer, []).append(norm_stats(state.to(torch.bfloat16)).median)
    return out


@pytest.fixture(scope="module")
def model(one_thread: None) -> Any:
    """A random-weight Llama whose residual norm grows by STEP a layer: the embedding is
    scaled up (the residual stream of a trained model is large beside one attention
    output), then each block's MLP output projection, layer by layer, until the median
    norm of its output over its input is STEP (bisection on the scale)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=H,
        intermediate_size=2 * H,
        num_hidden_layers=L,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    model = LlamaForCausalLM(config).eval()
    model.config.architectures = ["LlamaForCausalLM"]
    ids = _ids(10_000, 64)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(50.0)
        for k, layer in enumerate(model.model.layers):
            weight = layer.mlp.down_proj.weight
            base = weight.clone()
            low, high = 0.0, 1000.0
            for _ in range(20):
                mid = (low + high) / 2
                weight.copy_(base * mid)
                states = capture_canonical(model, ids)
                ratio = (
                    norm_stats(states[Layer(k + 1)]).median / norm_stats(states[Layer(k)]).median
                )
                low, high = (mid, high) if ratio < STEP else (low, mid)
    return model


@pytest.fixture(scope="module")
def folder(model: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("target") / "tiny-llama-10pct"
    model.save_pretrained(root)
    return root


@pytest.fixture(scope="module")
def contract(model: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Bounds as a user sets them: the medians measured on fresh prompts, +-20%."""
    medians = _medians(model, range(100, 106))
    slots = "\n".join(
        f"    - {{layer: {layer}, norm: {{min: {min(medians[layer]) * 0.8:.4f}, "
        f"max: {max(medians[layer]) * 1.2:.4f}}}}}"
        for layer in [*AUX, TARGET]
    )
    path = tmp_path_factory.mktemp("contract") / "tiny-10pct.yaml"
    path.write_text(
        f"""contract: tiny-10pct
version: 1
target: {{arch: LlamaForCausalLM, num_hidden_layers: {L}, hidden_size: {H},
         vocab_size: {VOCAB}, dtype: bfloat16}}
training:
  format: specforge
  slots:
{slots}
"""
    )
    return path


def batch(model: Any, seed: int, aux: list[Layer]) -> dict[str, torch.Tensor]:
    """SpecForge's EAGLE-3 ``TrainBatch`` tensors for one sample, bf16 as SGLang captures."""
    ids = _ids(seed, 64 + 7 * (seed % 20))
    states = capture_canonical(model, ids)
    return {
        "input_ids": ids[None],
        "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
        "loss_mask": (torch.arange(len(ids)) >= len(ids) // 3).long()[None],
        "hidden_state": torch.cat([states[a] for a in aux], -1)[None].to(torch.bfloat16),
        "target": states[TARGET][None].to(torch.bfloat16),
    }


def stream(model: Any, steps: int, shift: int | None = SHIFT) -> Iterator[dict[str, Any]]:
    for step in range(steps):
        yield batch(model, step, ONE_OFF if shift is not None and step >= shift else AUX)


def test_adjacent_layers_differ_by_about_ten_percent_and_the_bounds_hold_both(
    model: Any, contract: Path
) -> None:
    """The premise: norms cannot tell residual:k from residual:k+1 on this target."""
    from pytest_eagle_contract.contract.model import load_contract

    medians = _medians(model, range(200, 204))
    for k in range(L):
        ratio = statistics.median(medians[Layer(k + 1)]) / statistics.median(medians[Layer(k)])
        assert 1.05 < ratio < 1.15, (k, ratio)
    slots = load_contract(contract).training.slots  # type: ignore[union-attr]
    for slot, shifted in zip(slots, ONE_OFF):
        assert all(m in slot.norm for m in medians[shifted]), (slot, medians[shifted])  # type: ignore[operator]


def test_without_a_model_the_guard_says_at_start_what_it_cannot_see(
    model: Any, contract: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="pytest_eagle_contract.guard"):
        guard = Guard(contract, warmup=WARMUP, every=EVERY)
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 1, said
        assert "no target model" in said[0] and "one-layer shift" in said[0]
        assert "target_model=" in said[0] and "EC604" in said[0]
        # the final norm's medians hardly vary: its +-20% bounds are the narrowest
        assert "the narrowest, slot 3 (final_norm), accepts medians in [6.3" in said[0]
        assert "+-20% of their centre" in said[0]
        caplog.clear()
        for b in stream(model, 16):
            assert guard.check(b) == []  # the shifted batches pass: what the warning said
    assert guard.violations == 0 and guard.checked == 16 and guard.identified == 0
    assert caplog.records == []  # said once, at the start, not per batch


@pytest.mark.parametrize("given", ["live module", "folder"])
def test_with_the_model_the_shift_is_named_within_the_interval(
    model: Any, folder: Path, contract: Path, given: str, caplog: pytest.LogCaptureFixture
) -> None:
    target = model if given == "live module" else folder
    with caplog.at_level(logging.WARNING, logger="pytest_eagle_contract.guard"):
        guard = Guard(
            contract,
            warmup=WARMUP,
            every=EVERY,
            target_model=target,
            identify_every=IDENTIFY_EVERY,
        )
    assert caplog.records == []  # nothing to warn of
    handed = 0
    with pytest.raises(ContractViolation) as caught:
        for _ in guard.wrap(stream(model, 30)):
            handed += 1
    violation = caught.value
    assert (violation.code, violation.batch, violation.slot) == ("EC604", NAMED_AT, 0)
    assert handed == NAMED_AT  # the batches before it trained; the named one did not
    assert NAMED_AT - SHIFT < IDENTIFY_EVERY * EVERY  # within the configured interval
    assert "slot 0 is declared residual:2 but is residual:3" in violation.message
    codes = [(f.code, f.slot) for f in violation.findings]
    assert codes == [("EC604", 0), ("EC604", 1), ("EC604", 2)]  # the target slot is right
    assert "the first 64 tokens of batch 8" in violation.finding.hint
    assert guard.identified == 3  # batches 0, 2, 8
    assert "3 identified" in guard.summary()


def test_with_the_model_a_clean_stream_passes(model: Any, contract: Path) -> None:
    guard = Guard(contract, warmup=2, every=2, target_model=model, identify_every=1)
    for b in stream(model, 8, shift=None):
        assert guard.check(b) == []
    assert (guard.checked, guard.profiled, guard.identified) == (8, 5, 5)  # 0, 1, 2, 4, 6


def test_a_packed_speculators_row_is_identified_on_its_first_document(
    model: Any, tmp_path: Path
) -> None:
    """speculators packs documents into one row; each was captured alone, so the reference
    capture runs on the first document only (20 tokens here, the second starts after)."""
    layers = [*AUX, R(f"residual:{L}")]
    medians = _medians(model, range(300, 303))
    slots = "\n".join(
        f"    - {{layer: {x}, norm: {{min: {min(medians[x]) * 0.8:.4f}, "
        f"max: {max(medians[x]) * 1.2:.4f}}}}}"
        for x in layers
    )
    path = tmp_path / "speculators.yaml"
    path.write_text(
        f"""contract: tiny-10pct-speculators
version: 1
target: {{arch: LlamaForCausalLM, num_hidden_layers: {L}, hidden_size: {H},
         vocab_size: {VOCAB}, dtype: bfloat16}}
training:
  format: speculators
  slots:
{slots}
"""
    )

    def packed(aux: list[Layer], lengths: tuple[int, ...] = (20, 90), size: int = 160) -> Any:
        ids = [_ids(400 + n, n) for n in lengths]
        states = [capture_canonical(model, x) for x in ids]
        total = sum(lengths)

        def pad(x: torch.Tensor, dtype: torch.dtype, fill: int = 0) -> torch.Tensor:
            out = torch.full((size, *x.shape[1:]), fill, dtype=dtype)
            out[:total] = x.to(dtype)
            return out[None]

        return {
            "input_ids": pad(torch.cat(ids), torch.long),
            "loss_mask": pad(torch.ones(total), torch.long),
            "hidden_states": pad(
                torch.cat([torch.cat([s[a] for a in aux], -1) for s in states]), torch.bfloat16
            ),
            "verifier_last_hidden_states": pad(
                torch.cat([s[layers[-1]] for s in states]), torch.bfloat16
            ),
            "document_ids": pad(
                torch.cat([torch.full((n,), d) for d, n in enumerate(lengths)]), torch.long, -1
            ),
            "position_ids": pad(torch.cat([torch.arange(n) for n in lengths]), torch.long),
        }

    guard = Guard(path, warmup=10, target_model=model, identify_every=1)
    assert guard.check(packed(AUX)) == [] and guard.identified == 1
    with pytest.raises(ContractViolation) as caught:
        guard.check(packed(ONE_OFF))
    assert (caught.value.code, caught.value.slot) == ("EC604", 0)
    assert "the first 20 tokens of batch 1" in caught.value.finding.hint


def test_a_contract_that_waives_slot_identity_runs_no_model_and_warns_of_nothing(
    model: Any, contract: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "waived.yaml"
    path.write_text(
        contract.read_text() + "waive:\n  - {code: EC604, reason: identity checked offline}\n"
    )
    with caplog.at_level(logging.WARNING, logger="pytest_eagle_contract.guard"):
        guard = Guard(path, warmup=2, every=2, target_model=model)
    assert caplog.records == [] and guard.target is None
    assert guard.check(batch(model, 1, ONE_OFF)) == [] and guard.identified == 0


def test_the_schedule_identifies_every_nth_profiled_batch() -> None:
    schedule = Schedule(WARMUP, EVERY)
    assert [b for b in range(30) if schedule.identifies(b, IDENTIFY_EVERY)] == [0, 2, 8, 14, 20, 26]
    assert [b for b in range(12) if Schedule(0, 5).identifies(b, 1)] == [0, 5, 10]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"identify_every": 0}, "identify_every is 0"),
        ({"target_model": object()}, "a object is not a transformers causal LM"),
        ({"target_model": "/nonexistent/model"}, "cannot read config.json"),
    ],
)
def test_bad_identity_settings_are_usage_errors(
    contract: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Guard(contract, **kwargs)


def test_a_model_that_is_not_the_contracts_target_is_refused(model: Any, tmp_path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    other = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=H,
            intermediate_size=2 * H,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    )
    contract = tmp_path / "c.yaml"
    contract.write_text(
        f"""contract: c
version: 1
target: {{num_hidden_layers: {L}, hidden_size: {H}, vocab_size: {VOCAB}, dtype: bfloat16}}
training:
  format: specforge
  slots:
    - {{layer: residual:2}}
    - {{layer: final_norm}}
"""
    )
    with pytest.raises(ValueError, match=r"num_hidden_layers is 8, the model's config\.json says"):
        Guard(contract, target_model=other)


def test_a_row_the_target_cannot_run_on_is_a_warning_not_a_verdict(
    model: Any, contract: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Ids past the model's embedding (a contract without vocab_size lets them through):
    the slot identity did not run (EC009, said once), and the batch is not failed for it."""
    path = tmp_path / "no-vocab.yaml"
    path.write_text(contract.read_text().replace(f"vocab_size: {VOCAB}, ", ""))
    guard = Guard(path, warmup=4, target_model=model, identify_every=1)
    b = batch(model, 3, AUX)
    b["input_ids"] = b["input_ids"] + VOCAB  # rows the embedding does not have
    with caplog.at_level(logging.WARNING, logger="pytest_eagle_contract.guard"):
        assert guard.check(b) == [] and guard.check(b) == []
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "EC009" in said[0] and "slot identity did not run" in said[0]
    assert "embedding has 512 rows" in said[0] and guard.identified == 0
