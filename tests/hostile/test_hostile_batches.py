"""Hostile batches handed to the training-loop guard (docs/security.md's rule, for the guard:
a bad batch is a coded finding, a ContractViolation, or a usage error (TypeError,
ValueError) that names the key and what was found; never an unrelated traceback, never a
hang on a shape that declares more than it holds)."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from pytest_eagle_contract import ContractViolation, Guard

DEMO = Path(__file__).resolve().parents[2] / "contracts" / "demo-tiny-llama-eagle3.yaml"
T, H = 48, 64


def good(t: int = T, b: int = 1) -> dict[str, Any]:
    """A SpecForge EAGLE-3 batch the demo contract accepts: each slot's per-token norm at
    the middle of its bounds."""
    g = torch.Generator().manual_seed(0)

    def slot(norm: float) -> torch.Tensor:
        x = torch.randn(b, t, H, generator=g)
        return x / x.norm(dim=-1, keepdim=True) * norm

    return {
        "input_ids": torch.randint(0, 512, (b, t), generator=g),
        "attention_mask": torch.ones(b, t, dtype=torch.long),
        "loss_mask": torch.ones(b, t, dtype=torch.long),
        "hidden_state": torch.cat([slot(1.6), slot(3.5), slot(5.0)], -1).bfloat16(),
        "target": slot(8.1).bfloat16(),
    }


def edit(**changes: Any) -> Callable[[], Any]:
    return lambda: {**good(), **{k: v() if callable(v) else v for k, v in changes.items()}}


def float4() -> torch.Tensor:
    return torch.zeros(1, T, H // 2, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)


def nested() -> torch.Tensor:
    with warnings.catch_warnings():  # torch's own prototype warning, at creation
        warnings.simplefilter("ignore")
        return torch.nested.nested_tensor([torch.zeros(T, 3 * H), torch.zeros(T - 1, 3 * H)])


def quantized() -> torch.Tensor:
    with warnings.catch_warnings():  # torch's own deprecation warning, at creation
        warnings.simplefilter("ignore")
        return torch.quantize_per_tensor(torch.zeros(1, T, 3 * H), 0.1, 0, torch.qint8)


Case = tuple[str, Callable[[], Any], str, str]
CASES: list[Case] = [
    # (name, batch, outcome: ECxxx / TypeError / ValueError, words the message holds)
    ("int", lambda: 42, "TypeError", "not a int"),
    ("string", lambda: "input_ids", "TypeError", "not a str"),
    ("list of tensors", lambda: [torch.zeros(3)], "TypeError", "not a list"),
    ("none", lambda: None, "TypeError", "not a NoneType"),
    ("train batch of a list", lambda: SimpleNamespace(tensors=[1]), "TypeError", "not a"),
    ("int key", lambda: {**good(), 7: torch.zeros(1)}, "TypeError", "batch key 7 is a int"),
    ("ids a list", edit(input_ids=[[1, 2, 3]]), "TypeError", "batch['input_ids'] is a list"),
    ("ids nested garbage", edit(input_ids={"a": [1, {"b": None}]}), "TypeError", "is a dict"),
    ("state a string", edit(hidden_state="garbage"), "TypeError", "batch['hidden_state'] is a str"),
    ("state numpy", edit(target=lambda: good()["target"].float().numpy()), "TypeError", "ndarray"),
    ("mask none", edit(loss_mask=None), "TypeError", "batch['loss_mask'] is a NoneType"),
    (
        "sparse",
        edit(hidden_state=lambda: torch.zeros(1, T, 3 * H).to_sparse()),
        "TypeError",
        "a sparse tensor",
    ),
    ("nested tensor", edit(hidden_state=nested), "TypeError", "a nested tensor"),
    ("quantized", edit(hidden_state=quantized), "TypeError", "a quantized tensor"),
    (
        "meta",
        edit(target=lambda: torch.empty(1, T, H, device="meta")),
        "TypeError",
        "a meta tensor",
    ),
    (
        "ids 3-d",
        edit(input_ids=lambda: torch.zeros(1, 1, T, dtype=torch.long)),
        "ValueError",
        "[1, 1, 48]",
    ),
    (
        "rows declared by a view",
        lambda: {k: v.expand(10**6, *v.shape[1:]) for k, v in good().items()},
        "ValueError",
        "1000000 rows",
    ),
    (
        "tokens declared by a view",
        lambda: {k: v.expand(1, 10**7, *v.shape[2:]) for k, v in good(t=1).items()},
        "EC205",
        "10000000 tokens",
    ),
    ("empty dict", lambda: {}, "EC101", "key 'aux_hidden_state' is missing"),
    ("no rows", lambda: good(b=0), "EC205", "no samples"),
    ("no tokens", lambda: good(t=0), "EC205", "sequence of 0 tokens"),
    (
        "nan everywhere",
        edit(hidden_state=lambda: torch.full((1, T, 3 * H), float("nan")).bfloat16()),
        "EC304",
        "NaN or Inf in 48 of 48 tokens",
    ),
    (
        "inf target",
        edit(target=lambda: torch.full((1, T, H), float("inf")).bfloat16()),
        "EC304",
        "slot 3",
    ),
    (
        "float8 states",
        edit(hidden_state=lambda: good()["hidden_state"].to(torch.float8_e4m3fn)),
        "EC201",
        "float8_e4m3fn",
    ),
    ("float4 states", edit(target=float4), "EC203", "[48, 32]"),
    (
        "float4 ids",
        edit(
            input_ids=lambda: torch.zeros(1, T // 2, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
        ),
        "EC201",
        "float4_e2m1fn_x2",
    ),
    (
        "float ids with nan",
        edit(input_ids=lambda: torch.full((1, T), float("nan"))),
        "EC201",
        "float32",
    ),
    (
        "complex states",
        edit(hidden_state=lambda: torch.zeros(1, T, 3 * H, dtype=torch.complex64)),
        "EC201",
        "complex64",
    ),
    ("bool mask", edit(loss_mask=lambda: torch.ones(1, T, dtype=torch.bool)), "EC201", "bool"),
    (
        "mask of 3s",
        edit(loss_mask=lambda: torch.full((1, T), 3)),
        "EC302",
        "values other than 0 and 1",
    ),
    (
        "ids past the vocabulary",
        edit(input_ids=lambda: torch.full((1, T), 10**9)),
        "EC301",
        "outside the vocabulary",
    ),
    ("state 0-d", edit(target=lambda: torch.tensor(1.0)), "EC202", "target has shape []"),
    (
        "state too narrow",
        edit(hidden_state=lambda: torch.zeros(1, T, 100).bfloat16()),
        "EC203",
        "not a multiple of hidden_size 64",
    ),
    ("unexpected key", edit(secret=lambda: torch.zeros(1)), "EC102", "unexpected key 'secret'"),
]


@pytest.mark.parametrize(("name", "make", "outcome", "words"), CASES, ids=[c[0] for c in CASES])
def test_a_hostile_batch_is_a_finding_or_a_usage_error(
    name: str, make: Callable[[], Any], outcome: str, words: str
) -> None:
    batch = make()
    start = time.perf_counter()
    if outcome in ("TypeError", "ValueError"):
        with pytest.raises((TypeError, ValueError)) as caught:
            Guard(DEMO, warmup=5).check(batch)
        assert type(caught.value).__name__ == outcome
        assert words in str(caught.value)
    else:
        with pytest.raises(ContractViolation) as violation:
            Guard(DEMO, warmup=5).check(batch)
        text = str(violation.value)
        assert violation.value.code == outcome, text
        assert words in text, text
        assert violation.value.batch == 0
        logged = Guard(DEMO, warmup=5, on_violation="log").check(batch)  # and counted
        assert logged and logged[0].code == outcome
    assert time.perf_counter() - start < 20  # a declared shape is not a hang


def test_the_good_batch_passes_and_tensors_that_require_grad_are_read() -> None:
    guard = Guard(DEMO, warmup=5)
    assert guard.check(good()) == []
    batch = good()
    batch["hidden_state"] = batch["hidden_state"].float().requires_grad_()
    with pytest.raises(ContractViolation) as caught:  # read (detached); the dtype is wrong
        guard.check(batch)
    assert caught.value.code == "EC201" and "float32" in str(caught.value)
