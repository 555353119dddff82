"""The training-loop guard (docs/online.md), driven as a trainer drives it: a tiny online
EAGLE-3 loop on CPU (the demo's random-weight Llama made in code runs beside a tiny draft,
benchmarks/online_loop.py) with each failure class injected from some step on, and the
batch layouts of SpecForge's and speculators' trainers, built as their collators build them.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_eagle_contract import ContractViolation, Guard, GuardedLoader, specforge_collator
from pytest_eagle_contract.layers import Layer

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from online_loop import (  # noqa: E402
    AUX,
    SPEC,
    TARGET,
    draft_and_optimizer,
    online_batches,
    specforge_batch,
    tiny_target,
    train_step,
)

DEMO = ROOT / "contracts" / "demo-tiny-llama-eagle3.yaml"
R = Layer.parse


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Any:
    """Tiny models run several times faster on one thread than on two busy ones."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def target(one_thread: None) -> Any:
    return tiny_target(SPEC)


def run(guard: Guard, target: Any, steps: int, inject: Any = None) -> int:
    """Train the tiny draft on ``steps`` live batches through ``guard.wrap``; the steps
    trained."""
    draft, optimizer = draft_and_optimizer(SPEC.hidden_size, SPEC.vocab_size)
    trained = 0
    for batch in guard.wrap(online_batches(steps, inject, model=target)):
        train_step(draft, optimizer, batch)
        trained += 1
    return trained


def from_step(start: int, bad: Callable[..., dict[str, torch.Tensor]]) -> Any:
    def inject(step: int, states: Any, ids: Any, mask: Any) -> dict[str, torch.Tensor] | None:
        return bad(states, ids, mask) if step >= start else None

    return inject


def nan_batch(states: Any, ids: Any, mask: Any) -> dict[str, torch.Tensor]:
    batch = specforge_batch(states, ids, mask)
    batch["hidden_state"][0, 7, 64 + 5] = float("nan")  # slot 1, token 7
    return batch


def shifted(states: Any, ids: Any, mask: Any) -> dict[str, torch.Tensor]:
    return specforge_batch(states, ids, mask, [R("residual:3"), R("residual:5"), R("residual:6")])


def swapped(states: Any, ids: Any, mask: Any) -> dict[str, torch.Tensor]:
    return specforge_batch(states, ids, mask, [AUX[1], AUX[0], AUX[2]])


def long_mask(states: Any, ids: Any, mask: Any) -> dict[str, torch.Tensor]:
    batch = specforge_batch(states, ids, mask)
    batch["loss_mask"] = torch.ones(1, len(ids) + 3, dtype=torch.long)  # mask not truncated
    return batch


def test_a_clean_online_run_passes_and_keeps_running_profiles(target: Any) -> None:
    guard = Guard(DEMO, warmup=4, every=3)
    assert run(guard, target, 12) == 12
    assert (guard.checked, guard.violations, guard.profiled) == (12, 0, 7)  # 0-3, 4, 7, 10
    assert sorted(guard.profiles) == [0, 1, 2, 3]
    assert all(p.count == 7 for p in guard.profiles.values())
    medians = [guard.profiles[i].median for i in range(4)]
    assert medians == sorted(medians)  # the norm grows with depth; final_norm largest
    assert "12 batch(es) checked, 7 profiled, 0 with findings" in guard.summary()


@pytest.mark.parametrize(
    ("bad", "code", "slot", "warmup", "every"),
    [
        (nan_batch, "EC304", 1, 2, 50),  # every batch: not on a profiled one
        (long_mask, "EC202", None, 2, 50),
        (shifted, "EC401", 0, 2, 3),  # the profile: batch 5 is a profiled one (2 + 3)
        (swapped, "EC401", 0, 2, 3),
    ],
    ids=["nan", "mask-length", "shifted-layer", "swapped-slots"],
)
def test_the_guard_stops_at_the_first_bad_batch_and_names_it(
    target: Any, bad: Any, code: str, slot: int | None, warmup: int, every: int
) -> None:
    guard = Guard(DEMO, warmup=warmup, every=every)
    draft, optimizer = draft_and_optimizer(SPEC.hidden_size, SPEC.vocab_size)
    trained = 0
    with pytest.raises(ContractViolation) as caught:
        for batch in guard.wrap(online_batches(10, from_step(5, bad), model=target)):
            train_step(draft, optimizer, batch)
            trained += 1
    err = caught.value
    assert trained == 5  # batches 0-4 trained, batch 5 never reached the draft
    assert (err.batch, err.code, err.slot) == (5, code, slot)
    assert err.finding.code == code and err.finding.file == "batch 5"
    text = str(err)
    assert text.startswith(f"batch 5 breaks the contract\n{code} ")
    assert "--> " in text and "batch 5" in text and "expected:" in text and "found:" in text
    if bad is swapped:  # both moved slots named, each fits the other's bounds
        assert {f.slot for f in err.findings} == {0, 1}
        assert "fits the bounds of slot 1" in err.finding.hint
    if code == "EC401":
        assert "slot 0 so far: median" in err.finding.hint  # the running profile before


