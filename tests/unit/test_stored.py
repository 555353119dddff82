"""The torch-free shard reader (shards/stored.py) and the numpy norms, from outside.

Real files written by torch.save and safetensors: what the reader maps must equal what
torch.load reads, element for element; what it does not fully understand (or what is
hostile) must go to torch, so verdicts and read errors stay what they were; and a check of
a shard set that needs no torch must not import it.
"""

from __future__ import annotations

import json
import mmap
import os
import pickle
import pickletools
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from pytest_eagle_contract.errors import ShardReadError
from pytest_eagle_contract.shards import reading
from pytest_eagle_contract.shards.formats import FORMATS
from pytest_eagle_contract.shards.inspection import inspect_shard
from pytest_eagle_contract.shards.mapped import read_stored
from pytest_eagle_contract.shards.reading import comparable, read_sample
from pytest_eagle_contract.shards.stats import norm_stats, quantiles, token_norms
from pytest_eagle_contract.shards.stored import Stored
from pytest_eagle_contract.shards.writing import write_shard

DTYPES = [
    torch.bfloat16,
    torch.float16,
    torch.float32,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
]


def _values(dtype: torch.dtype, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 3).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(-100 if dtype != torch.uint8 else 0, 100, shape, generator=g).to(dtype)


def _same(stored: object, tensor: torch.Tensor) -> None:
    assert isinstance(stored, Stored), stored
    assert stored.dtype == str(tensor.dtype).removeprefix("torch.")
    assert stored.shape == tuple(tensor.shape)
    assert torch.equal(stored.torch(), tensor)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_torch_files_map_to_the_same_elements_as_torch_load(
    tmp_path: Path, dtype: torch.dtype
) -> None:
    base = _values(dtype, (6, 10))
    data = {
        "whole": base,
        "columns": base[:, 2:7],  # a view into a shared storage, rows strided
        "transposed": base.t(),
        "offset": base[3:],
        "empty": base[:0],
        "batched": _values(dtype, (1, 4, 8), seed=1),
        "listed": [_values(dtype, (3, 5), seed=2), base[1]],
        "number": 7,
        "text": "hello",
    }
    path = tmp_path / "x.pt"
    torch.save(data, path)
    got = read_stored(path)
    assert got is not None
    want = torch.load(path, weights_only=True)
    for key in ("whole", "columns", "transposed", "offset", "empty", "batched"):
        _same(got[key], want[key])
    for a, b in zip(got["listed"], want["listed"], strict=True):
        _same(a, b)
    assert (got["number"], got["text"]) == (7, "hello")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_safetensors_files_map_to_the_same_elements(tmp_path: Path, dtype: torch.dtype) -> None:
    tensors = {"a": _values(dtype, (5, 6)), "b": _values(dtype, (1, 2, 3), seed=3)}
    path = tmp_path / "x.safetensors"
    save_file(tensors, str(path))
    got = read_stored(path)
    assert got is not None
    for key, tensor in tensors.items():
        _same(got[key], tensor)


def test_every_format_reads_alike_with_and_without_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """inspect_shard's whole report (keys, ids, mask, per-slot norms) on each format's own
    layout, read torch-free and through torch.load/safetensors."""
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 500, (33,), generator=g)
    mask = (torch.arange(33) % 3 != 0).long()
    slots = [(torch.randn(33, 16, generator=g) * (i + 1)).bfloat16() for i in range(3)]
    paths = [
        write_shard(
            tmp_path / fmt, fmt, 0, ids, mask, slots if FORMATS[fmt].can_hold(3) else slots[:1]
        )
        for fmt in ("specforge", "speculators-v1", "eagle-legacy", "trtllm", "speculators")
    ]
    fast = [inspect_shard(p, "auto", 16) for p in paths]
    assert all(isinstance(read_stored(p), (dict, list)) for p in paths)
    monkeypatch.setattr(reading, "read_stored", lambda path: None)
    slow = [inspect_shard(p, "auto", 16) for p in paths]
    for a, b in zip(fast, slow, strict=True):
        assert json.dumps(a, default=str) == json.dumps(b, default=str)


