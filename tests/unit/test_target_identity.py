"""Issue 24 item 4: the serving target against the training target. Twins of a tiny Llama
target made in code: a fake-quantized one (weights rounded to int8 per row) drifts and
says by how much (EC622, a warning); a QuaRot-style one (norm weights folded into the
next linears, then an orthogonal rotation of the hidden basis folded into every weight:
the same logits, other hidden states) fails (EC623); another shape is EC621 and a folder
that cannot be read EC620. A CLI run of ``check --serving-target-model`` end to end."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from pytest_eagle_contract.errors import UsageError
from pytest_eagle_contract.models.identity import check_target_identity
from pytest_eagle_contract.models.tiny import TinySpec, tiny_target

SPEC = TinySpec(num_layers=4, hidden_size=64, vocab_size=256)


def fake_quantized(model, bits: int = 8):
    """Every linear weight rounded to ``bits``-bit integers, one scale per row (RTN)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 and "embed" not in name:
                scale = p.abs().amax(dim=1, keepdim=True) / (2 ** (bits - 1) - 1)
                p.copy_(torch.round(p / scale) * scale)
    return model


def rotated(model, seed: int = 1):
    """QuaRot's computational invariance on a Llama: each RMSNorm's weight folded into the
    linears it feeds, then hidden = hidden @ Q for a random orthogonal Q, folded into the
    embedding, every linear reading the residual (W Q), every one writing it (Q^T W) and
    the lm_head. The logits stay; every hidden state is rotated."""
    g = torch.Generator().manual_seed(seed)
    q = torch.linalg.qr(torch.randn(SPEC.hidden_size, SPEC.hidden_size, generator=g))[0]
    inner = model.model

    def fold(norm, linears):
        for lin in linears:
            lin.weight.mul_(norm.weight)
        norm.weight.fill_(1.0)

    with torch.no_grad():
        for layer in inner.layers:
            attn, mlp = layer.self_attn, layer.mlp
            fold(layer.input_layernorm, [attn.q_proj, attn.k_proj, attn.v_proj])
            fold(layer.post_attention_layernorm, [mlp.gate_proj, mlp.up_proj])
            for lin in (attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj):
                lin.weight.copy_(lin.weight @ q)
            for lin in (attn.o_proj, mlp.down_proj):
                lin.weight.copy_(q.T @ lin.weight)
        fold(inner.norm, [model.lm_head])
        model.lm_head.weight.copy_(model.lm_head.weight @ q)
        inner.embed_tokens.weight.copy_(inner.embed_tokens.weight @ q)
    return model


def save_twins(root: Path) -> dict[str, Path]:
    """The tiny target saved under ``root`` as ``training``, beside its fake-quantized and
    rotated twins (``quantized``, ``rotated``); test_doctor's serving targets too."""
    made = {
        "training": tiny_target(SPEC),
        "quantized": fake_quantized(tiny_target(SPEC)),
        "rotated": rotated(tiny_target(SPEC)),
    }
    for name, model in made.items():
        model.save_pretrained(root / name)
    return {name: root / name for name in made}


@pytest.fixture(scope="module")
def targets(tmp_path_factory) -> dict[str, Path]:
    """The twins, another shape (``wider``) and a byte copy of the target (``copy``)."""
    root = tmp_path_factory.mktemp("targets")
    twins = save_twins(root)
    wider = TinySpec(num_layers=4, hidden_size=96, vocab_size=256)
    tiny_target(wider).save_pretrained(root / "wider")
    shutil.copytree(twins["training"], root / "copy")
    return {**twins, "wider": root / "wider", "copy": root / "copy"}


def test_the_same_checkpoint_is_the_same_target(targets):
    assert check_target_identity(targets["training"], targets["copy"]) == []


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_target_saved_in_half_precision_is_the_same_target(tmp_path, targets, dtype):
    """A float32 target saved as bfloat16 or float16 drifts only by the rounding of its
    weights (3 % at residual:4 for bfloat16 on this target, which amplifies it): what
    every engine serving in bfloat16 does anyway. benchmarks/false_alarms_seams.py
    measured EC622 on every such copy with the 0.001 bound alone."""
    tiny_target(SPEC).to(dtype).save_pretrained(tmp_path / "half")
    assert check_target_identity(targets["training"], tmp_path / "half") == []
    assert check_target_identity(tmp_path / "half", targets["training"]) == []


