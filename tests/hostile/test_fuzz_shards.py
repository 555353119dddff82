"""Seeded fuzzing of shard contents (keys, dtypes, shapes, nesting, containers), in-process
through the planner and the Runner: no exception escapes, every finding has a known code.
``EAGLE_FUZZ_EXAMPLES`` sets the number of examples (``tox -e fuzz`` runs many)."""

from __future__ import annotations

import gzip
import os
import tempfile
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from pytest_eagle_contract.contract.model import parse_contract
from pytest_eagle_contract.errors import ShardReadError
from pytest_eagle_contract.findings import RULES
from pytest_eagle_contract.plan.planner import Runner, plan
from pytest_eagle_contract.shards.inspection import format_report, inspect_shard
from pytest_eagle_contract.shells import demo

EXAMPLES = int(os.environ.get("EAGLE_FUZZ_EXAMPLES", "40"))
TRIED: Counter[str] = Counter()  # inputs tried per class, printed by the last test
CONTRACT = (
    Path(demo.shipped_contract())
    .read_text("utf-8")
    .replace("format: specforge", "format: auto")
    .replace("../eagle-demo/good", "shards")
)
DTYPES = [
    torch.int64,
    torch.int32,
    torch.int8,
    torch.uint8,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.bool,
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.complex64,
]
SPECIALS = [0.0, 1.0, -1.0, 511.0, 512.0, 1e30, float("nan"), float("inf"), float("-inf"), 0.5]
SAFETENSORS_DTYPES = {d for d in DTYPES if d is not torch.complex64}


@st.composite
def tensors(draw: st.DrawFn, rows: bool = False) -> torch.Tensor:
    """Any tensor; with ``rows``, one of [T] (ids and masks, mostly)."""
    dtype = draw(st.sampled_from(DTYPES))
    sizes = st.sampled_from([0, 1, 2, 3, 12, 64, 192])
    shape = [draw(sizes)] if rows else draw(st.lists(sizes, max_size=4))
    if draw(st.booleans()) and len(shape) >= 1:
        shape[-1] = draw(st.sampled_from([0, 64, 128, 192, 256]))
    fill = draw(st.sampled_from(SPECIALS))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = torch.full(shape, fill, dtype=torch.float64)
        if t.numel() and draw(st.booleans()):
            t = t + torch.arange(t.numel(), dtype=torch.float64).reshape(shape)
        t = t.to(dtype)
    TRIED[f"dtype {str(dtype).removeprefix('torch.')}"] += 1
    TRIED[f"{len(shape)}-d"] += 1
    if draw(st.integers(0, 9)) == 0:
        TRIED["requires_grad Parameter"] += 1
        return torch.nn.Parameter(t.float(), requires_grad=True)
    return t


VALUES = st.one_of(
    tensors(),
    tensors(),
    st.lists(st.one_of(tensors(), st.integers(), st.none(), st.text(max_size=3)), max_size=5),
    st.sampled_from([3, "x", None, 1.5]),
    st.dictionaries(st.text(max_size=3), tensors(), max_size=2),
)
IDS = ("ids", "mask")  # keys that hold one value per token
LAYOUTS = [  # each format's keys (docs/formats.md), so most inputs get past detection
    ("input_ids", "loss_mask", "aux_hidden_state", "hidden_state"),
    ("input_ids", "loss_mask", "hidden_states"),
    ("token_ids", "hidden_states", "loss_mask"),
    ("input_ids", "hidden_state", "loss_mask"),
    ("id", "input_ids", "hidden_state", "aux_hidden_states"),  # TensorRT-LLM, in a list
]


@st.composite
def shards(draw: st.DrawFn) -> dict[Any, Any]:
    keys = draw(st.sampled_from(LAYOUTS))
    out: dict[Any, Any] = {
        k: draw(tensors(rows=True) if k.endswith(IDS) and draw(st.booleans()) else VALUES)
        for k in keys
        if draw(st.integers(0, 7))
    }
    if draw(st.integers(0, 4)) == 0:  # a stranger key: a name, or not a string at all
        out[draw(st.one_of(st.text(max_size=6), st.integers(-2, 2)))] = draw(VALUES)
    return out


def _write(folder: Path, shard: dict[Any, Any], container: str) -> Path:
    if container == "safetensors" and all(
        isinstance(k, str) and isinstance(v, torch.Tensor) and v.dtype in SAFETENSORS_DTYPES
        for k, v in shard.items()
    ):
        from safetensors.torch import save_file

        path = folder / "hidden_states" / "hs_0.safetensors"
        path.parent.mkdir()
        save_file({k: v.detach().contiguous() for k, v in shard.items()}, str(path))
        return path
    if container == "gz":
        path = folder / "rows_0-2000" / "data_0.ckpt.gz"
        path.parent.mkdir()
        with gzip.open(path, "wb") as f:
            torch.save(shard, f)
        return path
    path = folder / ("data_0.ckpt" if container == "ckpt" else "data_0.pt")
    torch.save([shard] if container == "list" else shard, path)
    return path


@seed(16)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(shard=shards(), container=st.sampled_from(["ckpt", "pt", "gz", "safetensors", "list"]))
def test_any_shard_contents_end_in_findings_with_known_codes(shard, container):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "shards").mkdir()
        path = _write(root / "shards", shard, container)
        kind = "list in .pt" if container == "list" else path.name.split(".", 1)[1]
        TRIED[f"container {kind}"] += 1
        TRIED["shards"] += 1
        contract = parse_contract(CONTRACT, root / "contract.yaml")
        units = plan(contract, [path], sample=None, checks=["structure", "values", "norms"])
        runner = Runner()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            TRIED["checked (no read error)"] += runner.shard_of(units[-1]).error is None
            for unit in units:
                for f in runner.run(unit):
                    assert f.code in RULES, f
            try:
                format_report(inspect_shard(path))
            except ShardReadError as exc:
                assert exc.code in ("EC001", "EC002", "EC003")
                TRIED[f"read error {exc.code}"] += 1


def test_zz_fuzz_counts():
    """The counts behind the closing note (run with -s to see them)."""
    print("\nfuzz inputs tried per class:", dict(sorted(TRIED.items())))