def test_a_layer_shift_is_caught_on_the_next_profiled_batch(target: Any) -> None:
    """Off the profiled batches the norm profile is not measured: a shift from batch 6 on
    is caught at batch 8, the next profiled one (warmup 2, every 3: 0, 1, 2, 5, 8)."""
    guard = Guard(DEMO, warmup=2, every=3)
    with pytest.raises(ContractViolation) as caught:
        run(guard, target, 10, from_step(6, shifted))
    assert (caught.value.batch, caught.value.code) == (8, "EC401")
    assert guard.checked == 9


def test_log_counts_and_goes_on_skip_leaves_bad_batches_out(
    target: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def some_nan(step: int, states: Any, ids: Any, mask: Any) -> dict[str, torch.Tensor] | None:
        return nan_batch(states, ids, mask) if step in (2, 6) else None

    with caplog.at_level(logging.WARNING, logger="pytest_eagle_contract.guard"):
        logged = Guard(DEMO, warmup=1, every=100, on_violation="log")
        assert run(logged, target, 8, some_nan) == 8
    assert (logged.checked, logged.violations) == (8, 2)
    assert logged.last is not None and logged.last.batch == 6
    said = [r.getMessage().splitlines()[0] for r in caplog.records]
    assert "no target model" in said[0]  # once, at the start: what norms cannot see
    assert said[1:] == ["batch 2 breaks the contract", "batch 6 breaks the contract"]
    skipping = Guard(DEMO, warmup=1, every=100, on_violation="skip")
    assert run(skipping, target, 8, some_nan) == 6
    assert skipping.violations == 2


# -- the trainers' own batch layouts -------------------------------------------------------


def measured_contract(tmp_path: Path, target: Any, fmt: str, layers: list[Layer]) -> Path:
    """A contract for the tiny target whose bounds are the medians measured on prompts of
    the online loop, +-12%."""
    from pytest_eagle_contract.models.reference import capture_canonical
    from pytest_eagle_contract.shards.stats import norm_stats

    g = torch.Generator().manual_seed(99)
    medians: dict[Layer, list[float]] = {layer: [] for layer in layers}
    for _ in range(4):
        ids = torch.randint(0, SPEC.vocab_size, (200,), generator=g)
        states = capture_canonical(target, ids)
        for layer in layers:
            medians[layer].append(norm_stats(states[layer].to(torch.bfloat16)).median)
    slots = "\n".join(
        f"    - {{layer: {layer}, norm: {{min: {min(m) * 0.88:.4f}, max: {max(m) * 1.12:.4f}}}}}"
        for layer, m in medians.items()
    )
    path = tmp_path / f"{fmt}.yaml"
    path.write_text(
        f"""contract: tiny-{fmt}
version: 1
target: {{arch: LlamaForCausalLM, num_hidden_layers: 8, hidden_size: 64, vocab_size: 512,
         dtype: bfloat16}}
training:
  format: {fmt}
  slots:
{slots}
"""
    )
    return path


SPECULATORS_LAYERS = [*AUX, R("residual:8")]  # the aux states, then the pre-norm last layer


def speculators_batch(
    target: Any, lengths: list[int], max_len: int, layers: list[Layer], seed: int = 0
) -> dict[str, Any]:
    """A batch as speculators 0.9.0's ``CollateFn`` packs it: documents one after another
    in one row of ``max_len`` (zeros after), ``hidden_states`` the stored states but the
    last flattened, ``verifier_last_hidden_states`` the last, ``document_ids`` -1 on the
    padding, the int ``error_records``, the recovery record under a ``__`` key."""
    from pytest_eagle_contract.models.reference import capture_canonical

    g = torch.Generator().manual_seed(seed)
    parts: dict[str, list[torch.Tensor]] = {k: [] for k in ("ids", "mask", "aux", "last", "doc")}
    for d, n in enumerate(lengths):
        ids = torch.randint(0, SPEC.vocab_size, (n,), generator=g)
        states = capture_canonical(target, ids)
        parts["ids"].append(ids)
        parts["mask"].append(torch.arange(n) >= n // 3)
        parts["aux"].append(torch.cat([states[a] for a in layers[:-1]], -1))
        parts["last"].append(states[layers[-1]])
        parts["doc"].append(torch.full((n,), d))

    def packed(key: str, dtype: torch.dtype, fill: int = 0) -> torch.Tensor:
        x = torch.cat(parts[key])
        out = torch.full((max_len, *x.shape[1:]), fill, dtype=dtype)
        out[: len(x)] = x.to(dtype)
        return out[None]

    total = sum(lengths)
    return {
        "hidden_states": packed("aux", torch.bfloat16),
        "input_ids": packed("ids", torch.long),
        "verifier_last_hidden_states": packed("last", torch.bfloat16),
        "loss_mask": packed("mask", torch.long),
        "position_ids": torch.cat(
            [torch.arange(n) for n in lengths] + [torch.zeros(max_len - total, dtype=torch.long)]
        )[None],
        "document_ids": packed("doc", torch.long, fill=-1),
        "error_records": 0,
        "__recovery_metadata__": object(),
    }


def test_a_speculators_loader_is_guarded_in_the_training_process(
    target: Any, tmp_path: Path
) -> None:
    contract = measured_contract(tmp_path, target, "speculators", SPECULATORS_LAYERS)
    # two thirds padding: the median norm of the whole row would be 0, of the tokens is not
    good = [speculators_batch(target, [70, 60], 400, SPECULATORS_LAYERS, seed=s) for s in (1, 2)]
    shifted_target = [*AUX, R("residual:7")]
    bad = speculators_batch(target, [90], 300, shifted_target, seed=3)

    class Loader:  # what speculators' Trainer asks of its train_loader
        batch_sampler = "the sampler"

        def __init__(self, batches: list[dict[str, Any]]) -> None:
            self.batches = batches

        def __iter__(self) -> Any:
            return iter(self.batches)

        def __len__(self) -> int:
            return len(self.batches)

    guard = Guard(contract, warmup=10, every=10)
    loader = GuardedLoader(Loader([*good, bad]), guard)
    assert len(loader) == 3 and loader.batch_sampler == "the sampler"
    seen = []
    with pytest.raises(ContractViolation) as caught:
        for batch in loader:
            seen.append(batch)
    assert seen == good  # handed on unchanged, metadata keys included
    assert (caught.value.batch, caught.value.code, caught.value.slot) == (2, "EC401", 3)
    assert "verifier_last_hidden_states" in caught.value.finding.message


def test_a_speculators_batch_with_a_short_mask_is_a_length_finding(
    target: Any, tmp_path: Path
) -> None:
    contract = measured_contract(tmp_path, target, "speculators", SPECULATORS_LAYERS)
    batch = speculators_batch(target, [50], 64, SPECULATORS_LAYERS)
    batch["loss_mask"] = batch["loss_mask"][:, :60]  # 60 mask entries beside 64 rows
    with pytest.raises(ContractViolation) as caught:
        Guard(contract).check(batch)
    assert caught.value.code == "EC202" and "loss_mask has 60 entries" in str(caught.value)


def specforge_features(target: Any, n: int, seed: int, aux: list[Layer] = AUX) -> list[Any]:
    """Per-sample features as SpecForge's feature store hands them to the collator: each
    tensor [1, T, ...] (``ServerCaptureLayout``: hidden_state, target, input_ids,
    loss_mask, attention_mask)."""
    from pytest_eagle_contract.models.reference import capture_canonical

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, SPEC.vocab_size, (96,), generator=g)
        states = capture_canonical(target, ids)
        out.append(specforge_batch(states, ids, (torch.arange(96) >= 32).long(), aux))
    return out


def concatenate(features: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """What SpecForge's EAGLE-3 server collator does (``concatenate_features``): each key
    concatenated along the batch dimension."""
    return {k: torch.cat([f[k] for f in features]) for k in features[0]}


def test_the_specforge_collator_checks_each_batch_as_it_is_collated(target: Any) -> None:
    guard = Guard(DEMO, warmup=10, every=10)
    collate = specforge_collator(guard, concatenate)
    batch = collate(specforge_features(target, 2, seed=1))
    assert batch["hidden_state"].shape == (2, 96, 192) and guard.checked == 1
    with pytest.raises(ContractViolation) as caught:
        collate(specforge_features(target, 2, seed=2, aux=[AUX[1], AUX[0], AUX[2]]))
    assert caught.value.batch == 1 and caught.value.code == "EC401"
    assert caught.value.finding.file == "batch 1 row 0"


def test_a_specforge_batch_with_a_logits_target_is_held_to_the_fc_input_alone(
    target: Any,
) -> None:
    """``target_repr`` logits: the target is no state; the aux slots are still checked."""
    guard = Guard(DEMO, warmup=10, every=10)
    collate = specforge_collator(guard, concatenate, target_repr="pruned_logits")
    features = specforge_features(target, 1, seed=1)
    for f in features:
        f["target"] = torch.randn(1, 96, 32000)  # the teacher's logits over the draft vocab
    assert collate(features)["target"].shape == (1, 96, 32000) and guard.violations == 0
    features = specforge_features(target, 1, seed=2)
    features[0]["hidden_state"][0, 3, 0] = float("inf")
    with pytest.raises(ContractViolation) as caught:
        collate(features)
    assert (caught.value.code, caught.value.slot) == ("EC304", 0)


def test_a_batch_dimension_that_disagrees_is_a_length_finding(target: Any) -> None:
    batch = concatenate(specforge_features(target, 2, seed=1))
    batch["loss_mask"] = batch["loss_mask"][:1]
    found = Guard(DEMO, on_violation="log").check(batch)
    assert [f.code for f in found] == ["EC202"]
    assert "loss_mask has shape [1, 96] beside input_ids of 2 rows" in found[0].message


def test_a_plain_dict_named_by_the_contracts_format(target: Any) -> None:
    """No trainer layout: the contract's format's own keys (SpecForge's shard keys), with
    or without a batch dimension."""
    from pytest_eagle_contract.models.reference import capture_canonical

    ids = torch.randint(0, SPEC.vocab_size, (120,), generator=torch.Generator().manual_seed(5))
    states = capture_canonical(target, ids)
    shard = {
        "input_ids": ids,
        "loss_mask": (torch.arange(120) >= 40).long(),
        "aux_hidden_state": torch.cat([states[a] for a in AUX], -1)[None].bfloat16(),
        "hidden_state": states[TARGET][None].bfloat16(),
    }
    guard = Guard(DEMO, warmup=5)
    assert guard.check(shard) == []
    batched = {k: v if v.dim() == 3 else v[None] for k, v in shard.items()}
    assert guard.check(batched) == []
    fp16 = dict(shard, hidden_state=shard["hidden_state"].half())
    with pytest.raises(ContractViolation) as caught:
        guard.check(fp16)
    assert (caught.value.code, caught.value.slot) == ("EC201", 3)


def test_a_contract_the_trainer_layout_cannot_hold_is_a_usage_error(
    target: Any, tmp_path: Path
) -> None:
    text = DEMO.read_text().replace("fc_input: [0, 1, 2]", "fc_input: [1, 0, 2]")
    path = tmp_path / "reordered.yaml"
    path.write_text(text)
    batch = concatenate(specforge_features(target, 1, seed=1))
    with pytest.raises(ValueError, match=r"fc_input is \[1, 0, 2\]"):
        Guard(path).check(batch)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"warmup": -1}, "warmup is -1"),
        ({"every": 0}, "every is 0"),
        ({"every": 2.5}, "every is 2.5"),
        ({"on_violation": "ignore"}, "on_violation is 'ignore'"),
        ({"layout": "nemo"}, "layout is 'nemo'"),
        ({"start": -3}, "start is -3"),
    ],
)
def test_bad_settings_are_usage_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Guard(DEMO, **kwargs)


