"""Tiny deterministic transformer targets on CPU (their canonical layers are captured by
:mod:`.reference`, as any target's).

Random weights (no download), initialised so that the residual norm grows with depth as
in trained models, which is what makes a one-layer shift visible in the norm profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

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