def test_users_get_torch_tensors_and_the_checks_get_arrays(tmp_path: Path) -> None:
    """read_sample (public) and Shard.read (the eagle_shard fixture) hand out torch
    tensors, as documented; the checks' Shard.load keeps the mapped arrays."""
    from pytest_eagle_contract.contract.model import parse_contract
    from pytest_eagle_contract.shards.shard import Shard

    ids, mask = torch.arange(6), torch.ones(6, dtype=torch.long)
    slots = [_values(torch.bfloat16, (6, 8), seed=i) for i in range(3)]
    path = write_shard(tmp_path, "speculators-v1", 0, ids, mask, slots)
    public = read_sample(path).tensors
    assert all(isinstance(v, torch.Tensor) for v in public["hidden_states"])
    assert torch.equal(public["hidden_states"][2], slots[2])
    assert isinstance(read_sample(path, arrays=True).tensors["input_ids"], Stored)
    contract = parse_contract(
        "contract: t\nversion: 1\ntarget: {num_hidden_layers: 4, hidden_size: 8, vocab_size: 9,"
        " dtype: bfloat16}\ntraining:\n  format: speculators-v1\n  shards: .\n  slots:\n"
        "    - {layer: residual:1}\n    - {layer: residual:2}\n    - {layer: residual:3}\n",
        tmp_path / "c.yaml",
    )
    shard = Shard.read(contract, path)
    assert isinstance(shard.sample.tensors["input_ids"], torch.Tensor)  # type: ignore[union-attr]
    fc = contract.training.fc_input  # type: ignore[union-attr]
    assert torch.equal(shard.fc_input, torch.cat([slots[i] for i in fc], dim=-1))
    loaded = Shard.load(path, "x", "speculators-v1", 8)
    assert isinstance(loaded.slots[0].array, Stored)
    assert torch.equal(loaded.slots[0].tensor, slots[0])


def _rezip(good: Path, path: Path, pickled: bytes, deflate: bool = False) -> Path:
    """``good`` (a torch.save file) with its data.pkl replaced, storages maybe deflated."""
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(path, "w") as out:
        for info in src.infolist():
            blob = pickled if info.filename.endswith("/data.pkl") else src.read(info)
            storage = "/data/" in info.filename
            out.writestr(info.filename, blob, zipfile.ZIP_DEFLATED if deflate and storage else 0)
    return path


class _Payload:
    def __reduce__(self) -> tuple[object, ...]:
        return (os.system, ("true",))


def test_hostile_torch_files_go_to_torch_and_end_as_read_errors(tmp_path: Path) -> None:
    """A payload, a tensor reaching past its storage, a BUILD that would change a checked
    tensor: the torch-free reader declines each (returns None), and read_sample gives the
    read error torch gives. A re-zipped file whose storages are compressed, which torch
    reads as garbage numbers, is EC002."""
    good = tmp_path / "good.pt"
    torch.save({"x": torch.arange(4, dtype=torch.float32)}, good)
    with zipfile.ZipFile(good) as z:
        pkl = z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))
    past = pkl.replace(b"K\x04\x85", b"M\xe8\x03\x85")  # size (4,) -> (1000,): past the storage
    assert past != pkl
    # BUILD on the tensor stand-in, trying to change its size after it was checked
    at = [pos for op, _, pos in pickletools.genops(pkl) if op.name == "REDUCE"][-1] + 1
    build = pkl[:at] + b"}X\x04\x00\x00\x00sizeM\xe8\x03\x85sb" + pkl[at:]
    cases = {
        "payload": _rezip(good, tmp_path / "payload.pt", pickle.dumps({"x": _Payload()}, 2)),
        "past": _rezip(good, tmp_path / "past.pt", past),
        "build": _rezip(good, tmp_path / "build.pt", build),
        "deflated": _rezip(good, tmp_path / "deflated.pt", pkl, deflate=True),
    }
    for name in ("payload", "past", "build"):
        assert read_stored(cases[name]) is None, name
    with pytest.raises(ShardReadError) as payload_error:
        read_sample(cases["payload"])
    assert payload_error.value.code == "EC003"
    for name in ("past", "build"):
        with pytest.raises(ShardReadError):
            read_sample(cases[name])
    with pytest.raises(ShardReadError) as deflated:
        read_sample(cases["deflated"])
    assert deflated.value.code == "EC002" and "compressed" in deflated.value.message