def test_the_trainer_examples_use_the_trainers_seams_and_the_public_api() -> None:
    """docs/examples: each compiles, imports only what the package exports, and hands the
    guard to the trainer's own seam (``collate_fn=``, the ``train_loader`` argument)."""
    import ast

    import pytest_eagle_contract

    seams = {"guard_specforge.py": "collate_fn=collate", "guard_speculators.py": "GuardedLoader("}
    for name, seam in seams.items():
        text = (ROOT / "docs" / "examples" / name).read_text()
        tree = ast.parse(text)
        ours = [
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "pytest_eagle_contract"
            for alias in node.names
        ]
        assert ours and set(ours) <= set(pytest_eagle_contract.__all__), name
        assert seam in text, name
        assert f"(examples/{name})" in (ROOT / "docs" / "online.md").read_text()  # linked


def test_a_check_that_cannot_run_is_logged_once_not_raised(
    target: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A plain dict in the current speculators format (``token_ids``, ``hidden_states``
    [B, T, k, H]) whose loss mask lives in the dataset, not in the batch: the mask checks
    cannot run (EC009, a warning), said once; the states are still checked."""
    from pytest_eagle_contract.models.reference import capture_canonical

    contract = measured_contract(tmp_path, target, "speculators", SPECULATORS_LAYERS)
    ids = torch.randint(0, SPEC.vocab_size, (2, 90), generator=torch.Generator().manual_seed(4))
    stacked = []
    for row in ids:
        states = capture_canonical(target, row)
        stacked.append(torch.stack([states[layer] for layer in SPECULATORS_LAYERS], 1))
    batch = {"token_ids": ids, "hidden_states": torch.stack(stacked).bfloat16()}
    guard = Guard(contract, warmup=5)
    with caplog.at_level(logging.WARNING, logger="pytest_eagle_contract.guard"):
        assert guard.check(batch) == [] and guard.check(batch) == []
    said = [r.getMessage() for r in caplog.records]  # the start's warning, then EC009 once
    assert len(said) == 2 and "no target model" in said[0] and "EC009" in said[1]
    assert guard.violations == 0 and guard.profiles[3].count == 4  # 2 batches x 2 rows
    swapped = dict(batch, hidden_states=batch["hidden_states"][:, :, [0, 2, 1, 3]])
    with pytest.raises(ContractViolation) as caught:
        guard.check(swapped)
    assert (caught.value.code, caught.value.slot) == ("EC401", 1)


def test_a_collator_called_from_loader_threads_counts_every_batch(target: Any) -> None:
    """SpecForge's loader collates in a thread pool (``dataloader_num_workers``): every
    batch is checked once, the running profiles count every row, a bad batch is named."""
    from concurrent.futures import ThreadPoolExecutor

    guard = Guard(DEMO, warmup=100)
    collate = specforge_collator(guard, concatenate)
    work = [specforge_features(target, 2, seed=s) for s in range(8)]
    with ThreadPoolExecutor(4) as pool:
        batches = list(pool.map(collate, work))
    assert len(batches) == 8 and (guard.checked, guard.violations) == (8, 0)
    assert guard.next_batch == 8 and all(p.count == 16 for p in guard.profiles.values())
    bad = specforge_features(target, 2, seed=9)
    bad[1]["target"][0, 4, :] = float("nan")
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(collate, w) for w in (work[0], bad)]
    with pytest.raises(ContractViolation) as caught:
        futures[1].result()
    assert caught.value.code == "EC304" and caught.value.finding.file.endswith("row 1")


def test_a_resumed_run_names_the_runs_batches_and_warms_up_again(target: Any) -> None:
    from pytest_eagle_contract.guard.profile import Schedule

    assert [b for b in range(12) if Schedule(3, 4).profiles(b)] == [0, 1, 2, 3, 7, 11]
    resumed = Guard(DEMO, warmup=2, every=50, start=1000)
    for seed in range(3):
        assert resumed.check(concatenate(specforge_features(target, 1, seed))) == []
    assert (resumed.profiled, resumed.next_batch) == (3, 1003)  # 1000-1001 warm, 1002 = K
    guard = Guard(DEMO, warmup=2, every=50, start=1000, on_violation="log")
    bad = {"input_ids": torch.zeros(1, 4, dtype=torch.long)}  # three keys missing
    found = [guard.check(bad) for _ in range(3)]
    assert all(f and f[0].code == "EC101" for f in found)
    assert guard.last is not None and guard.last.batch == 1002 and guard.next_batch == 1003


def test_a_plain_speculators_v1_dict_with_a_list_of_states(target: Any, tmp_path: Path) -> None:
    """speculators v1's keys (``hidden_states`` a list of [B, T, H]): each list entry is
    split by row; a list entry of another batch size is a length finding."""
    from pytest_eagle_contract.models.reference import capture_canonical

    contract = measured_contract(tmp_path, target, "speculators-v1", SPECULATORS_LAYERS)
    ids = torch.randint(0, SPEC.vocab_size, (2, 80), generator=torch.Generator().manual_seed(8))
    per_row = [capture_canonical(target, row) for row in ids]
    states = [torch.stack([s[layer] for s in per_row]).bfloat16() for layer in SPECULATORS_LAYERS]
    batch = {"input_ids": ids, "loss_mask": torch.ones(2, 80, dtype=torch.long)}
    guard = Guard(contract, warmup=5)
    assert guard.check({**batch, "hidden_states": states}) == []
    assert guard.profiles[3].count == 2
    with pytest.raises(ContractViolation) as caught:
        guard.check({**batch, "hidden_states": [*states[:3], states[3][:1]]})
    assert caught.value.code == "EC202" and "hidden_states has shape [1, 80, 64]" in str(
        caught.value
    )
    with pytest.raises(ContractViolation) as caught:
        guard.check({**batch, "hidden_states": [states[0], *states[2:]]})  # a slot dropped
    assert caught.value.code == "EC204"
