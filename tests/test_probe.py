"""eagle-contract probe: a tiny target and a draft distilled from it on CPU, in the test.

The target is random with its attention damped, so its greedy next token is a function of
the current token; the draft sees no token embedding (input_layernorm zero), so it must read
the current token from the aux states: it predicts well only under the layout it was
trained on. The probe's estimate is checked against real greedy speculative decoding.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_eagle_contract.checks.probe import Estimate, estimate, greedy_sequences
from pytest_eagle_contract.layers import Layer
from pytest_eagle_contract.models.draft_model import EagleDraft
from pytest_eagle_contract.models.tiny import TinySpec, capture_canonical, tiny_target

VOCAB, HIDDEN, LAYERS, SEQ, PROMPT = 64, 64, 6, 48, 8
TRAINED = (Layer(1), Layer(3), Layer(5))  # the draft's fc input, in order
DRAFTED = 3  # chain steps, in training and in the probe


def make_target(out: Path) -> Any:
    """A random tiny target whose greedy next token depends on the current token only."""
    model = tiny_target(TinySpec(num_layers=LAYERS, hidden_size=HIDDEN, vocab_size=VOCAB))
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(0.01)
    model.save_pretrained(out, safe_serialization=True)
    return model


def greedy(model: Any, prompts: torch.Tensor, length: int) -> list[torch.Tensor]:
    return greedy_sequences(model, list(prompts), length)


def aux_of(model: Any, ids: torch.Tensor, layers: tuple[Layer, ...]) -> torch.Tensor:
    states = capture_canonical(model, ids)
    return torch.cat([states[layer] for layer in layers], -1)


def distill_draft(model: Any, out: Path, steps: int = 400) -> EagleDraft:
    """A one-layer draft trained on the target's greedy continuations as EAGLE-3 trains
    (``DRAFTED`` steps, each after the first from the draft's own output)."""
    torch.manual_seed(0)
    shapes = {
        "fc.weight": (HIDDEN, 3 * HIDDEN),
        "norm.weight": (HIDDEN,),
        "lm_head.weight": (VOCAB, HIDDEN),
        "midlayer.self_attn.q_proj.weight": (HIDDEN, 2 * HIDDEN),
        "midlayer.self_attn.k_proj.weight": (HIDDEN // 2, 2 * HIDDEN),
        "midlayer.self_attn.v_proj.weight": (HIDDEN // 2, 2 * HIDDEN),
        "midlayer.self_attn.o_proj.weight": (HIDDEN, HIDDEN),
        "midlayer.mlp.gate_proj.weight": (2 * HIDDEN, HIDDEN),
        "midlayer.mlp.up_proj.weight": (2 * HIDDEN, HIDDEN),
        "midlayer.mlp.down_proj.weight": (HIDDEN, 2 * HIDDEN),
        "midlayer.input_layernorm.weight": (HIDDEN,),
        "midlayer.hidden_norm.weight": (HIDDEN,),
        "midlayer.post_attention_layernorm.weight": (HIDDEN,),
    }
    weights = {
        k: (torch.ones(s) if len(s) == 1 else torch.randn(s) / s[1] ** 0.5)
        for k, s in shapes.items()
    }
    weights["midlayer.input_layernorm.weight"].zero_()  # the draft sees the aux states only
    trained = [w.requires_grad_(True) for k, w in weights.items() if "input_layernorm" not in k]
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": HIDDEN,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
        "intermediate_size": 2 * HIDDEN,
        "rms_norm_eps": 1e-6,
        "vocab_size": VOCAB,
        "draft_vocab_size": VOCAB,
        "target_hidden_size": HIDDEN,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [x.index - 1 for x in TRAINED]},
    }
    draft = EagleDraft(out, config, weights)
    embedding = model.model.embed_tokens.weight.detach()
    seqs = greedy(model, torch.randint(0, VOCAB, (32, PROMPT)), SEQ)
    examples = [(aux_of(model, s, TRAINED), s) for s in seqs]
    opt = torch.optim.AdamW(trained, lr=1e-2)
    for step in range(steps):
        aux, ids = examples[step % len(examples)]
        loss = sum(  # the training-time test: later steps from the draft's own output
            torch.nn.functional.cross_entropy(logits[: logits.shape[0] - 1], ids[2 + s :])
            for s, logits in enumerate(draft.unrolled_logits(aux, ids, embedding, DRAFTED))
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    final = {k: v.detach().contiguous() for k, v in weights.items()}
    out.mkdir(parents=True, exist_ok=True)
    from safetensors.torch import save_file

    save_file(final, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config))
    return EagleDraft.load(out)


SHIFTED = (Layer(2), Layer(4), Layer(6))
EMBED_FRONT = (Layer(0), Layer(1), Layer(3))


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny matrices: one thread is many times faster than several on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, one_thread: None
) -> tuple[Path, Path, Any, EagleDraft]:
    root = tmp_path_factory.mktemp("probe")
    torch.manual_seed(0)
    model = make_target(root / "target")
    draft = distill_draft(model, root / "draft")
    return root / "target", root / "draft", model, draft