def test_a_zip_torch_refuses_is_declined(tmp_path: Path) -> None:
    """No version record, or one torch does not read: torch.load refuses the file, so the
    mapped reader declines it and the verdict is torch's read error."""
    good = tmp_path / "good.pt"
    torch.save({"x": torch.arange(4.0)}, good)
    for name, version in (("none", None), ("garbage", b"x9"), ("future", b"99")):
        path = tmp_path / f"{name}.pt"
        with zipfile.ZipFile(good) as src, zipfile.ZipFile(path, "w") as out:
            for info in src.infolist():
                blob = src.read(info)
                if info.filename.endswith("/version"):
                    if version is None:
                        continue
                    blob = version
                out.writestr(info.filename, blob)
        assert read_stored(path) is None, name
        with pytest.raises(ShardReadError):
            read_sample(path)


def test_files_torch_must_read_still_read(tmp_path: Path) -> None:
    """float8, a tensor that requires grad, the legacy format and gzip: torch reads them."""
    f8 = tmp_path / "f8.pt"
    torch.save({"input_ids": torch.arange(3), "x": torch.randn(3, 4).to(torch.float8_e4m3fn)}, f8)
    legacy = tmp_path / "legacy.pt"
    torch.save({"x": torch.ones(2, 2)}, legacy, _use_new_zipfile_serialization=False)
    grad = tmp_path / "grad.pt"
    torch.save({"x": torch.ones(2, 2, requires_grad=True)}, grad)
    for path in (f8, legacy, grad):
        assert read_stored(path) is None, path.name
    assert read_sample(f8).tensors["x"].dtype == torch.float8_e4m3fn
    assert read_sample(grad).tensors["x"].requires_grad is False
    assert torch.equal(read_sample(legacy).tensors["x"], torch.ones(2, 2))


@pytest.mark.slow
def test_a_file_past_the_readers_bounds_goes_to_torch(tmp_path: Path) -> None:
    """17,000 storages: more zip entries than the reader parses; torch reads the file."""
    path = tmp_path / "many.pt"
    torch.save(
        {"input_ids": torch.arange(3), "h": [torch.ones(1, 2) * i for i in range(17_000)]}, path
    )
    assert read_stored(path) is None
    assert len(read_sample(path, "speculators-v1").tensors["h"]) == 17_000


def test_overlapping_safetensors_go_to_the_library(tmp_path: Path) -> None:
    """Two tensors over the same bytes: the library refuses such a file, so the mapped
    reader declines it rather than read what the library would not."""
    path = tmp_path / "x.safetensors"
    header = json.dumps(
        {
            "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        }
    )
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode() + b"\0" * 8)
    assert read_stored(path) is None
    with pytest.raises(ShardReadError):
        read_sample(path)


def test_safetensors_header_past_the_file_is_a_read_error(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    header = json.dumps({"a": {"dtype": "F32", "shape": [1000], "data_offsets": [0, 4000]}})
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode() + b"\0" * 16)
    assert read_stored(path) is None
    with pytest.raises(ShardReadError) as error:
        read_sample(path)
    assert error.value.code in ("EC001", "EC002")


