"""Shard sets from a tiny real transformer, good and with each real pipeline bug.

The target is a random-weight Llama (8 layers, H=64, vocab 512) built by
``pytest_eagle_contract.models.tiny``; its states are captured per canonical layer and
written in each format's exact layout by ``pytest_eagle_contract.shards.writing``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from pytest_eagle_contract.layers import Layer
from pytest_eagle_contract.models.reference import capture_canonical
from pytest_eagle_contract.models.tiny import TinySpec, tiny_target
from pytest_eagle_contract.shards.writing import save, shard_dict, shard_name, write_data_config

SPEC = TinySpec()
L, H, VOCAB = SPEC.num_layers, SPEC.hidden_size, SPEC.vocab_size

# What each trainer's defaults capture on the tiny target (docs/layers.md).
PIPELINES: dict[str, list[Layer]] = {
    "specforge": [Layer(2), Layer(L // 2), Layer(L - 3), Layer(-1)],
    "speculators-v1": [Layer(3), Layer(L // 2 + 1), Layer(L - 2), Layer(L)],
    "speculators": [Layer(2), Layer(L // 2), Layer(L - 3), Layer(L)],
    "eagle-legacy": [Layer(-1)],
}
DTYPES = {"eagle-legacy": torch.float16}


@dataclass
class Record:
    input_ids: torch.Tensor
    loss_mask: torch.Tensor
    states: dict[Layer, torch.Tensor]


_model: torch.nn.Module | None = None


def record(seed: int, tokens: int | None = None) -> Record:
    global _model
    if _model is None:
        _model = tiny_target(SPEC)
    g = torch.Generator().manual_seed(1000 + seed)
    t = tokens or int(torch.randint(60, 300, (1,), generator=g))
    ids = torch.randint(0, VOCAB, (t,), generator=g)
    mask = torch.ones(t, dtype=torch.long)
    mask[: t // 3] = 0
    return Record(ids, mask, capture_canonical(_model, ids))


def slots_of(rec: Record, layers: list[Layer], dtype: torch.dtype) -> list[torch.Tensor]:
    return [rec.states[layer].to(dtype) for layer in layers]


def write_good(root: Path, fmt: str, seeds: range) -> list[Path]:
    layers, dtype = PIPELINES[fmt], DTYPES.get(fmt, torch.bfloat16)
    if fmt == "speculators-v1":
        write_data_config(root, [layer.index - 1 for layer in layers], H)
    paths = []
    for i in seeds:
        rec = record(i)
        data = shard_dict(fmt, rec.input_ids, rec.loss_mask, slots_of(rec, layers, dtype))
        paths.append(save(root / shard_name(fmt, i), data))
    return paths


def _swap(layers: list[Layer]) -> list[Layer]:
    return [layers[1], layers[0], *layers[2:]]


def _front(layers: list[Layer]) -> list[Layer]:
    return [Layer(0), *layers[:-2], layers[-1]] if len(layers) > 1 else [Layer(0)]


def _shift(layers: list[Layer]) -> list[Layer]:
    if len(layers) == 1:
        return [Layer(L)]  # the pre-norm twin of the post-norm target
    return [Layer(x.index + 1) for x in layers[:-1]] + [layers[-1]]


# mutation name -> (layers transform, dict transform, the code it must raise)
Mutation = tuple[
    Callable[[list[Layer]], list[Layer]] | None, Callable[[dict, str], None] | None, str
]


def _cast16(d: dict, fmt: str) -> None:
    for k, v in d.items():
        if isinstance(v, list):
            d[k] = [x.to(torch.float16) for x in v]
        elif v.is_floating_point():
            d[k] = v.to(torch.float16 if v.dtype != torch.float16 else torch.float32)


def _long_mask(d: dict, fmt: str) -> None:
    d["loss_mask"] = torch.cat([d["loss_mask"], torch.ones(52, dtype=torch.long)])


def _nan(d: dict, fmt: str) -> None:
    key = next(k for k in ("hidden_states", "aux_hidden_state", "hidden_state") if k in d)
    value = d[key][0] if isinstance(d[key], list) else d[key]
    value.view(-1)[7] = float("nan")


def _missing(d: dict, fmt: str) -> None:
    del d["token_ids" if fmt == "speculators" else "input_ids"]


def _vocab(d: dict, fmt: str) -> None:
    key = "token_ids" if fmt == "speculators" else "input_ids"
    d[key] = d[key].clone()
    d[key][5] = VOCAB + 3


def _width(d: dict, fmt: str) -> None:
    if fmt == "specforge":
        d["aux_hidden_state"] = d["aux_hidden_state"][..., :-8].contiguous()
    elif fmt == "speculators-v1":
        d["hidden_states"][1] = d["hidden_states"][1][:, :-8].contiguous()
    elif fmt == "speculators":
        d["hidden_states"] = d["hidden_states"][..., :-8].contiguous()
    else:
        d["hidden_state"] = d["hidden_state"][:, :-8].contiguous()


def _count(layers: list[Layer]) -> list[Layer]:
    return layers[1:] if len(layers) > 2 else [*layers, Layer(L)]


MUTATIONS: dict[str, Mutation] = {
    "fp16": (None, _cast16, "EC201"),
    "long_mask": (None, _long_mask, "EC202"),
    "nan": (None, _nan, "EC304"),
    "missing_key": (None, _missing, "EC101"),
    "out_of_vocab": (None, _vocab, "EC301"),
    "wrong_width": (None, _width, "EC203"),
    "truncated": (None, None, "EC002"),
    "slot_count": (_count, None, "EC204"),
    "shifted": (_shift, None, "EC401"),
    "swapped": (_swap, None, "EC401"),
    "embed_front": (_front, None, "EC401"),
}


def write_mutants(root: Path, fmt: str, seed: int = 500) -> dict[str, Path]:
    """One shard per mutation that applies to the format; name -> path."""
    layers, dtype = PIPELINES[fmt], DTYPES.get(fmt, torch.bfloat16)
    out = {}
    for i, (name, (relayer, edit, _code)) in enumerate(MUTATIONS.items()):
        if name in ("swapped", "slot_count") and len(layers) == 1:
            continue  # one state: nothing to swap, and the format holds exactly one
        rec = record(seed + i)
        chosen = relayer(layers) if relayer else layers
        if fmt == "specforge" and name == "slot_count":
            chosen = [*layers[:-2], layers[-1]]  # two aux states instead of three
        data = shard_dict(fmt, rec.input_ids, rec.loss_mask, slots_of(rec, chosen, dtype))
        if edit:
            edit(data, fmt)
        path = save(root / name / shard_name(fmt, seed + i), data)
        if name == "truncated":
            blob = path.read_bytes()
            path.write_bytes(blob[: len(blob) * 2 // 3])
        out[name] = path
    return out