def _estimates(model: Any, draft: EagleDraft) -> list[Estimate]:
    g = torch.Generator().manual_seed(7)
    seqs = greedy(model, torch.randint(0, VOCAB, (8, PROMPT), generator=g), SEQ)
    layouts = [("trained", TRAINED), ("shifted", SHIFTED), ("embed in front", EMBED_FRONT)]
    return estimate(draft, model, seqs, layouts, steps=3, first=PROMPT - 2)


def speculative_decoding(
    model: Any, draft: EagleDraft, prompt: torch.Tensor, layers: tuple[Layer, ...], steps: int
) -> float:
    """Real greedy chain speculative decoding: the draft drafts from the accepted prefix
    alone, the target verifies, the longest matching prefix plus the target's own token is
    kept. Returns tokens per target forward."""
    embedding = model.model.embed_tokens.weight.detach()
    with torch.no_grad():
        ids = torch.cat([prompt, model(prompt[None]).logits[0, -1:].argmax(-1)])
    forwards, made = 0, 0
    while ids.numel() < SEQ:
        drafts = draft.chain(aux_of(model, ids, layers), ids, embedding, steps)[:, -1]
        with torch.no_grad():
            verify = model(torch.cat([ids, drafts])[None]).logits[0, ids.numel() - 1 :].argmax(-1)
        n = int((drafts == verify[:steps]).long().cumprod(0).sum())
        ids = torch.cat([ids, drafts[:n], verify[n : n + 1]])
        forwards, made = forwards + 1, made + n + 1
    return made / forwards


def test_probe_ranks_layouts(pair: tuple[Path, Path, Any, EagleDraft]) -> None:
    _, _, model, draft = pair
    trained, shifted, front = _estimates(model, draft)
    print(
        "\n"
        + "\n".join(
            f"{e.name}: {e.accept_length:.3f} {e.per_step}" for e in (trained, shifted, front)
        )
    )
    assert trained.accept_length > 1.5
    assert trained.accept_length >= shifted.accept_length > front.accept_length
    assert trained.accept_length - front.accept_length > 0.3


@pytest.mark.parametrize("layers", [TRAINED, SHIFTED, EMBED_FRONT], ids=str)
def test_probe_matches_speculative_decoding(
    pair: tuple[Path, Path, Any, EagleDraft], layers: tuple[Layer, ...]
) -> None:
    _, _, model, draft = pair
    g = torch.Generator().manual_seed(11)
    prompts = torch.randint(0, VOCAB, (4, PROMPT), generator=g)
    seqs = greedy(model, prompts, SEQ)
    (probed,) = estimate(draft, model, seqs, [("x", layers)], steps=3, first=PROMPT - 2)
    measured = sum(speculative_decoding(model, draft, p, layers, 3) for p in prompts) / 4
    assert abs(probed.accept_length - measured) <= 0.1 * measured, (probed, measured)


