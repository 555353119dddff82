"""The built-in demo: a tiny real transformer, shards captured the way SGLang would, and
the contract gate run on a good set and on a set carrying the real bug.

    eagle-contract demo [--out DIR]

The target is a random-weight Llama (8 layers, H=64, no download). SpecForge prepares
shards through SGLang: its default aux ids [1, L//2-1, L-4] get SGLang's +1, so the fc
input is cat(residual:2, residual:4, residual:5) and the target is the post-norm state.
The buggy set puts the embedding in front of the fc input, as in the real Kimi-K2.5
incident: cat(embed, residual:2, residual:4).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from ..layers import Layer
from ..models.tiny import TinySpec

SPEC = TinySpec(arch="llama", num_layers=8, hidden_size=64, vocab_size=512, seed=0)
GOOD = [Layer(2), Layer(4), Layer(5), Layer(-1)]
BUGGY = [Layer(0), Layer(2), Layer(4), Layer(-1)]
SHARDS = 12
CONTRACT_NAME = "demo-tiny-llama-eagle3.yaml"


def write_demo_shards(
    out: Path,
    shards: int = SHARDS,
    save_target: bool = False,
) -> tuple[Path, Path]:
    """Write the good and the buggy SpecForge shard sets under ``out``; deterministic.

    With ``save_target`` the tiny target is saved too, as an HF directory ``out/target``.
    """
    import torch

    from ..models.tiny import capture_canonical, tiny_target
    from ..shards.writing import write_shard

    model = tiny_target(SPEC)
    if save_target:
        model.save_pretrained(out / "target")
    good, buggy = out / "good", out / "embed-in-front"
    g = torch.Generator().manual_seed(SPEC.seed + 1)
    for i in range(shards):
        tokens = int(torch.randint(64, 320, (1,), generator=g))
        ids = torch.randint(0, SPEC.vocab_size, (tokens,), generator=g)
        mask = torch.ones(tokens, dtype=torch.long)
        mask[: tokens // 3] = 0  # the prompt; the response trains
        states = capture_canonical(model, ids)
        for root, layers in ((good, GOOD), (buggy, BUGGY)):
            slots = [states[layer].to(torch.bfloat16) for layer in layers]
            write_shard(root, "specforge", i, ids, mask, slots)
    return good, buggy


def shipped_contract() -> Path:
    """The demo contract, shipped in the package (a test keeps it equal to the checkout's
    contracts/demo-tiny-llama-eagle3.yaml, the copy users read)."""
    return Path(str(resources.files(__package__).joinpath("data", CONTRACT_NAME)))