@pytest.mark.parametrize(
    "dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int32]
)
@pytest.mark.parametrize("width", [7, 64, 300])
def test_token_norms_match_float64(dtype: torch.dtype, width: int) -> None:
    x = _values(dtype, (200, width), seed=width)
    want = x.double().norm(dim=-1).numpy()
    for kind in (x, x.t().contiguous().t(), Stored(str(dtype)[6:], _raw(x))):
        got = token_norms(kind)  # type: ignore[arg-type]
        np.testing.assert_allclose(got, want, rtol=2e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_norms_read_the_file_in_chunks_and_match_float64(
    tmp_path: Path, dtype: torch.dtype, suffix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mapped state's norms read its bytes from the file (pread, a chunk of rows at a
    time, rows not a multiple of the chunk), and equal float64's."""
    x = _values(dtype, (301, 64), seed=3)
    path = tmp_path / f"x{suffix}"
    if suffix == ".pt":
        torch.save({"h": [x]}, path)
    else:
        save_file({"h": x}, str(path))
    data = read_stored(path)
    assert data is not None
    h = data["h"][0] if suffix == ".pt" else data["h"]
    assert h.place is not None and h.place.path == str(path)
    reads = []
    real = os.preadv
    monkeypatch.setattr(os, "preadv", lambda fd, bufs, at: reads.append(at) or real(fd, bufs, at))
    monkeypatch.setattr("pytest_eagle_contract.shards.stats.CHUNK_ELEMENTS", 64 * 40)
    got = token_norms(h)
    np.testing.assert_allclose(got, x.double().norm(dim=-1).numpy(), rtol=2e-6)
    row = x.element_size() * 64
    assert reads == [h.place.offset + start * row for start in range(0, 301, 40)]


def test_a_file_replaced_after_mapping_is_not_read_again(tmp_path: Path) -> None:
    """The norms are those of the bytes mapped: a file put in the shard's place (another
    inode, a FIFO that would block a plain open) is not read; the map's view is."""
    x = _values(torch.bfloat16, (50, 32), seed=1)
    path = tmp_path / "x.pt"
    torch.save({"h": [x]}, path)
    data = read_stored(path)
    assert data is not None
    h = data["h"][0]
    torch.save({"h": [x * 4]}, tmp_path / "other.pt")
    os.replace(tmp_path / "other.pt", path)
    want = x.double().norm(dim=-1).numpy()
    np.testing.assert_allclose(token_norms(h), want, rtol=2e-6)
    path.unlink()
    os.mkfifo(path)
    np.testing.assert_allclose(token_norms(h), want, rtol=2e-6)  # and no hang


def _raw(x: torch.Tensor) -> np.ndarray:
    stored = Stored.of(x)
    assert stored is not None
    return stored.raw


def test_norms_of_float8_complex_and_overflowing_rows() -> None:
    f8 = torch.randn(50, 32).to(torch.float8_e5m2)
    np.testing.assert_allclose(token_norms(f8), f8.double().norm(dim=-1).numpy(), rtol=2e-6)
    c = torch.randn(20, 8, dtype=torch.complex64)
    np.testing.assert_allclose(token_norms(c), c.abs().double().norm(dim=-1).numpy(), rtol=2e-6)
    big = torch.full((4, 16), 1e30)  # squares overflow float32; the norms do not
    big[1, 3] = float("nan")
    big[2, 0] = float("inf")
    stats = norm_stats(big)
    assert (stats.tokens, stats.nonfinite_tokens, stats.first_nonfinite) == (4, 2, 1)
    assert stats.median == pytest.approx(4e30, rel=1e-6)


def test_empty_and_absurdly_wide_states_allocate_nothing() -> None:
    """[0, 2**40] costs nothing to store; its norms must not allocate a 2**40 buffer, and a
    [1, 2**21] row (wider than any model) gets no norms, so no float32 copy of it."""
    for empty in (
        torch.empty((0, 1 << 40), dtype=torch.bfloat16),
        Stored("bfloat16", np.empty((0, 1 << 40), np.uint16)),
    ):
        assert norm_stats(empty).tokens == 0  # type: ignore[arg-type]
    wide = Stored("float32", np.ones((1, 1 << 21), np.float32))
    assert norm_stats(wide).tokens == 0


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.floats(min_value=-1e150, max_value=1e150, allow_nan=False),
        min_size=1,
        max_size=300,
    ),
)
def test_the_quantiles_are_numpys_to_the_last_bit(values: list[float]) -> None:
    qs = (0.05, 0.5, 0.95)
    a = np.array(values, dtype=np.float64)
    assert quantiles(np.sort(a), qs) == [float(x) for x in np.quantile(a, qs)]


def test_numbers_of_stored_and_torch_agree() -> None:
    for dtype in DTYPES:
        x = _values(dtype, (9,))
        stored = Stored(str(dtype)[6:], _raw(x))
        a, b = comparable(stored), comparable(x)
        assert a is not None and b is not None
        assert a.dtype == b.dtype and np.array_equal(a, b)