def test_probe_cli(
    pair: tuple[Path, Path, Any, EagleDraft], capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_eagle_contract.shells.cli import main

    target, draft, _, _ = pair
    code = main(
        [
            "probe",
            "--draft",
            str(draft),
            "--target-model",
            str(target),
            "--engine",
            "vllm",
            "--layout",
            "residual:2",
            "residual:4",
            "residual:6",
            "--sequences",
            "4",
            "--length",
            "40",
            "--prompt",
            "8",
            "--steps",
            "2",
            "--json",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["convention"].startswith("accept_length: tokens per target forward")
    assert [x["layers"] for x in out["layouts"]] == [
        ["embed", "residual:2", "residual:4"],  # vLLM reads ids [0, 2, 4] as hidden_states[k]
        ["residual:2", "residual:4", "residual:6"],
    ]
    assert out["layouts"][0]["name"].startswith("vllm")
    assert out["layouts"][1]["name"] == "layout 1"
    assert all(len(x["per_step"]) == 2 and x["accept_length"] >= 1 for x in out["layouts"])


def _write_contract(root: Path, target: Path, draft: Path, engine: str, floors: str) -> Path:
    version = "  version: '0.5.13'\n" if engine == "sglang" else ""
    path = root / f"{engine}.yaml"
    path.write_text(
        "contract: probe-gate\nversion: 1\n"
        f"target: {{arch: LlamaForCausalLM, num_hidden_layers: {LAYERS}, "
        f"hidden_size: {HIDDEN}, vocab_size: {VOCAB}}}\n"
        "training:\n  format: specforge\n  slots:\n"
        + "".join(f"    - {{layer: {x}}}\n" for x in TRAINED)
        + "    - {layer: final_norm}\n"
        + f"  fc_input: [0, 1, 2]\n  target_slot: 3\nserving:\n  engine: {engine}\n{version}"
        + f"  draft_config: {draft}\n{floors}"
    )
    return path


def test_gate_quotes_the_estimates_and_fails_below_the_floor(
    pair: tuple[Path, Path, Any, EagleDraft], tmp_path: Path, cli: Any
) -> None:
    target, draft, _, _ = pair
    floors = "  min_accept_length: 4.9\n  max_accept_drop: 0.0\n"  # 4 steps: at most 5
    contract = _write_contract(tmp_path, target, draft, "vllm", floors)
    res = cli("check", contract, "--checks", "probe", "--target-model", target)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "EC906 accept-length-below-floor" in res.stdout
    assert "EC907 accept-drop" in res.stdout
    assert "trainer (residual:1, residual:3, residual:5)" in res.stdout
    assert "(embed, residual:2, residual:4)" in res.stdout


def test_gate_passes_where_the_engine_feeds_the_trained_layers(
    pair: tuple[Path, Path, Any, EagleDraft], tmp_path: Path, cli: Any
) -> None:
    target, draft, _, _ = pair
    floors = "  min_accept_length: 1.2\n  max_accept_drop: 0.05\n"
    contract = _write_contract(tmp_path, target, draft, "sglang", floors)
    res = cli("check", contract, "--checks", "probe", "--target-model", target)
    assert res.returncode == 0, res.stdout + res.stderr


def test_probe_check_needs_a_floor(
    pair: tuple[Path, Path, Any, EagleDraft], tmp_path: Path, cli: Any
) -> None:
    target, draft, _, _ = pair
    contract = _write_contract(tmp_path, target, draft, "sglang", "")
    res = cli("check", contract, "--checks", "probe", "--target-model", target)
    assert res.returncode == 2
    assert "serving.min_accept_length or serving.max_accept_drop" in res.stderr


def test_plugin_gets_a_probe_item_per_contract_with_a_floor(
    pair: tuple[Path, Path, Any, EagleDraft], tmp_path: Path, pytester: pytest.Pytester
) -> None:
    target, draft, _, _ = pair
    floors = "  min_accept_length: 3.5\n"
    contract = _write_contract(tmp_path, target, draft, "vllm", floors)
    (tmp_path / "plain").mkdir()
    without = _write_contract(tmp_path / "plain", target, draft, "vllm", "")
    args = ["--co", "-q", "-p", "no:cacheprovider", "--eagle-target-model", str(target)]
    found = pytester.runpytest("--eagle-contract", str(contract), *args).stdout.str()
    assert "::probe" in found
    plain = pytester.runpytest("--eagle-contract", str(without), *args).stdout.str()
    assert "::layout" in plain and "::probe" not in plain
