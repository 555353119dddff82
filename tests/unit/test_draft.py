"""The draft checkpoint: its loading (both weight layouts) and every EC9xx rule made to fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from pytest_eagle_contract.checks.draft import check_draft
from pytest_eagle_contract.contract.model import load_contract
from pytest_eagle_contract.models.draft_model import EagleDraft

H, V, L = 32, 128, 8

CONTRACT = f"""\
contract: tiny
version: 1
target: {{arch: LlamaForCausalLM, num_hidden_layers: {L}, hidden_size: {H}, vocab_size: {V}}}
serving:
  engine: sglang
  version: "0.5.23"
  draft_config: draft/config.json
"""


def config(**extra: object) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": H,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
        "intermediate_size": 2 * H,
        "vocab_size": V,
        "draft_vocab_size": V // 2,
        "target_hidden_size": H,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]},
        **extra,
    }


def tensors(prefix: str = "midlayer.") -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) / shape[-1] ** 0.5

    out = {
        "fc.weight": r(H, 3 * H),
        "norm.weight": torch.ones(H),
        "lm_head.weight": r(V // 2, H),
        "d2t": torch.arange(V // 2),
        "t2d": torch.arange(V) % 2 == 0,
    }
    for name, shape in {
        "self_attn.q_proj": (H, 2 * H),
        "self_attn.k_proj": (H // 2, 2 * H),
        "self_attn.v_proj": (H // 2, 2 * H),
        "self_attn.o_proj": (H, H),
        "mlp.gate_proj": (2 * H, H),
        "mlp.up_proj": (2 * H, H),
        "mlp.down_proj": (H, 2 * H),
    }.items():
        out[f"{prefix}{name}.weight"] = r(*shape)
    for name in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
        out[f"{prefix}{name}.weight"] = torch.ones(H)
    return out


def write(tmp_path: Path, cfg: dict[str, object], weights: dict[str, torch.Tensor]) -> Path:
    d = tmp_path / "draft"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    save_file(weights, str(d / "model.safetensors"))
    (tmp_path / "c.yaml").write_text(CONTRACT)
    return d


def findings(
    tmp_path: Path,
    cfg: dict[str, object],
    weights: dict[str, torch.Tensor],
    embedding: torch.Tensor | None = None,
) -> set[str]:
    write(tmp_path, cfg, weights)
    return {f.code for f in check_draft(load_contract(tmp_path / "c.yaml"), embedding)}


def without(weights: dict[str, torch.Tensor], *names: str) -> dict[str, torch.Tensor]:
    return {k: v for k, v in weights.items() if k not in names}


def test_a_sound_draft_passes(tmp_path: Path) -> None:
    embed = torch.randn(V, H)
    assert findings(tmp_path, config(), {**tensors(), "embed_tokens.weight": embed}, embed) == set()


@pytest.mark.parametrize(
    ("code", "cfg", "weights"),
    [
        ("EC901", config(), {**tensors(), "fc.weight": torch.zeros(H, 4 * H)}),
        ("EC901", config(), {**tensors(), "fc.weight": torch.zeros(2 * H, 3 * H)}),
        ("EC902", config(), without(tensors(), "lm_head.weight")),
        ("EC902", config(), {**tensors(), "lm_head.weight": torch.zeros(V, H)}),
        ("EC903", config(), without(tensors(), "d2t", "t2d")),
        ("EC905", config(norm_before_residual=True), tensors()),
    ],
    ids=["fc-aux-count", "fc-rows", "no-lm-head", "lm-head-rows", "no-d2t", "norm-flag"],
)
def test_each_fault_is_found(
    tmp_path: Path, code: str, cfg: dict[str, object], weights: dict[str, torch.Tensor]
) -> None:
    assert findings(tmp_path, cfg, weights) == {code}


def test_an_embedding_other_than_the_targets_is_a_warning(tmp_path: Path) -> None:
    write(tmp_path, config(), {**tensors(), "embed_tokens.weight": torch.randn(V, H)})
    found = check_draft(load_contract(tmp_path / "c.yaml"), torch.randn(V, H))
    assert [(f.code, f.severity) for f in found] == [("EC904", "warning")]


def test_the_speculators_layout_loads_and_runs_alike(tmp_path: Path) -> None:
    ids = torch.randint(0, V, (12,), generator=torch.Generator().manual_seed(1))
    aux, embedding = torch.randn(12, 3 * H), torch.randn(V, H)
    runs = []
    for name, prefix in (("a", "midlayer."), ("b", "layers.0.")):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config()))
        save_file(
            {("model." + k if "layers" in k else k): v for k, v in tensors(prefix).items()},
            str(d / "model.safetensors"),
        )
        runs.append(EagleDraft.load(d).chain(aux, ids, embedding, 3))
    assert torch.equal(runs[0], runs[1])
    assert runs[0].shape == (3, 11)
    assert bool((runs[0] % 2 == 0).all())  # draft ids mapped to target ids through d2t


def test_later_steps_see_only_their_own_start(tmp_path: Path) -> None:
    """Chains from every start at once equal each chain run on its prefix alone."""
    d = write(tmp_path, config(), tensors())
    draft = EagleDraft.load(d)
    g = torch.Generator().manual_seed(2)
    ids, aux, embedding = (
        torch.randint(0, V, (10,), generator=g),
        torch.randn(10, 3 * H),
        torch.randn(V, H),
    )
    full = draft.chain(aux, ids, embedding, 3)
    for i in (0, 4, 8):
        alone = draft.chain(aux[: i + 2], ids[: i + 2], embedding, 3)
        assert torch.equal(alone[:, -1], full[:, i])
