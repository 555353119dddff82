"""A tiny target trained briefly on a structured synthetic corpus, and an EAGLE-3 draft
distilled from it on CPU: a pair peaked enough for the acceptance probe (docs/probe.md).

A random-weight target predicts almost uniformly, so every aux layout accepts about one
token per forward. Here the corpus is deterministic after its first two tokens, the target
learns it in under a hundred steps, and each of its blocks writes more than the residual it
reads, so adjacent layers hold the same information in different coordinates: a draft's
fc trained on one layout reads another one badly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..layers import Layer
from .reference import capture_canonical
from .tiny import GROWTH, TinySpec, tiny_target

if TYPE_CHECKING:
    import torch

    from .draft_model import EagleDraft

CORPUS_SEED = 123
TARGET_GROWTH = 2.5  # per-layer scale of each block's MLP output in the trained target


def corpus(n: int, length: int, vocab: int, generator: torch.Generator) -> torch.Tensor:
    """``n`` sequences ``[n, length]``: two random tokens, then each token one or two steps
    further along a fixed random cycle through the vocabulary than the one before it, two
    when the token before that is odd: ``t[i+1] = Q^(1 + t[i-1] % 2)(t[i])``. The target
    must carry the previous token's parity forward with attention. ``Q`` is one cycle
    through every token, so a sequence repeats after ``vocab / 2`` tokens at the soonest."""
    import torch

    order = torch.randperm(vocab, generator=torch.Generator().manual_seed(CORPUS_SEED))
    step = torch.empty(vocab, dtype=torch.long)
    step[order] = order.roll(-1)  # Q: each token to the next one on the cycle
    moves = torch.stack([step, step[step]])
    seqs = torch.zeros(n, length, dtype=torch.long)
    seqs[:, :2] = torch.randint(0, vocab, (n, 2), generator=generator)
    for i in range(2, length):
        seqs[:, i] = moves[seqs[:, i - 2] % 2, seqs[:, i - 1]]
    return seqs


def trained_target(spec: TinySpec, steps: int = 60) -> Any:
    """:func:`tiny_target` with its blocks' MLP outputs growing by ``TARGET_GROWTH`` per
    layer (``GROWTH`` there), trained ``steps`` AdamW steps of 16 :func:`corpus` sequences
    of 32 tokens; deterministic for a given spec, in eval mode, with no end-of-sequence
    token (generate would otherwise suppress it under ``min_new_tokens``). A few seconds
    of CPU at H=64."""
    import torch

    model = tiny_target(spec)
    with torch.no_grad():
        for k, layer in enumerate(model.model.layers):
            layer.mlp.down_proj.weight.mul_((TARGET_GROWTH / GROWTH) ** k)
    batches = torch.Generator().manual_seed(spec.seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        ids = corpus(16, 32, spec.vocab_size, batches)
        loss = model(ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    for config in (model.config, model.generation_config):  # no token ends a sequence:
        config.bos_token_id = config.eos_token_id = None  # greedy is the plain argmax
    return model.eval()


def distill_draft(
    model: Any,
    layers: tuple[Layer, ...],
    aux_ids: list[int],
    out: Path,
    steps: int = 200,
    chain: int = 3,
) -> EagleDraft:
    """A one-layer EAGLE-3 draft over ``layers`` of ``model``, trained on the target's greedy
    continuations of 32 random 8-token prompts (48 tokens) as EAGLE-3 trains (``chain``
    unrolled steps, each after the first from the draft's own output), saved to ``out``
    with ``aux_ids`` as its config's aux layer ids. Its token embedding is switched off
    (``input_layernorm`` zero), so it reads the current token from the aux states only."""
    import torch
    from safetensors.torch import save_file

    from .acceptance import greedy_sequences
    from .draft_model import EagleDraft

    hidden = int(model.config.hidden_size)
    vocab = int(model.config.vocab_size)
    g = torch.Generator().manual_seed(0)
    config, weights = random_draft(hidden, vocab, aux_ids, g, n_aux=len(layers))
    weights["midlayer.input_layernorm.weight"].zero_()
    trained = [w.requires_grad_(True) for k, w in weights.items() if "input_layernorm" not in k]
    draft = EagleDraft(out, config, weights)
    embedding = model.get_input_embeddings().weight.detach()
    prompts = torch.randint(0, vocab, (32, 8), generator=g)
    ids = greedy_sequences(model, list(prompts), 48)
    captured = [capture_canonical(model, seq) for seq in ids]
    aux = [torch.cat([states[x] for x in layers], -1) for states in captured]
    opt = torch.optim.AdamW(trained, lr=1e-2)
    for step in range(steps):
        b = step % len(ids)
        logits = draft.unrolled_logits(aux[b], ids[b], embedding, chain)
        loss = torch.stack(  # the training-time test: later steps from the draft's own output
            [
                torch.nn.functional.cross_entropy(x[: x.shape[0] - 1], ids[b][2 + s :])
                for s, x in enumerate(logits)
            ]
        ).sum()
        opt.zero_grad()
        torch.autograd.backward(loss)
        opt.step()
    out.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.detach().contiguous() for k, v in weights.items()}, str(out / "model.safetensors")
    )
    (out / "config.json").write_text(json.dumps(config))
    return EagleDraft.load(out)


def _draft_shapes(hidden: int, vocab: int, n_aux: int) -> dict[str, tuple[int, ...]]:
    attn = "midlayer.self_attn."
    mlp = "midlayer.mlp."
    return {
        "fc.weight": (hidden, n_aux * hidden),
        "norm.weight": (hidden,),
        "lm_head.weight": (vocab, hidden),
        attn + "q_proj.weight": (hidden, 2 * hidden),
        attn + "k_proj.weight": (hidden // 2, 2 * hidden),
        attn + "v_proj.weight": (hidden // 2, 2 * hidden),
        attn + "o_proj.weight": (hidden, hidden),
        mlp + "gate_proj.weight": (2 * hidden, hidden),
        mlp + "up_proj.weight": (2 * hidden, hidden),
        mlp + "down_proj.weight": (hidden, 2 * hidden),
        "midlayer.input_layernorm.weight": (hidden,),
        "midlayer.hidden_norm.weight": (hidden,),
        "midlayer.post_attention_layernorm.weight": (hidden,),
    }


def random_draft(
    hidden: int, vocab: int, aux_ids: list[int], g: torch.Generator, n_aux: int | None = None
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """A one-layer EAGLE-3 draft's config.json and random weights (norms 1, matrices
    scaled by 1/sqrt(fan-in)) for a target of ``hidden`` and ``vocab``; its fc takes
    ``n_aux`` states (default: one per aux id)."""
    import torch

    weights = {
        k: (torch.ones(s) if len(s) == 1 else torch.randn(s, generator=g) / s[1] ** 0.5)
        for k, s in _draft_shapes(hidden, vocab, n_aux or len(aux_ids)).items()
    }
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": hidden,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
        "intermediate_size": 2 * hidden,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab,
        "draft_vocab_size": vocab,
        "target_hidden_size": hidden,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(aux_ids)},
    }
    return config, weights
