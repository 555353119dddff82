"""The built-in demo: a tiny real transformer, shards captured the way SGLang would, and
the contract gate run on a good set and on a set carrying the real bug.

    eagle-contract demo [-o DIR]

It writes, under DIR, the two shard sets, the target's weights and the demo's contract
(``demo-tiny-llama-eagle3.yaml``, its shard path relative to itself, with the schema its
first line names), so docs/first-contract.md can be followed anywhere; it ends with the
next command to run.

The target is a random-weight Llama (8 layers, H=64, no download). SpecForge prepares
shards through SGLang: its default aux ids [1, L//2-1, L-4] get SGLang's +1, so the fc
input is cat(residual:2, residual:4, residual:5) and the target is the post-norm state.
The buggy set puts the embedding in front of the fc input, as in the real Kimi-K2.5
incident: cat(embed, residual:2, residual:4).

What the bug costs is probed on a target that predicts (the random one accepts about 1.07
tokens per forward under any layout): a tiny Llama of the same depth trained for a few
seconds on a structured corpus (``models.trained``), with a draft distilled on the buggy
set's layout, probed under that layout and under what SGLang feeds.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from ..layers import Layer
from ..models.tiny import TinySpec

if TYPE_CHECKING:
    from ..models.acceptance import Estimate

SPEC = TinySpec(arch="llama", num_layers=8, hidden_size=64, vocab_size=512, seed=0)
PROBE_SPEC = TinySpec(arch="llama", num_layers=8, hidden_size=64, vocab_size=64, seed=0)
GOOD = [Layer(2), Layer(4), Layer(5), Layer(-1)]
BUGGY = [Layer(0), Layer(2), Layer(4), Layer(-1)]
SHARDS = 12
CONTRACT_NAME = "demo-tiny-llama-eagle3.yaml"
PROBE_STEPS = 3  # chain steps, in the draft's training and in the probe


def write_demo_shards(
    out: Path,
    shards: int = SHARDS,
    save_target: bool = False,
) -> tuple[Path, Path]:
    """Write the good and the buggy SpecForge shard sets under ``out``; deterministic.

    With ``save_target`` the tiny target is saved too, as an HF directory ``out/target``.
    """
    import torch

    from ..models.reference import capture_canonical
    from ..models.tiny import tiny_target
    from ..shards.writing import write_shard

    model = tiny_target(SPEC)
    if save_target:
        from ..models.quiet import no_progress_bars

        with no_progress_bars():  # transformers' "Writing model shards" bar
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


SCHEMA_NAME = "contract-v1.schema.json"  # beside the contract, as `infer -o` writes it
SHIPPED_SHARDS = "../eagle-demo/good"  # the shipped copy's path, from contracts/


def contract_text() -> str:
    """The shipped contract as written beside the demo's shards: its shard path is the
    folder beside it, and its first line names the schema copy beside it."""
    lines = shipped_contract().read_text("utf-8").splitlines(keepends=True)
    assert lines[0].startswith("# yaml-language-server: $schema=")
    text = f"# yaml-language-server: $schema={SCHEMA_NAME}\n" + "".join(lines[1:])
    assert text.count(f"shards: {SHIPPED_SHARDS} ") == 1
    pad = " " * (len(SHIPPED_SHARDS) - len("good"))  # the comment stays where it was
    return text.replace(f"shards: {SHIPPED_SHARDS} ", f"shards: good{pad} ", 1)


def next_command(out: Path) -> str:
    """What to run after the demo: step 2 of docs/first-contract.md on the demo's output."""
    import shlex

    good, target = shlex.quote(str(out / "good")), shlex.quote(str(out / "target"))
    return f"eagle-contract infer {good} --target-model {target} -o contracts/mine.yaml"


def shipped_contract() -> Path:
    """The demo contract, shipped in the package (a test keeps it equal to the checkout's
    contracts/demo-tiny-llama-eagle3.yaml, the copy users read)."""
    return Path(str(resources.files(__package__).joinpath("data", CONTRACT_NAME)))


def probe_buggy(out: Path) -> list[Estimate]:
    """The buggy set's estimated acceptance under its own layout (first), then under each
    layout SGLang feeds for the shipped contract; the pair is saved under ``out``."""
    import dataclasses

    import torch

    from ..contract.model import load_contract
    from ..models.acceptance import estimate, greedy_sequences, layouts_of
    from ..models.trained import corpus, distill_draft, trained_target

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is faster, and deterministic
    try:
        model = trained_target(PROBE_SPEC)
        from ..models.quiet import no_progress_bars

        with no_progress_bars():
            model.save_pretrained(out / "target", safe_serialization=True)
        own = tuple(BUGGY[:-1])
        contract = load_contract(shipped_contract())
        assert contract.serving is not None  # the shipped contract serves with SGLang
        ids = list(contract.serving.aux_layer_ids or ())
        draft = distill_draft(model, own, ids, out / "draft", chain=PROBE_STEPS)
        served = layouts_of(
            dataclasses.replace(contract, training=None),  # served layouts only
            out / "draft",
            PROBE_SPEC.num_layers,
            contract.target.arch,
            [],
            "sglang",
        )
        prompts = corpus(8, 8, PROBE_SPEC.vocab_size, torch.Generator().manual_seed(7))
        sequences = greedy_sequences(model, list(prompts), 48)
        layouts = [("embed-in-front", own), *served]
        return estimate(draft, model, sequences, layouts, PROBE_STEPS, first=6)
    finally:
        torch.set_num_threads(threads)


def probe_text(out: Path) -> str:
    """The demo's probe step, as printed: what SGLang's layout costs the buggy set's draft."""
    from .probe import render, wrapped

    estimates = probe_buggy(out)
    own = estimates[0].accept_length
    lines = [
        "\n== what the bug costs: the acceptance probe (eagle-contract probe) ==",
        f"  {out}: the random target accepts about 1.07 tokens per forward under any layout,",
        "  so a tiny Llama of the same depth trained briefly on a structured corpus, and a",
        f"  {PROBE_STEPS}-step draft distilled from it on the buggy set's layout",
        render(estimates),
    ]
    for e in estimates[1:]:
        lost = (own - e.accept_length) / own
        lines.append(
            wrapped(
                f"served by {e.name}, the buggy set's draft accepts {e.accept_length:.2f} "
                f"tokens per forward, {own:.2f} on its own layout: {lost:.0%} less"
            )
        )
    return "\n".join(lines)
