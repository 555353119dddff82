"""``eagle-contract probe``: what a layout mismatch costs, in accepted tokens, offline.

The probe itself lives in :mod:`..models.acceptance` (the gate's ``probe`` family runs it too);
this is the command: its arguments, its table and its JSON. See docs/probe.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .args import add_print_json, add_target_model
from .exit_codes import EXIT_FINDINGS, EXIT_OK

if TYPE_CHECKING:
    from ..contract.model import Contract
    from ..models.acceptance import Estimate, TargetMismatch, ThinkingSplit


def render(estimates: list[Estimate]) -> str:
    from ..models.acceptance import CONVENTION
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
    return table(header, rows, right=tuple(range(2, 4 + steps))) + "\n" + wrapped(CONVENTION)


def wrapped(text: str) -> str:
    """Prose the CLI prints, wrapped at render.WIDTH (the JSON keeps it on one line)."""
    import textwrap

    from ..render import WIDTH

    return "\n".join(textwrap.wrap(text, WIDTH, break_long_words=False, break_on_hyphens=False))


def probe(args: argparse.Namespace) -> int:
    import torch

    from ..contract.model import load_contract
    from ..models.acceptance import (
        CONVENTION,
        PAST,
        Chains,
        TargetMismatch,
        draft_dir,
        greedy_sequences,
        layouts_of,
        prompts,
        shard_ids,
    )
    from ..models.draft_model import EagleDraft
    from ..models.target import TargetModel
    from ..render import to_json
    from .progress import phase

    paths: list[Path] = list(args.paths)
    contract = None
    if paths and paths[0].suffix in (".yaml", ".yml"):
        contract = load_contract(paths.pop(0))
    serving = contract.serving if contract is not None else None
    draft_path = args.draft or (serving.draft_config if serving is not None else None)
    target_dir = args.target_model or (contract.target.model if contract else None)
    if draft_path is None or target_dir is None:
        raise UsageError(
            "probe needs --draft DIR and --target-model DIR (or a contract's "
            "serving.draft_config and target.model)"
        )
    for name in ("steps", "sequences", "length", "prompt"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be at least 1")
    if args.length < args.prompt + args.steps + 2:
        raise UsageError("--length must exceed --prompt by more than --steps + 1")
    think = _think_ids(contract) if args.by_thinking else None
    target = TargetModel.open(target_dir)
    folder = draft_dir(draft_path)
    draft = EagleDraft.load(folder)  # a draft that cannot run is refused before the target
    with phase("loading the target"):
        model = target.module
    if torch.cuda.is_available():
        model = model.to("cuda")
    layouts = layouts_of(
        contract, folder, target.num_layers, target.arch, args.layout or [], args.engine
    )
    chains = Chains(draft, model, layouts, args.steps)
    chains.refuse_unfit(target.hidden_size)
    try:
        starts = prompts(contract, paths, args.sequences, args.prompt, target)
    except TargetMismatch as exc:  # another model's shards: a finding, not random prompts
        return _mismatch(exc, contract, args.json)
    with phase(f"generating {len(starts)} sequences with the target"):
        sequences = greedy_sequences(model, starts, args.length)
    split = None
    with phase(f"drafting {args.steps}-step chains under {len(layouts)} layout(s)"):
        if think is None:
            estimates = chains.estimates(sequences, args.prompt - 2)
        else:
            shards = shard_ids(contract, paths, args.sequences, target)
            new = args.length - args.prompt
            estimates, split = chains.by_thinking(
                sequences, args.prompt - 2, shards, think, args.prompt, new
            )
    if args.long is not None:
        limit, past = draft.max_positions, args.long or PAST
        if past < args.steps + 2:
            raise UsageError(f"--long must exceed --steps + 1 ({args.steps + 1})")
        if target.max_positions is not None and target.max_positions < limit + past:
            raise UsageError(
                f"--long: the target serves {target.max_positions} positions, the draft's "
                f"max_position_embeddings is {limit}: no context passes it by {past}"
            )
        starts = prompts(contract, paths, args.sequences, limit, target)
        with phase(f"probing past position {limit}"):
            estimates += chains.long_bucket(starts, past)
    if split is not None:
        estimates += split.estimates
    if args.json:
        out: dict[str, Any] = {"convention": CONVENTION}
        out["layouts"] = [e.to_dict() for e in estimates]
        if split is not None:
            out["thinking"] = split.to_dict()
        print(to_json(out))
    else:
        print(render(estimates))
        if split is not None:
            print(_thinking_line(split))
    return EXIT_OK


def _mismatch(exc: TargetMismatch, contract: Contract | None, json: bool) -> int:
    """EC625 printed as a finding (text or the JSON's ``findings``), no estimates: exit 1."""
    from ..findings import finding
    from ..models.acceptance import CONVENTION
    from ..render import format_short, to_json

    found = finding(
        exc.code,
        exc.message,
        contract=contract,
        key="target.model" if contract is not None else "",
        file=str(exc.path),
        expected=exc.expected,
        found=exc.found,
        hint=exc.hint,
    )
    if json:
        print(to_json({"convention": CONVENTION, "layouts": [], "findings": [found.to_dict()]}))
    else:  # the verdict first
        print(f"FAILED: 1 finding(s) [{found.code}]: no estimate on another model's shards")
        print(format_short([found]))
    return EXIT_FINDINGS


def _think_ids(contract: Contract | None) -> tuple[int, int]:
    spec = contract.tokenizer if contract is not None else None
    if spec is None or spec.think_token_ids is None:
        raise UsageError(
            "--by-thinking needs a contract whose tokenizer section names think_token_ids "
            "(eagle-contract infer --tokenizer DIR drafts it)"
        )
    return spec.think_token_ids


def _thinking_line(split: ThinkingSplit) -> str:
    """What the thinking split counted, or why it has no rows."""
    ids = list(split.think_token_ids)
    if split.note is not None:
        return f"thinking (think ids {ids}): {split.note}"
    return (
        f"thinking (think ids {ids}): {split.with_thinking} of {split.shards} shards hold a "
        f"filled think block; chains: {split.chains['thinking']} thinking, "
        f"{split.chains['no-thinking']} no-thinking"
    )


def add_parser(sub: Any) -> None:
    """The ``probe`` subcommand's arguments."""
    from ..engines.names import SERVING_ENGINE_NAMES

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
    add_target_model(prb, "HF model directory of the target (default: target.model)")
    prb.add_argument(
        "--layout",
        nargs="+",
        action="append",
        metavar="L",
        help="another layout to probe, in canonical layers (repeatable)",
    )
    prb.add_argument(
        "--engine",
        choices=SERVING_ENGINE_NAMES,
        default="sglang",
        help="without a contract: the engine whose reading of the draft config's "
        "ids gives the served layout (default sglang)",
    )
    prb.add_argument("--steps", type=int, default=4, metavar="K", help="chain length")
    prb.add_argument(
        "--sequences", type=int, default=16, metavar="N", help="prompts probed (default: 16)"
    )
    prb.add_argument("--length", type=int, default=128, help="tokens per sequence")
    prb.add_argument("--prompt", type=int, default=16, help="prompt tokens per sequence")
    prb.add_argument(
        "--long",
        type=int,
        nargs="?",
        const=0,  # the default: models.acceptance.PAST
        metavar="N",
        help="also probe each layout past the draft's max_position_embeddings M: prompts of M "
        "tokens continued N more (default 32), the draft's RoPE clamped at M as an engine "
        "sizing it from the draft's config does (rows '<layout> @ pos>=M')",
    )
    prb.add_argument(
        "--by-thinking",
        action="store_true",
        help="also split each layout's chains by whether they draft inside a think block "
        "(between the contract's tokenizer.think_token_ids), adding prompts cut inside each "
        "shard's first filled think block (rows '<layout> @ thinking' and "
        "'<layout> @ no-thinking'); shards with no filled block: a note instead",
    )
    add_print_json(prb)
