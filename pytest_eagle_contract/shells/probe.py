"""``eagle-contract probe``: what a layout mismatch costs, in accepted tokens, offline.

On the target's own greedy continuations of prompts, the draft drafts a chain of K tokens
from every position, the first step from the aux states a layout names, later steps from
its own pre-norm output (as SGLang and vLLM run it); the target accepts the longest prefix
that equals its greedy tokens. See docs/probe.md.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..layers import Layer
from .exit_codes import EXIT_OK

if TYPE_CHECKING:
    import torch

    from ..contract.model import Contract
    from ..models.draft_model import EagleDraft

CONVENTION = (
    "accept_length: tokens per target forward, counting the target's own token "
    "(1 + accepted draft tokens, greedy chain drafting); per_step[s]: the share of "
    "chains reaching step s+1 whose step s+1 token is accepted"
)


@dataclass(frozen=True)
class Estimate:
    name: str
    layers: tuple[Layer, ...]
    accept_length: float
    per_step: tuple[float, ...]
    chains: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "layers": [str(x) for x in self.layers],
            "accept_length": round(self.accept_length, 4),
            "per_step": [round(p, 4) for p in self.per_step],
            "chains": self.chains,
        }


def estimate(
    draft: EagleDraft,
    model: Any,
    sequences: list[torch.Tensor],
    layouts: list[tuple[str, tuple[Layer, ...]]],
    steps: int,
    first: int,
) -> list[Estimate]:
    """Acceptance under each layout, on greedy ``sequences`` (chains start at ``first``)."""
    import torch

    from ..models.draft_model import accepted
    from ..models.tiny import capture_canonical

    embedding = model.get_input_embeddings().weight.detach()
    head = model.get_output_embeddings().weight.detach()
    counts: dict[str, list[torch.Tensor]] = {name: [] for name, _ in layouts}
    for ids in sequences:
        states = capture_canonical(model, ids)
        for name, layers in layouts:
            aux = torch.cat([states[layer] for layer in layers], -1)
            drafts = draft.chain(aux, ids, embedding, steps, lm_head=head)
            counts[name].append(accepted(drafts, ids, first))
    out = []
    for name, layers in layouts:
        a = torch.cat(counts[name])
        reached = [int((a >= s).sum()) for s in range(steps + 1)]
        per_step = tuple(reached[s + 1] / reached[s] if reached[s] else 0.0 for s in range(steps))
        mean = float(a.float().mean()) if a.numel() else 0.0
        out.append(Estimate(name, layers, 1.0 + mean, per_step, int(a.numel())))
    return out


def greedy_sequences(model: Any, prompts: list[torch.Tensor], length: int) -> list[torch.Tensor]:
    """The target's greedy continuation of each prompt, to ``length`` tokens in all."""
    import torch

    out = []
    with torch.no_grad():
        for prompt in prompts:
            new = max(length - prompt.numel(), 1)
            seq = model.generate(
                prompt[None],
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=0,
            )
            out.append(seq[0])
    return out


def layouts_of(
    contract: Contract | None,
    draft_dir: Path,
    num_layers: int,
    arch: str | None,
    given: list[list[str]],
    engine: str,
) -> list[tuple[str, tuple[Layer, ...]]]:
    """The trainer's layout and each engine version's (deduplicated), else the draft
    config's own ids under ``engine``; then the ``--layout`` ones."""
    from ..engines.resolve import get_engine, resolve, serving_ids
    from ..errors import Unservable
    from ..models.draft import read_draft_config

    found: dict[tuple[Layer, ...], str] = {}
    if contract is not None and contract.training is not None:
        t = contract.training
        found[tuple(t.slots[i].layer for i in t.fc_input)] = "trainer"
    serving = contract.serving if contract is not None else None
    draft = read_draft_config(draft_dir)
    name = serving.engine if serving is not None else engine
    spec = serving.version if serving is not None else None
    ids = serving_ids(serving, draft) if serving is not None else get_engine(name).draft_ids(draft)
    if serving is not None and contract is not None:
        arch = serving.arch or contract.target.arch or arch
    served: dict[tuple[Layer, ...], list[str]] = {}
    for version in get_engine(name).versions(spec):
        try:
            layers = resolve(name, num_layers, ids, arch, version).layers
        except Unservable:
            continue
        served.setdefault(layers, []).append(version or "")
    for layers, versions in served.items():
        label = versions[0] if len(versions) == 1 else f"{versions[0]}..{versions[-1]}"
        found.setdefault(layers, f"{name} {label}".strip())
    for i, names in enumerate(given, 1):
        try:
            layers = tuple(Layer.parse(n) for n in names)
        except ValueError as exc:
            raise UsageError(f"--layout {' '.join(names)}: {exc}") from None
        found.setdefault(layers, f"layout {i}")
    return [(label, layers) for layers, label in found.items()]


