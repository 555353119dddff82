"""Hostile capture files (issue 16): wrong types and garbage in the metadata, odd tensors,
huge declared sizes, truncations, things that are not files. Each becomes an EC707 finding
for that file (the run goes on) or a valid capture, never another exception; the CLI child
runs under a 3 GiB address-space limit. Seeded Hypothesis: EAGLE_FUZZ_EXAMPLES sets how
many examples each fuzz test tries (default 40)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import fuzz_settings, hostile_values, run_cli
from hypothesis import given
from hypothesis import strategies as st
from safetensors.torch import save_file

from pytest_eagle_contract.capture.compare import verify_against_capture
from pytest_eagle_contract.capture.files import (
    AUX_KEY,
    IDS_KEY,
    META_KEY,
    CaptureMeta,
    load_captures,
    read_capture,
    write_capture,
)
from pytest_eagle_contract.contract.model import Contract, load_contract
from pytest_eagle_contract.errors import CaptureFileError
from pytest_eagle_contract.shards.discovery import discover
from pytest_eagle_contract.shards.shard import Shard
from pytest_eagle_contract.shells.demo import SPEC, shipped_contract, write_demo_shards

MEMORY = 3 << 30
H = SPEC.hidden_size
FUZZ = fuzz_settings(40)
ALLOWED = {"EC701", "EC704", "EC706", "EC707"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The demo contract, its first good shard, and a valid capture of it (as bytes)."""
    root = tmp_path_factory.mktemp("hostile-captures")
    good, _ = write_demo_shards(root, shards=1)
    contract = load_contract(shipped_contract())
    (path,) = discover(good)
    shard = Shard.load(path, path.name, "specforge", H)
    aux = torch.cat([shard.slots[i].tensor for i in (0, 1, 2)], dim=-1)
    valid = write_capture(
        root / "valid",
        shard.sample.input_ids,
        aux,
        CaptureMeta(layer_ids=(1, 3, 4), arch="LlamaForCausalLM", version="0.5.23"),
    )
    return {
        "contract": contract,
        "shard": shard,
        "shard_path": path,
        "valid": valid,
        "bytes": valid.read_bytes(),
        "aux": aux,
        "ids": shard.sample.input_ids,
        "meta": json.loads(CaptureMeta.from_json(_meta_of(valid)).to_json()),
    }


def _meta_of(path: Path) -> str:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return str(f.metadata()[META_KEY])


def _judge(contract: Contract, shard: Shard, folder: Path) -> set[str]:
    """Index ``folder`` and verify the shard against it: the codes found, nothing raised."""
    index = load_captures(folder)
    codes = {"EC707" for _ in index.problems}
    codes |= {f.code for f in verify_against_capture(contract, shard, index)}
    for path in folder.iterdir():
        try:
            cap = read_capture(path)
        except CaptureFileError as exc:
            assert exc.code == "EC707" and str(path) in exc.message
            codes.add("EC707")
        else:
            assert cap.aux.dim() == 2 and cap.aux.shape[0] == cap.input_ids.shape[0]
    assert codes <= ALLOWED, codes
    return codes


def _raw_file(header: object, data: bytes = b"") -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


# -- regressions, one per family ----------------------------------------------------------