CHECK_WITHOUT_TORCH = """
import sys
from pytest_eagle_contract.shells.cli import main
rc = main(sys.argv[1:])
print("TORCH", "torch" in sys.modules, file=sys.stderr)
print("NUMPY.MA", "numpy.ma" in sys.modules, file=sys.stderr)  # np.quantile imports it
sys.exit(rc)
"""


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_shard_check_never_imports_torch(tmp_path: Path, workers: str) -> None:
    """check over speculators v1 shards, one of them with a shifted slot: the verdict
    (EC401 on that file) comes without torch in the process."""
    report, tmp_path = tmp_path / "r.json", tmp_path / "set"
    g = torch.Generator().manual_seed(0)
    for i in range(4):
        ids = torch.randint(0, 100, (40,), generator=g)
        scale = [1.0, 10.0, 40.0] if i != 2 else [1.0, 40.0, 40.0]
        slots = [(torch.randn(40, 32, generator=g) * s).bfloat16() for s in scale]
        write_shard(tmp_path, "speculators-v1", i, ids, torch.ones(40, dtype=torch.long), slots)
    (tmp_path / "c.yaml").write_text(
        "contract: t\nversion: 1\n"
        "target: {num_hidden_layers: 8, hidden_size: 32, vocab_size: 100, dtype: bfloat16}\n"
        "training:\n  format: speculators-v1\n  shards: .\n  slots:\n"
        "    - {layer: residual:1, norm: {median: 5.66, rtol: 0.2}}\n"
        "    - {layer: residual:3, norm: {median: 56.6, rtol: 0.2}}\n"
        "    - {layer: residual:7, norm: {median: 226, rtol: 0.2}}\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", CHECK_WITHOUT_TORCH, "check", str(tmp_path / "c.yaml"),
         "--sample", "all", "--no-sharpness", "--workers", workers, "--json", str(report)],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    assert "TORCH False" in done.stderr, done.stderr
    assert "NUMPY.MA False" in done.stderr, done.stderr
    assert done.returncode == 1, done.stdout + done.stderr
    found = json.loads(report.read_text())["findings"]
    assert [(f["code"], Path(f["file"]).name, f["slot"]) for f in found] == [
        ("EC401", "data_2.pt", 1)
    ]


def _stored_in(value: object) -> list[Stored]:
    if isinstance(value, Stored):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _stored_in(v)]
    if isinstance(value, list):
        return [s for v in value for s in _stored_in(v)]
    return []


_GOOD = tempfile.mkdtemp(prefix="eagle-stored-")


@given(
    flips=st.lists(
        st.tuples(st.integers(0, 1 << 20), st.integers(1, 255), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    safetensors=st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_flipped_bytes_never_crash_the_mapped_reader(
    flips: list[tuple[int, int, bool]], safetensors: bool
) -> None:
    """Bytes flipped in the pickle, the zip directory or the safetensors header: the reader
    declines the file or maps only bytes that are there (every element read back)."""
    name = "x.safetensors" if safetensors else "x.pt"
    good = Path(_GOOD) / name
    if not good.exists():
        data = {"input_ids": torch.arange(7), "h": _values(torch.bfloat16, (7, 12))}
        save_file(data, str(good)) if safetensors else torch.save(data, good)
    blob = bytearray(good.read_bytes())
    for where, xor, from_end in flips:  # the metadata sits at both ends of the file
        near = where % min(1024, len(blob))
        at = len(blob) - 1 - near if from_end else near
        blob[at] ^= xor
    path = Path(_GOOD) / f"flipped-{name}"
    path.write_bytes(bytes(blob))
    try:
        got = read_stored(path)
    except ShardReadError as exc:  # a flipped compression method reads as a re-zipped file
        assert exc.code == "EC002"
        return
    bounds = np.lib.array_utils.byte_bounds
    for stored in _stored_in(got):  # each view lies inside the file's map; read every element
        base = stored.raw
        while base is not None and not isinstance(base, mmap.mmap):
            # views, as_strided's wrapper, frombuffer's array and memoryview, then the map
            base = base.obj if isinstance(base, memoryview) else base.base
        if stored.numel() and base is not None:
            start, end = bounds(np.frombuffer(base, np.uint8))  # the whole map
            low, high = bounds(stored.raw)
            assert start <= low and high <= end
        stored.values().astype(np.float64).sum()
        if stored.dim() == 2:
            norm_stats(stored)