def test_a_quantized_twin_shows_its_drift_as_a_number(targets):
    (f,) = check_target_identity(targets["training"], targets["quantized"])
    assert (f.code, f.severity) == ("EC622", "warning"), f
    layers = f.extra["layers"]
    assert layers["embed"]["rel_error"] == 0.0  # the embedding was left as it was
    deepest = layers["residual:4"]
    assert 1e-3 < deepest["rel_error"] < 0.1 and deepest["cosine"] > 0.99
    assert "residual:4" in f.found and "relative error" in f.details


def test_a_rotated_twin_fails_though_its_logits_are_the_same(targets):
    from transformers import AutoModelForCausalLM

    ids = torch.arange(1, 17).unsqueeze(0)
    with torch.no_grad():
        a, b = (
            AutoModelForCausalLM.from_pretrained(targets[n])(ids).logits
            for n in ("training", "rotated")
        )
    assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)  # the served output is unchanged
    (f,) = check_target_identity(targets["training"], targets["rotated"], tokens=range(1, 17))
    assert f.code == "EC623" and f.severity == "error", f
    assert all(v["cosine"] < 0.5 for v in f.extra["layers"].values())


def test_the_compared_layers_and_tokens_are_the_callers(targets):
    (f,) = check_target_identity(
        targets["training"], targets["quantized"], layers=["residual:2"], tokens=[5, 6, 7]
    )
    assert set(f.extra["layers"]) == {"residual:2"} and f.extra["tokens"] == 3
    with pytest.raises(UsageError, match="beyond"):
        check_target_identity(targets["training"], targets["copy"], layers=["residual:9"])
    with pytest.raises(UsageError, match="outside"):
        check_target_identity(targets["training"], targets["copy"], tokens=[256])


def test_another_shape_or_an_unreadable_folder_is_a_coded_finding(targets, tmp_path):
    (f,) = check_target_identity(targets["training"], targets["wider"])
    assert f.code == "EC621" and "hidden_size 96" in f.message
    (tmp_path / "config.json").write_text("{not json")
    (f,) = check_target_identity(targets["training"], tmp_path)
    assert f.code == "EC620" and "serving target" in f.message
    (f,) = check_target_identity(tmp_path / "nowhere", targets["training"])
    assert f.code == "EC620" and "training target" in f.message


@pytest.mark.slow
def test_check_compares_the_serving_target_end_to_end(targets, tmp_path, cli):
    contract = tmp_path / "c.yaml"
    contract.write_text(
        "contract: identity\nversion: 1\n"
        "target: {num_hidden_layers: 4, hidden_size: 64, vocab_size: 256}\n"
        f"serving:\n  engine: vllm\n  target_model: {targets['quantized']}\n"
    )
    args = (contract, "--target-model", targets["training"], "--checks", "target-identity")
    res = cli("check", *args)
    assert res.returncode == 0 and "EC622" in res.stdout, res.stdout + res.stderr
    res = cli("check", *args, "--serving-target-model", targets["rotated"])
    assert res.returncode == 1 and "EC623 serving-target-basis" in res.stdout, res.stdout


@pytest.mark.slow
def test_the_plugin_runs_target_identity_as_an_item(targets, pytester):
    (pytester.path / "c.yaml").write_text(
        "contract: identity\nversion: 1\n"
        f"target: {{num_hidden_layers: 4, hidden_size: 64, vocab_size: 256, "
        f"model: {targets['training']}}}\n"
        f"serving:\n  engine: vllm\n  target_model: {targets['copy']}\n"
    )
    args = ["-p", "no:cacheprovider", "-q", "--eagle-contract", "c.yaml", "--eagle-checks"]
    res = pytester.runpytest_subprocess(  # the option overrides serving.target_model
        *args, "target-identity", "--eagle-serving-target-model", str(targets["rotated"])
    )
    res.assert_outcomes(failed=1)
    assert "EC623" in res.stdout.str()


@pytest.mark.slow
def test_every_hostile_model_folder_on_either_side_is_a_finding(targets, tmp_path):
    """tests/hostile/test_hostile_models.py's folders as the serving target and as the training
    target: a coded finding (or none, where only the lm_head is broken: the compared
    states do not use it), never an exception."""
    import test_hostile_models as hm

    base = tmp_path / "base"
    tiny_target(hm.SPEC).save_pretrained(base)
    changes = {
        **{k: v[0] for k, v in hm.CASES.items()},
        **{k: v[0] for k, v in hm.OPEN_CASES.items()},
    }
    for i, (name, change) in enumerate(changes.items()):
        folder = tmp_path / f"{i:03d}"
        shutil.copytree(base, folder)
        change(folder)
        for found in (check_target_identity(base, folder), check_target_identity(folder, base)):
            codes = {f.code for f in found}
            assert codes <= {"EC620", "EC621"}, (name, found)
            assert codes or name == "head-integers", name
