"""Tiny deterministic transformer targets on CPU, and capture of every canonical layer.

Random weights (no download), initialised so that the residual norm grows with depth as
in trained models, which is what makes a one-layer shift visible in the norm profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..layers import Layer

if TYPE_CHECKING:
    import torch

GROWTH = 1.4  # per-layer scale of each block's MLP output projection
BLOCK_SCALE = 40.0
NORM_SPREAD = 0.05


@dataclass(frozen=True)
class TinySpec:
    arch: str = "llama"
    num_layers: int = 8
    hidden_size: int = 64
    vocab_size: int = 512
    seed: int = 0


def tiny_target(spec: TinySpec = TinySpec()) -> Any:
    """A random-weight causal LM of the given family, in eval mode, float32."""
    import torch
    from transformers import AutoModelForCausalLM, DeepseekV3Config, LlamaConfig, Qwen3Config

    config: Any
    common: dict[str, Any] = dict(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=2 * spec.hidden_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    if spec.arch == "llama":
        config = LlamaConfig(**common)
    elif spec.arch == "qwen3":
        config = Qwen3Config(**common, head_dim=spec.hidden_size // 4)
    elif spec.arch == "deepseek_v3":
        config = DeepseekV3Config(
            **common,
            moe_intermediate_size=spec.hidden_size,
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=1,
            first_k_dense_replace=1,
            kv_lora_rank=16,
            q_lora_rank=32,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=16,
            n_group=1,
            topk_group=1,
        )
    else:
        raise ValueError(f"unknown tiny arch {spec.arch!r}: llama, qwen3 or deepseek_v3")
    torch.manual_seed(spec.seed)
    model: Any = AutoModelForCausalLM.from_config(config).eval()  # type: ignore[no-untyped-call]
    model.config.architectures = [type(model).__name__]
    with torch.no_grad():
        for k, layer in enumerate(model.model.layers):
            for name, param in layer.named_parameters():
                if name.endswith("down_proj.weight"):
                    param.mul_(BLOCK_SCALE * GROWTH**k)
                # Attention mixes tokens: kept small so each token's norm depends on the
                # token, not on the sequence, and medians are stable from shard to shard.
                elif name.endswith("norm.weight"):
                    param.normal_(1.0, NORM_SPREAD)  # trained norms are not all ones
        model.model.norm.weight.normal_(1.0, NORM_SPREAD)
    return model


def capture_canonical(model: Any, input_ids: torch.Tensor) -> dict[Layer, torch.Tensor]:
    """Every canonical layer for one sequence: embed, residual:1..L, final_norm, as [T, H].

    ``residual:k`` is HF's ``hidden_states[k]`` for k < L; ``residual:L`` (pre-norm) is the
    input of the final norm, taken with a hook; ``final_norm`` is ``hidden_states[L]``.
    """
    import torch

    captured: dict[str, torch.Tensor] = {}
    inner: Any = model.model
    handle = inner.norm.register_forward_pre_hook(
        lambda _mod, args: captured.__setitem__("pre", args[0].detach())
    )
    try:
        with torch.no_grad():
            out = model(input_ids.unsqueeze(0), output_hidden_states=True)
    finally:
        handle.remove()
    hidden = out.hidden_states
    num_layers = len(hidden) - 1
    states = {Layer(k): hidden[k][0] for k in range(num_layers)}
    states[Layer(num_layers)] = captured["pre"][0]
    states[Layer(-1)] = hidden[num_layers][0]
    return states
