"""A tiny online EAGLE-3 training loop on CPU: the demo's target (a random-weight Llama made
in code, 8 layers, H=64, deterministic) runs beside the trainer, its aux states stream into
SpecForge-layout batches, and a tiny EAGLE-3-like draft trains on them. Used by
tests/unit/test_guard.py (failures injected mid-run) and benchmarks/bench_guard.py (the cost).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from pytest_eagle_contract.layers import Layer
from pytest_eagle_contract.models.reference import capture_canonical
from pytest_eagle_contract.models.tiny import TinySpec, tiny_target

SPEC = TinySpec(arch="llama", num_layers=8, hidden_size=64, vocab_size=512, seed=0)  # the demo's
AUX = [Layer.parse("residual:2"), Layer.parse("residual:4"), Layer.parse("residual:5")]
TARGET = Layer.parse("final_norm")

Inject = Callable[
    [int, dict[Layer, torch.Tensor], torch.Tensor, torch.Tensor], dict[str, torch.Tensor] | None
]
"""``inject(step, states, ids, mask)``: the batch to hand on instead (None: the good one)."""


class TinyDraft(nn.Module):  # type: ignore[misc]
    """An EAGLE-3-shaped draft: ``fc`` maps the aux concat [T, n*H] to H, one decoder layer
    (causal attention and a SwiGLU MLP) reads [embed; fc] (2H), then the norm and lm_head."""

    def __init__(self, hidden: int, vocab: int, n_aux: int = 3, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, hidden)
        self.fc = nn.Linear(n_aux * hidden, hidden, bias=False)
        self.in_norm = nn.RMSNorm(2 * hidden)
        self.qkv = nn.Linear(2 * hidden, 3 * hidden, bias=False)
        self.o = nn.Linear(hidden, hidden, bias=False)
        self.post_norm = nn.RMSNorm(hidden)
        self.up = nn.Linear(hidden, 4 * hidden, bias=False)
        self.gate = nn.Linear(hidden, 4 * hidden, bias=False)
        self.down = nn.Linear(4 * hidden, hidden, bias=False)
        self.norm = nn.RMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids: torch.Tensor, aux: torch.Tensor) -> torch.Tensor:
        h = self.fc(aux)
        x = self.in_norm(torch.cat([self.embed(input_ids), h], dim=-1))
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.o(a.transpose(1, 2).reshape(b, t, -1))
        y = self.post_norm(h)
        h = h + self.down(F.silu(self.gate(y)) * self.up(y))
        logits: torch.Tensor = self.lm_head(self.norm(h))
        return logits


def train_step(draft: TinyDraft, optimizer: torch.optim.Optimizer, batch: dict[str, Any]) -> float:
    """One step on a SpecForge-layout batch: predict each next token where the mask is 1."""
    ids, mask = batch["input_ids"], batch["loss_mask"]
    logits = draft(ids[:, :-1], batch["hidden_state"][:, :-1].float())
    weights = mask[:, 1:].float()
    loss = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    total = (loss * weights).sum() / weights.sum().clamp_min(1)
    optimizer.zero_grad(set_to_none=True)
    total.backward()  # type: ignore[no-untyped-call]
    optimizer.step()
    return float(total.detach())


def specforge_batch(
    states: dict[Layer, torch.Tensor],
    ids: torch.Tensor,
    mask: torch.Tensor,
    aux: list[Layer] = AUX,
) -> dict[str, torch.Tensor]:
    """The tensors of SpecForge's EAGLE-3 ``TrainBatch`` for one sample (B = 1), bf16 as
    SGLang captures them: ``hidden_state`` the aux concat, ``target`` the last state."""
    return {
        "input_ids": ids[None],
        "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
        "loss_mask": mask[None],
        "hidden_state": torch.cat([states[a] for a in aux], -1)[None].to(torch.bfloat16),
        "target": states[TARGET][None].to(torch.bfloat16),
    }


def online_batches(
    steps: int, inject: Inject | None = None, seed: int = 1, model: Any = None
) -> Iterator[dict[str, torch.Tensor]]:
    """``steps`` batches captured live from the tiny target (prompts of 64-320 random
    tokens, the first third masked out, as the demo's shards); ``inject`` may hand on another
    batch (a failure from some step on)."""
    model = model if model is not None else tiny_target(SPEC)
    g = torch.Generator().manual_seed(seed)
    for step in range(steps):
        tokens = int(torch.randint(64, 320, (1,), generator=g))
        ids = torch.randint(0, SPEC.vocab_size, (tokens,), generator=g)
        mask = torch.ones(tokens, dtype=torch.long)
        mask[: tokens // 3] = 0
        states = capture_canonical(model, ids)
        bad = inject(step, states, ids, mask) if inject is not None else None
        yield bad if bad is not None else specforge_batch(states, ids, mask)


def draft_and_optimizer(hidden: int, vocab: int, seed: int = 0) -> tuple[TinyDraft, Any]:
    torch.manual_seed(seed)
    draft = TinyDraft(hidden, vocab)
    return draft, torch.optim.AdamW(draft.parameters(), lr=1e-3)