def _prompts(
    contract: Contract | None, paths: list[Path], n: int, size: int, vocab: int
) -> list[torch.Tensor]:
    """Prompts from the shards' input_ids, else random ids (seeded)."""
    import torch

    from ..shards.discovery import DEFAULT_SAMPLE, shard_paths
    from ..shards.shard import Shard

    files: list[Path] = []
    if (
        contract is not None
        and contract.training is not None
        and (paths or contract.training.shards)
    ):
        files = [p for p, _ in shard_paths(contract, paths or None, DEFAULT_SAMPLE, 0)]
    elif paths:
        files = paths
    prompts = []
    for path in files[:n]:
        ids = Shard.load(path, path.name, "auto", None).input_ids
        if ids is not None and ids.numel() >= size:
            prompts.append(ids[:size].long())
    g = torch.Generator().manual_seed(0)
    while len(prompts) < n:
        prompts.append(torch.randint(0, vocab, (size,), generator=g))
    return prompts


def render(estimates: list[Estimate]) -> str:
    from ..tables import table

    base = estimates[0].accept_length if estimates else 0.0
    steps = len(estimates[0].per_step) if estimates else 0
    header = ["layout", "layers", "accept", "drop", *(f"step {s + 1}" for s in range(steps))]
    rows = [
        [
            e.name,
            ", ".join(map(str, e.layers)),
            f"{e.accept_length:.3f}",
            "" if i == 0 else f"{(e.accept_length - base) / base:+.1%}",
            *(f"{p:.3f}" for p in e.per_step),
        ]
        for i, e in enumerate(estimates)
    ]
    return table(header, rows, right=tuple(range(2, 4 + steps))) + "\n" + CONVENTION


def probe(args: argparse.Namespace) -> int:
    from ..contract.model import load_contract
    from ..models.draft_model import EagleDraft
    from ..models.target import TargetModel
    from ..render import to_json

    paths: list[Path] = list(args.paths)
    contract = None
    if paths and paths[0].suffix in (".yaml", ".yml"):
        contract = load_contract(paths.pop(0))
    serving = contract.serving if contract is not None else None
    draft_dir = args.draft or (
        serving.draft_config.parent
        if serving is not None and serving.draft_config is not None
        else None
    )
    target_dir = args.target_model or (contract.target.model if contract else None)
    if draft_dir is None or target_dir is None:
        raise UsageError(
            "probe needs --draft DIR and --target-model DIR (or a contract's "
            "serving.draft_config and target.model)"
        )
    target = TargetModel.open(target_dir)
    model = target.module
    layouts = layouts_of(
        contract, draft_dir, target.num_layers, target.arch, args.layout or [], args.engine
    )
    prompts = _prompts(contract, paths, args.sequences, args.prompt, target.vocab_size or 2)
    sequences = greedy_sequences(model, prompts, args.length)
    draft = EagleDraft.load(draft_dir)
    estimates = estimate(draft, model, sequences, layouts, args.steps, args.prompt - 2)
    if args.json:
        print(to_json({"convention": CONVENTION, "layouts": [e.to_dict() for e in estimates]}))
    else:
        print(render(estimates))
    return EXIT_OK


def add_parser(sub: Any) -> None:
    """The ``probe`` subcommand's arguments."""
    from ..engines.resolve import ENGINES

    prb = sub.add_parser(
        "probe",
        help="estimate the draft's acceptance length under the trained and the served aux layouts",
    )
    prb.add_argument(
        "paths",
        type=Path,
        nargs="*",
        metavar="[CONTRACT] PATH",
        help="a contract (.yaml) first, then shard files for prompts",
    )
    prb.add_argument("--draft", type=Path, metavar="DIR", help="the EAGLE-3 draft folder")
    prb.add_argument("--target-model", type=Path, metavar="DIR")
    prb.add_argument(
        "--layout",
        nargs="+",
        action="append",
        metavar="L",
        help="another layout to probe, in canonical layers (repeatable)",
    )
    prb.add_argument(
        "--engine",
        choices=ENGINES,
        default="sglang",
        help="without a contract: the engine whose reading of the draft config's "
        "ids gives the served layout (default sglang)",
    )
    prb.add_argument("--steps", type=int, default=4, metavar="K", help="chain length")
    prb.add_argument("--sequences", type=int, default=16, metavar="N")
    prb.add_argument("--length", type=int, default=128, help="tokens per sequence")
    prb.add_argument("--prompt", type=int, default=16, help="prompt tokens per sequence")
    prb.add_argument("--json", action="store_true", help="print one JSON object")
