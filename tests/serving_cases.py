"""What the resolve, inverse and layout tests share: ``eagle-contract resolve --json`` run and
read, layer names by index, a tiny served contract's text, the resolve command whose last id
SGLang's loop never reaches, and the id lists an engine serves."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from pytest_eagle_contract.engines.base import Engine
from pytest_eagle_contract.layers import Layer


def resolve_json(
    cli: Callable[..., subprocess.CompletedProcess[str]], *args: object
) -> tuple[subprocess.CompletedProcess[str], Any]:
    """``eagle-contract resolve ARGS --json``: the process and its JSON (None where it printed
    nothing); never a traceback."""
    res = cli("resolve", *map(str, args), "--json")
    assert "Traceback" not in res.stderr, res.stderr
    return res, json.loads(res.stdout) if res.stdout.strip() else None


def layer_inputs(*indices: int) -> list[str]:
    """The layers whose inputs ``indices`` name: 0 is the embedding, k is ``residual:k``."""
    return [f"residual:{i}" if i else "embed" for i in indices]


# SGLang 0.5.23's Llama loop captures index id+1: id 60 asks for 61, past 61 layers (EC511)
DROPPED_LAST = (
    *("--engine", "sglang", "--arch", "llama", "--version", "0.5.23", "--num-layers", "61"),
    *("--ids", "2", "30", "60"),
)


def tiny_contract(
    name: str,
    layers: Sequence[str],
    engine: str,
    version: str | None,
    *,
    size: tuple[int, int] = (64, 512),
    shards: str | None = "shards",
    draft: str | None = None,
) -> str:
    """A contract for the tiny Llama target (8 layers; hidden size and vocabulary ``size``)
    training on ``layers`` (SpecForge shards under ``shards``, no format or shards where
    None; ``draft``, indented lines, the draft's keys) and served by ``engine`` at
    ``version`` (no version where None); serving keys may be appended."""
    hidden, vocab = size
    stored = f"  format: specforge\n  shards: {shards}\n" if shards is not None else ""
    slots = "".join(f"    - {{layer: {layer}}}\n" for layer in layers)
    drafted = f"  draft:\n{draft}\n" if draft is not None else ""
    served = f'  version: "{version}"\n' if version is not None else ""
    return (
        f"contract: {name}\nversion: 1\ntarget: {{arch: LlamaForCausalLM, num_hidden_layers: 8, "
        f"hidden_size: {hidden}, vocab_size: {vocab}}}\n"
        f"training:\n{stored}  slots:\n{slots}{drafted}"
        f"serving:\n  engine: {engine}\n{served}"
    )


def served_triples(
    engine: Engine,
    num_layers: int,
    arch: str | None,
    version: str | None,
    id_lists: Iterable[tuple[int, ...]],
    refused: type[Exception],
) -> Iterator[tuple[tuple[int, ...], tuple[Layer, ...]]]:
    """Each id list ``engine`` serves as three layers, with those layers (a list it refuses
    with ``refused`` is skipped)."""
    for ids in id_lists:
        try:
            served = engine.resolve(num_layers, ids, arch, version).layers
        except refused:
            continue
        if len(served) == 3:
            yield ids, served
