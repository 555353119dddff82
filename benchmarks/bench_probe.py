"""Benchmark: the acceptance probe (``eagle-contract probe``) at a real draft's width.

A random-weight Llama target 4096 wide (2 layers, a small vocabulary: depth and vocabulary
do not change the draft's cost per token much) and a one-layer EAGLE-3 draft of the same
width (fc over 3 aux states, intermediate 14336, as Llama-3.1-8B's drafts), both float32.
Times the target's greedy continuations, and the probe proper (reference capture and the
K-step draft chain from every position) for two layouts, as the gate runs them. Uses CUDA
when present. The random draft accepts almost nothing, so its chains stop after step 1;
a draft that accepts drafts on (chains cost at most K times step 1).

    python benchmarks/bench_probe.py [--sequences 64] [--length 256] [--steps 4]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

HIDDEN, INTER, HEADS, KV = 4096, 14336, 32, 8
WIDTHS: dict[str, Any] = {
    "hidden_size": HIDDEN,
    "intermediate_size": INTER,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV,
}  # the target's and the draft's alike


def make_draft(root: Path, vocab: int) -> Path:
    """A random one-layer EAGLE-3 draft in the SpecForge/SGLang layout."""
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    hd = HIDDEN // HEADS
    shapes = {
        "fc.weight": (HIDDEN, 3 * HIDDEN),
        "norm.weight": (HIDDEN,),
        "lm_head.weight": (vocab, HIDDEN),
        "midlayer.self_attn.q_proj.weight": (HEADS * hd, 2 * HIDDEN),
        "midlayer.self_attn.k_proj.weight": (KV * hd, 2 * HIDDEN),
        "midlayer.self_attn.v_proj.weight": (KV * hd, 2 * HIDDEN),
        "midlayer.self_attn.o_proj.weight": (HIDDEN, HEADS * hd),
        "midlayer.mlp.gate_proj.weight": (INTER, HIDDEN),
        "midlayer.mlp.up_proj.weight": (INTER, HIDDEN),
        "midlayer.mlp.down_proj.weight": (HIDDEN, INTER),
        "midlayer.input_layernorm.weight": (HIDDEN,),
        "midlayer.hidden_norm.weight": (HIDDEN,),
        "midlayer.post_attention_layernorm.weight": (HIDDEN,),
    }
    weights = {
        k: torch.ones(s) if len(s) == 1 else torch.randn(s, generator=g) / s[1] ** 0.5
        for k, s in shapes.items()
    }
    draft = root / "draft"
    draft.mkdir()
    save_file(weights, str(draft / "model.safetensors"))
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        **WIDTHS,
        "num_hidden_layers": 1,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "vocab_size": vocab,
        "draft_vocab_size": vocab,
        "target_hidden_size": HIDDEN,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 2]},
    }
    (draft / "config.json").write_text(json.dumps(config))
    return draft


def make_target(layers: int, vocab: int) -> object:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        **WIDTHS, vocab_size=vocab, num_hidden_layers=layers, max_position_embeddings=4096
    )
    return LlamaForCausalLM(config).eval()  # type: ignore[no-untyped-call]


def main() -> None:
    import torch

    from pytest_eagle_contract.layers import Layer
    from pytest_eagle_contract.models.acceptance import Layouts, estimate, greedy_sequences
    from pytest_eagle_contract.models.draft_model import EagleDraft

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequences", type=int, default=64)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=8192)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        model = make_target(args.layers, args.vocab).to(device)  # type: ignore[attr-defined]
        draft = EagleDraft.load(make_draft(Path(tmp), args.vocab))
        g = torch.Generator().manual_seed(1)
        prompts = list(torch.randint(0, args.vocab, (args.sequences, args.prompt), generator=g))
        start = time.perf_counter()
        sequences = greedy_sequences(model, prompts, args.length)
        generated = time.perf_counter() - start
        layouts: Layouts = [
            ("trainer", (Layer(0), Layer(1), Layer(2))),
            ("served", (Layer(1), Layer(2), Layer(-1))),
        ]
        start = time.perf_counter()
        found = estimate(draft, model, sequences, layouts, args.steps, args.prompt - 2)
        probed = time.perf_counter() - start
    n = args.sequences
    print(
        f"device {device}, torch threads {torch.get_num_threads()}: {n} sequences x "
        f"{args.length} tokens, target {HIDDEN} wide x {args.layers} layers, vocab "
        f"{args.vocab}; 1-layer draft, {args.steps}-step chains, {len(layouts)} layouts"
    )
    print(f"  greedy continuations  {generated:8.1f} s  ({generated / n:.2f} s per sequence)")
    print(f"  probe (capture+chain) {probed:8.1f} s  ({probed / n:.2f} s per sequence)")
    total = generated + probed
    print(f"  total                 {total:8.1f} s  ({total / n:.2f} s per sequence)")
    print("  accept lengths: " + ", ".join(f"{e.name} {e.accept_length:.3f}" for e in found))


if __name__ == "__main__":
    main()
