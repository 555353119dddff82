"""A tiny target trained on a structured corpus and a draft distilled from it, on CPU.

The corpus: even token ids only, each next token a fixed function of the two before it
(10% noise), so the trained target is peaked and the draft's vocabulary is compressed
(draft id i is target id 2i: d2t[i] = i).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from pytest_eagle_contract.layers import Layer
from pytest_eagle_contract.models.draft_model import EagleDraft
from pytest_eagle_contract.models.tiny import capture_canonical

VOCAB, HIDDEN, LAYERS, SEQ = 64, 64, 6, 48
TRAINED = (Layer(1), Layer(3), Layer(5))  # the draft's fc input, in order


def corpus(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    half = VOCAB // 2
    x = torch.zeros(n, SEQ, dtype=torch.long)
    x[:, :2] = torch.randint(0, half, (n, 2), generator=g)
    for t in range(2, SEQ):
        rule = (3 * x[:, t - 1] + x[:, t - 2] + 1) % half
        noise = torch.randint(0, half, (n,), generator=g)
        x[:, t] = torch.where(torch.rand(n, generator=g) < 0.1, noise, rule)
    return 2 * x


def train_target(out: Path) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
                         num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = corpus(2048, seed=1)
    for step in range(250):
        batch = data[(step * 32) % 2048:][:32]
        loss = model(batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    model.config.architectures = ["LlamaForCausalLM"]
    model.save_pretrained(out, safe_serialization=True)
    return model


def greedy(model: Any, prompts: torch.Tensor, length: int) -> torch.Tensor:
    with torch.no_grad():
        out = model.generate(prompts, max_new_tokens=length - prompts.shape[1],
                             do_sample=False, pad_token_id=0)
    return out


def aux_of(model: Any, ids: torch.Tensor, layers: tuple[Layer, ...]) -> torch.Tensor:
    states = capture_canonical(model, ids)
    return torch.cat([states[layer] for layer in layers], -1)


def distill_draft(model: Any, out: Path, steps: int = 300) -> EagleDraft:
    """A one-layer draft trained (first step only) on the target's greedy continuations."""
    torch.manual_seed(0)
    half = VOCAB // 2
    shapes = {
        "fc.weight": (HIDDEN, 3 * HIDDEN), "norm.weight": (HIDDEN,),
        "lm_head.weight": (half, HIDDEN),
        "midlayer.self_attn.q_proj.weight": (HIDDEN, 2 * HIDDEN),
        "midlayer.self_attn.k_proj.weight": (HIDDEN // 2, 2 * HIDDEN),
        "midlayer.self_attn.v_proj.weight": (HIDDEN // 2, 2 * HIDDEN),
        "midlayer.self_attn.o_proj.weight": (HIDDEN, HIDDEN),
        "midlayer.mlp.gate_proj.weight": (2 * HIDDEN, HIDDEN),
        "midlayer.mlp.up_proj.weight": (2 * HIDDEN, HIDDEN),
        "midlayer.mlp.down_proj.weight": (HIDDEN, 2 * HIDDEN),
        "midlayer.input_layernorm.weight": (HIDDEN,), "midlayer.hidden_norm.weight": (HIDDEN,),
        "midlayer.post_attention_layernorm.weight": (HIDDEN,),
    }
    weights = {k: (torch.ones(s) if len(s) == 1 else torch.randn(s) / s[1] ** 0.5)
               for k, s in shapes.items()}
    for w in weights.values():
        w.requires_grad_(True)
    config = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": HIDDEN,
              "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1,
              "intermediate_size": 2 * HIDDEN, "rms_norm_eps": 1e-6, "vocab_size": VOCAB,
              "draft_vocab_size": half, "target_hidden_size": HIDDEN,
              "eagle_config": {"eagle_aux_hidden_state_layer_ids": [l.index - 1 for l in TRAINED]}}
    draft = EagleDraft(out, config, weights)
    embedding = model.model.embed_tokens.weight.detach()
    seqs = greedy(model, corpus(48, seed=2)[:, :8], SEQ)
    examples = [(aux_of(model, s, TRAINED), s) for s in seqs]
    opt = torch.optim.AdamW(list(weights.values()), lr=3e-3)
    for step in range(steps):
        aux, ids = examples[step % len(examples)]
        logits = draft.prefill_logits(aux, ids, embedding)[:-1]
        loss = torch.nn.functional.cross_entropy(logits, ids[2:] // 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
    final = {k: v.detach().contiguous() for k, v in weights.items()}
    final["d2t"] = torch.arange(half)
    final["t2d"] = torch.arange(VOCAB) % 2 == 0
    out.mkdir(parents=True, exist_ok=True)
    from safetensors.torch import save_file

    save_file(final, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config))
    return EagleDraft.load(out)