def _cases(world: dict[str, Any]) -> dict[str, bytes | dict[str, str]]:
    """name -> file bytes, or metadata for a file with the valid tensors."""
    valid, meta = world["bytes"], world["meta"]
    header_len = struct.unpack("<Q", valid[:8])[0]
    return {
        "empty": b"",
        "seven-bytes": b"\x01" * 7,
        "text": b"not a safetensors file",
        "header-2**63": struct.pack("<Q", 2**63) + b"{}",
        "header-2MiB": _raw_file(b" " * (2 << 20)),
        "truncated-header": valid[: 8 + header_len // 2],
        "truncated-data": valid[:-17],
        "appended": valid + b"\x00" * 13,
        "huge-shape": _raw_file(
            {AUX_KEY: {"dtype": "BF16", "shape": [2**40, 2**40], "data_offsets": [0, 8]}},
            b"\x00" * 8,
        ),
        "shape-overflow": _raw_file(
            {AUX_KEY: {"dtype": "F32", "shape": [2**62, 2**62, 8], "data_offsets": [0, 0]}}
        ),
        "unknown-dtype": _raw_file(
            {AUX_KEY: {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}}, b"\x00"
        ),
        "meta-not-json": {META_KEY: "{not json"},
        "meta-list": {META_KEY: "[1, 2]"},
        "meta-deep": {META_KEY: "[" * 50_000 + "]" * 50_000},
        "meta-huge": {META_KEY: json.dumps({**meta, "notes": ["x" * 999] * 200})},
        "meta-int-digits": {META_KEY: json.dumps(meta)[:-1] + ', "n_aux": ' + "9" * 5000 + "}"},
        "meta-num-tokens-inf": {META_KEY: json.dumps({**meta, "num_tokens": 1e400})},
        "meta-layers-bogus": {META_KEY: json.dumps({**meta, "layers": ["residual:x"]})},
        "meta-ids-strings": {META_KEY: json.dumps({**meta, "layer_ids": "1,3,4"})},
        "meta-version-int": {META_KEY: json.dumps({**meta, "version": 5})},
        "meta-arch-list": {META_KEY: json.dumps({**meta, "arch": ["Llama"]})},
        "meta-sha-wrong": {META_KEY: json.dumps({**meta, "ids_sha256": "0" * 64})},
        "meta-sha-junk": {META_KEY: json.dumps({**meta, "ids_sha256": 12})},
        "meta-format-2": {META_KEY: json.dumps({**meta, "format": 2})},
        "meta-tokens-wrong": {META_KEY: json.dumps({**meta, "num_tokens": 3})},
    }


def _write_case(
    world: dict[str, Any], folder: Path, name: str, case: bytes | dict[str, str]
) -> None:
    path = folder / f"{name}.safetensors"
    if isinstance(case, bytes):
        path.write_bytes(case)
    else:
        save_file({AUX_KEY: world["aux"], IDS_KEY: world["ids"]}, str(path), metadata=case)


def test_every_family_is_ec707_for_its_file(world: dict[str, Any], tmp_path: Path) -> None:
    cases = _cases(world)
    for name, case in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        _write_case(world, folder, name, case)
        assert "EC707" in _judge(world["contract"], world["shard"], folder), name


def test_things_that_are_not_files(world: dict[str, Any], tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.safetensors")  # opening it would block forever
    (tmp_path / "zero.safetensors").symlink_to("/dev/zero")
    (tmp_path / "dir.safetensors").mkdir()
    (tmp_path / "loop.safetensors").symlink_to(tmp_path / "loop.safetensors")
    index = load_captures(tmp_path)
    assert len(index) == 0 and len(index.problems) == 4
    assert all("not a regular file" in p for p in index.problems)


@pytest.mark.slow
def test_the_cli_reports_them_and_goes_on(world: dict[str, Any], tmp_path: Path) -> None:
    folder = tmp_path / "captures"
    folder.mkdir()
    for name, case in _cases(world).items():
        _write_case(world, folder, name, case)
    (folder / "valid.safetensors").write_bytes(world["bytes"])
    res = run_cli(
        "check",
        shipped_contract(),
        world["shard_path"],
        "--captures",
        folder,
        "--checks",
        "capture",
        "--sample",
        "all",
        memory=MEMORY,
        timeout=240,
    )
    out = res.stdout + res.stderr
    assert "Traceback" not in out and "MemoryError" not in out, out[-3000:]
    assert res.returncode == 1, out[-3000:]
    assert "EC707 capture-invalid" in res.stdout
    assert "EC701" not in res.stdout  # no broken file is taken for a capture


# -- fuzz -------------------------------------------------------------------------------

_VALUES = hostile_values(
    [
        "residual:3",
        "embed",
        "final_norm",
        "bfloat16",
        "0.5.23",
        "LlamaForCausalLM",
        "0" * 64,
        "aux",
    ],
    key_size=8,
    leaves=10,
)
_KEYS = [
    "format",
    "engine",
    "version",
    "arch",
    "mode",
    "layer_ids",
    "layers",
    "dtype",
    "hidden_size",
    "n_aux",
    "num_tokens",
    "ids_sha256",
    "source",
    "shard",
    "notes",
]
_DTYPES = [
    torch.float32,
    torch.bfloat16,
    torch.float16,
    torch.float64,
    torch.float8_e4m3fn,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
]


@FUZZ
@given(st.data())
def test_fuzz_metadata(
    world: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """The valid tensors under metadata with keys replaced, added or dropped, or garbage."""
    meta = dict(world["meta"])
    if data.draw(st.booleans()):
        for _ in range(data.draw(st.integers(1, 4))):
            key = data.draw(st.sampled_from(_KEYS) | st.text(max_size=6))
            if data.draw(st.integers(0, 4)) == 0:
                meta.pop(key, None)
            else:
                meta[key] = data.draw(_VALUES)
        text = json.dumps(meta)
    else:
        text = data.draw(st.text(max_size=60) | _VALUES.map(json.dumps))
    folder = tmp_path_factory.mktemp("meta")
    _write_case(world, folder, "fuzz", {META_KEY: text})
    _judge(world["contract"], world["shard"], folder)


@FUZZ
@given(st.data())
def test_fuzz_tensors(
    world: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """Capture files whose two tensors have any dtype and shape, or are missing."""
    t = int(world["ids"].shape[0])
    dims = st.sampled_from([0, 1, 2, t - 1, t, t + 1, H, 3 * H, 4 * H])
    tensors = {}
    for key in (AUX_KEY, IDS_KEY):
        if data.draw(st.integers(0, 5)) == 0:
            continue
        shape = data.draw(st.lists(dims, max_size=3))
        dtype = data.draw(st.sampled_from(_DTYPES))
        tensors[key] = torch.zeros(shape, dtype=torch.float32).to(dtype)
    meta = data.draw(st.sampled_from([world["meta"], {}, {**world["meta"], "ids_sha256": ""}]))
    folder = tmp_path_factory.mktemp("tensors")
    save_file(tensors, str(folder / "fuzz.safetensors"), metadata={META_KEY: json.dumps(meta)})
    _judge(world["contract"], world["shard"], folder)


@FUZZ
@given(st.data())
def test_fuzz_bytes(
    world: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """A valid capture file cut, with bytes overwritten, or with a forged header."""
    raw = bytearray(world["bytes"])
    header_len = struct.unpack("<Q", raw[:8])[0]
    for _ in range(data.draw(st.integers(1, 4))):
        what = data.draw(st.sampled_from(["cut", "flip", "length", "header"]))
        if what == "cut":
            del raw[data.draw(st.integers(0, len(raw))) :]
        elif what == "flip" and raw:
            at = data.draw(st.integers(0, min(len(raw), 8 + header_len) - 1))
            raw[at] = data.draw(st.integers(0, 255))
        elif what == "length":
            raw[:8] = struct.pack("<Q", data.draw(st.integers(0, 2**64 - 1)))
        else:
            entry = {
                "dtype": data.draw(st.sampled_from(["BF16", "F32", "I64", "BOOL", "F8_E5M2", "X"])),
                "shape": data.draw(st.lists(st.integers(0, 2**63), max_size=3)),
                "data_offsets": data.draw(st.lists(st.integers(0, 2**63), max_size=3)),
            }
            raw = bytearray(_raw_file({AUX_KEY: entry, IDS_KEY: entry}, bytes(raw[8:64])))
    folder = tmp_path_factory.mktemp("bytes")
    (folder / "fuzz.safetensors").write_bytes(bytes(raw))
    _judge(world["contract"], world["shard"], folder)
