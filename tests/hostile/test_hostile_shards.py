"""Hostile shards, driven from outside: real files on disk, the CLI in a child process with a
memory limit and a timeout. Every bad shard ends in a finding for that file (the good one
beside it is still checked) or a clean read error; never a traceback, hang or blow-up, and
the inputs are left as they were."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import pickle
import resource
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_eagle_contract.errors import ShardReadError
from pytest_eagle_contract.shards.inspection import format_report, inspect_shard
from pytest_eagle_contract.shards.reading import GUNZIP_CAP, GUNZIP_CAP_ENV, gunzip_cap
from pytest_eagle_contract.shells import demo

T, H = 12, 64
MEMORY = 3 << 30  # RLIMIT_AS of the child: torch loads in well under this
CONTRACT_TEXT = (
    Path(demo.shipped_contract())
    .read_text("utf-8")
    .replace("format: specforge", "format: auto")
    .replace("../eagle-demo/good", "shards")
)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The CLI in a child with bounded memory; the timeout is the hang guard."""
    res = subprocess.run(
        [sys.executable, "-m", "pytest_eagle_contract", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        preexec_fn=_limit_memory,
        timeout=240,
    )
    assert res.returncode in (0, 1, 2), res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    return res


def check(root: Path, report: Path, *paths: Path) -> subprocess.CompletedProcess[str]:
    """``check`` of ``root/contract.yaml`` on every shard, with a JSON report."""
    contract = root / "contract.yaml"
    return run("check", contract, *paths, "--sample", "all", "--no-sharpness", "--json", report)


def hashes(root: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def codes_by_file(report: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in json.loads(report.read_text("utf-8"))["findings"]:
        out.setdefault(f["file"], set()).add(f["code"])
    return out


def good(**changes: Any) -> dict[Any, Any]:
    """A SpecForge shard dict of the demo's shape, with ``changes`` (None drops a key)."""
    g = torch.Generator().manual_seed(0)
    shard: dict[Any, Any] = {
        "input_ids": torch.randint(0, 512, (T,), generator=g),
        "loss_mask": torch.ones(T, dtype=torch.long),
        "aux_hidden_state": torch.randn(1, T, 3 * H, generator=g).bfloat16(),
        "hidden_state": torch.randn(1, T, H, generator=g).bfloat16(),
    }
    shard.update(changes)
    return {k: v for k, v in shard.items() if v is not None}


def v1(states: Any) -> dict[str, Any]:
    return {"input_ids": torch.arange(T), "loss_mask": torch.ones(T), "hidden_states": states}


NAN, INF = float("nan"), float("inf")
# name -> (shard dict, a code its file must get)
CASES: dict[str, tuple[Any, str]] = {
    "0-d ids": (good(input_ids=torch.tensor(5)), "EC001"),
    "[3, T] ids": (good(input_ids=torch.zeros(3, T, dtype=torch.long)), "EC001"),
    "0-d state": (good(aux_hidden_state=torch.tensor(1.0)), "EC203"),
    "width 0": (
        good(aux_hidden_state=torch.zeros(1, T, 0), hidden_state=torch.zeros(1, T, 0)),
        "EC203",
    ),
    "uint16 ids": (good(input_ids=torch.arange(T).to(torch.uint16)), "EC201"),
    "uint32 mask": (good(loss_mask=torch.ones(T, dtype=torch.uint32)), "EC201"),
    "uint64 ids": (good(input_ids=torch.arange(T).to(torch.uint64)), "EC201"),
    "float8 ids": (good(input_ids=torch.arange(T).to(torch.float8_e4m3fn)), "EC201"),
    "float8 NaN state": (
        good(aux_hidden_state=torch.full((1, T, 3 * H), NAN).to(torch.float8_e4m3fn)),
        "EC304",
    ),
    "complex": (
        good(
            hidden_state=torch.ones(1, T, H, dtype=torch.complex64),
            input_ids=torch.ones(T, dtype=torch.complex64),
        ),
        "EC201",
    ),
    "bool mask": (good(loss_mask=torch.ones(T, dtype=torch.bool)), "EC201"),
    "NaN/Inf ids": (good(input_ids=torch.tensor([NAN, INF, 0.5] + [1.0] * (T - 3))), "EC301"),
    "NaN/Inf mask": (good(loss_mask=torch.tensor([NAN, -INF] + [1.0] * (T - 2))), "EC302"),
    "sparse": (good(hidden_state=torch.randn(T, H).to_sparse()), "EC001"),
    "meta": (good(hidden_state=torch.empty(T, H, device="meta")), "EC001"),
    "nested": (good(hidden_state=torch.nested.nested_tensor([torch.zeros(2, H)])), "EC001"),
    "Parameter": (good(input_ids=torch.nn.Parameter(torch.randn(T))), "EC201"),
    "int key": ({**good(), 7: torch.zeros(1)}, "EC001"),
    "list of non-tensors": (good(aux_hidden_state=[1, "a", None]), "EC203"),
    "ids as a list": (good(input_ids=[1, 2, 3]), "EC001"),
    # in a .ckpt, a tensor hidden_states is SpecForge DFlash's layout (taps alone): one tap
    # where the contract has four slots
    "v1 tensor hidden_states": (v1(torch.randn(T, H)), "EC204"),
    "v1 0-d hidden_states": (v1(torch.tensor(3.0)), "EC203"),
    "v1 nested list": (v1([[torch.zeros(T, H)], {"a": 1}]), "EC203"),
    "2**30 zero-row slots": (
        good(aux_hidden_state=torch.zeros(1, 0, 1 << 30), hidden_state=torch.zeros(1, 0, 1)),
        "EC203",
    ),
    "requires_grad state": (good(hidden_state=torch.randn(1, T, H, requires_grad=True)), "EC201"),
    "T = 0": ({k: v[:0] if v.dim() == 1 else v[:, :0] for k, v in good().items()}, "EC205"),
    "0-d hidden_state": (good(hidden_state=torch.tensor(2.0)), "EC203"),
    "v1 a 0-d entry": (v1([torch.zeros(T, H), torch.tensor(1.0)]), "EC203"),
    "a string state": (good(hidden_state="x"), "EC203"),
    "v1 5000 states": (v1([torch.zeros(T, 4) for _ in range(5000)]), "EC203"),
    "uint64 mask 2**63-1": (
        good(loss_mask=torch.full((T,), 2**63 - 1, dtype=torch.int64).to(torch.uint64)),
        "EC302",
    ),
    "negative int8 ids": (good(input_ids=torch.full((T,), -5, dtype=torch.int8)), "EC301"),
    "ids 1e30": (good(input_ids=torch.full((T,), 1e30, dtype=torch.float64)), "EC301"),
    "[T, 1] mask": (good(loss_mask=torch.ones(T, 1)), "EC001"),
    "5-d state": (good(hidden_state=torch.zeros(1, 1, 1, T, H)), "EC203"),
    "T + 5 ids": (good(input_ids=torch.arange(T + 5)), "EC202"),
    "TensorRT-LLM list of no dicts": ([1, torch.zeros(3)], "EC001"),
}
FP8 = torch.float8_e4m3fn
_FP8_AUX = (torch.randn(1, T, 3 * H, generator=torch.Generator().manual_seed(1)) * 900).to(FP8)
for _name, _scales in {  # FP8 states (shards/precision.py): their scales, hostile
    "float8 state, no scales": None,
    "float8 scales NaN": torch.full((1, T, 1), NAN),
    "float8 scales of another shape": torch.ones(5),
    "float8 scales 0": torch.zeros(()),
    "float8 scales integers": torch.ones(1, T, 1, dtype=torch.int32),
    "float8 scales a string": "x",
    "float8 scales negative": torch.full((1, T, 1), -1.0),
}.items():
    _extra = {} if _scales is None else {"aux_hidden_state_scales": _scales}
    CASES[_name] = (
        good(aux_hidden_state=_FP8_AUX, **_extra),
        "EC310" if _scales is None else "EC312",
    )
if hasattr(torch, "quantize_per_tensor"):
    CASES["quantized"] = (
        good(hidden_state=torch.quantize_per_tensor(torch.randn(T, H), 0.1, 0, torch.qint8)),
        "EC001",
    )


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    folder = root / "shards" / "rows_0-2000"
    folder.mkdir(parents=True)
    for i, (shard, _) in enumerate(CASES.values()):
        torch.save(shard, folder / f"data_{i}.ckpt")
    torch.save(good(), folder / "data_999.ckpt")
    (root / "contract.yaml").write_text(CONTRACT_TEXT, "utf-8")
    return root


@pytest.mark.slow
def test_each_bad_shard_is_a_finding_for_its_file_and_the_good_one_is_checked(hostile):
    before = hashes(hostile)
    report = hostile.parent / f"{hostile.name}-report.json"
    res = check(hostile, report)
    assert res.returncode == 1
    found = codes_by_file(report)
    for i, (name, (_, code)) in enumerate(CASES.items()):
        assert code in found.get(f"rows_0-2000/data_{i}.ckpt", set()), (name, found)
    assert not {"EC001", "EC002", "EC003"} & found["rows_0-2000/data_999.ckpt"]
    assert hashes(hostile) == before


def test_inspect_and_infer_on_hostile_shards(hostile):
    folder = hostile / "shards" / "rows_0-2000"
    for path in sorted(folder.iterdir()):  # in-process: a read error or a report, no crash
        try:
            json.dumps(inspect_shard(path), default=str)
            format_report(inspect_shard(path, hidden_size=H))
        except ShardReadError as exc:
            assert exc.code in ("EC001", "EC002", "EC003")
    assert run("inspect", folder / "data_0.ckpt").returncode == 1


@pytest.mark.slow
def test_infer_on_each_hostile_shard_drafts_or_refuses(hostile):
    """``infer`` reads shards one trusts: a bad one is a usage error naming it, no crash."""
    from pytest_eagle_contract.authoring.infer import infer_contract
    from pytest_eagle_contract.errors import EagleContractError

    refused = 0
    for path in sorted((hostile / "shards" / "rows_0-2000").iterdir()):
        try:
            infer_contract([path], name="x", num_layers=8)
        except EagleContractError as exc:
            refused += 1
            assert path.name in str(exc) or "hidden" in str(exc), exc
    assert refused >= 10
    res = run("infer", hostile / "shards", "--num-layers", "8")  # the whole folder at once
    assert res.returncode == 2 and "data_" in res.stderr


def test_infer_on_shards_without_states_is_a_usage_error(tmp_path):
    torch.save(v1([]), tmp_path / "data_0.pt")
    res = run("infer", tmp_path, "--num-layers", "8")
    assert res.returncode == 2 and "no hidden states" in res.stderr


def _safetensors(path: Path, header: dict[str, Any], data: bytes = b"") -> None:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def _entry(dtype: str, shape: list[int], start: int, end: int) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [start, end]}


def _arrow(path: Path, table: Any) -> None:
    import pyarrow as pa

    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)


@pytest.mark.slow
def test_safetensors_headers_data_config_and_arrow_datasets(tmp_path):
    pa = pytest.importorskip("pyarrow")
    (tmp_path / "contract.yaml").write_text(CONTRACT_TEXT, "utf-8")
    spec = tmp_path / "shards" / "spec"
    hs = spec / "hidden_states"
    hs.mkdir(parents=True)
    n = T * 4 * H
    ids = _entry("I64", [T], n * 4, n * 4 + 8 * T)
    _safetensors(
        hs / "hs_0.safetensors",
        {  # a declared size no file holds
            "hidden_states": _entry("F32", [2**40, 2**40, H], 0, 0),
            "token_ids": _entry("I64", [0], 0, 0),
        },
    )
    _safetensors(
        hs / "hs_1.safetensors",
        {  # zero bytes, 2**40 slots
            "hidden_states": _entry("F32", [0, 2**40, H], 0, 0),
            "token_ids": _entry("I64", [0], 0, 0),
        },
    )
    _safetensors(
        hs / "hs_2.safetensors",
        {
            "hidden_states": _entry("F8_E4M3", [T, 4, H], 0, n),
            "token_ids": _entry("U16", [T], n, n + 2 * T),
        },
        b"\x7f" * n + b"\xff\xff" * T,
    )
    states = _entry("F32", [T, 4, H], 0, n * 4)
    zeros = bytes(n * 4 + 8 * T)
    _safetensors(hs / "hs_3.safetensors", {"hidden_states": states, "token_ids": ids}, zeros)
    strings = pa.table({"input_ids": [["a"]] * 4, "loss_mask": [[1]] * 4})
    _arrow(spec / "data-00000-of-00001.arrow", strings)
    v1_dir = tmp_path / "shards" / "v1"
    v1_dir.mkdir()
    torch.save(v1([torch.randn(T, H).bfloat16() for _ in range(4)]), v1_dir / "data_0.pt")
    (v1_dir / "data_config.json").write_text(
        json.dumps(
            {"hidden_states": [1, 2], "model": 3, "dataset_row": {"input_ids": [1], "row": 0}}
        )
    )
    before = hashes(tmp_path / "shards")
    report = tmp_path / "report.json"
    res = check(tmp_path, report)
    found = codes_by_file(report)
    assert res.returncode == 1
    assert found["spec/hidden_states/hs_0.safetensors"] == {"EC002"}
    assert found["spec/hidden_states/hs_1.safetensors"] == {"EC001"}  # the dataset is unusable
    assert "Arrow dataset" in res.stdout and "not a list of integers" in res.stdout
    assert "EC001" not in found["v1/data_0.pt"] and "EC002" not in found["v1/data_0.pt"]
    assert hashes(tmp_path / "shards") == before
    (spec / "data-00000-of-00001.arrow").unlink()  # without the dataset: each file's findings
    res = check(tmp_path, report, spec)
    found = codes_by_file(report)
    assert "EC203" in found["hidden_states/hs_1.safetensors"]
    assert {"EC201", "EC301", "EC304"} <= found["hidden_states/hs_2.safetensors"]
    assert "EC201" in found["hidden_states/hs_3.safetensors"]


class _Payload:
    """Unpickling it creates a marker file: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.marker), "w"))


def test_arrow_extension_types_are_refused_before_pyarrow_reads_them(tmp_path):
    pa = pytest.importorskip("pyarrow")
    marker = tmp_path / "PAYLOAD_RAN"

    class Evil(pa.ExtensionType):  # what PyExtensionType (CVE-2023-47248) writes
        def __init__(self) -> None:
            super().__init__(pa.list_(pa.int64()), "arrow.py_extension_type")

        def __arrow_ext_serialize__(self) -> bytes:
            return pickle.dumps(_Payload(marker))

        @classmethod
        def __arrow_ext_deserialize__(cls, storage_type: Any, serialized: bytes) -> Any:
            pickle.loads(serialized)
            return cls()

    evil = Evil()
    table = pa.table({"input_ids": pa.ExtensionArray.from_storage(evil, pa.array([[1, 2]]))})
    (tmp_path / "hidden_states").mkdir()
    _arrow(tmp_path / "data-00000-of-00001.arrow", table)
    marker.unlink(missing_ok=True)
    header = {
        "hidden_states": _entry("F32", [2, 1, H], 0, 8 * H),
        "token_ids": _entry("I64", [2], 8 * H, 8 * H + 16),
    }
    _safetensors(tmp_path / "hidden_states" / "hs_0.safetensors", header, bytes(8 * H + 16))
    res = run("inspect", tmp_path / "hidden_states" / "hs_0.safetensors")
    assert res.returncode == 1 and "extension type" in res.stderr
    assert not marker.exists()


def _gzip_bomb(path: Path, gib: int) -> None:
    """``gib`` GiB of zeros in about ``gib`` MB: one 64 MiB gzip member, repeated."""
    member = gzip.compress(bytes(64 << 20), compresslevel=9)
    with open(path, "wb") as f:
        for _ in range(gib * 16):
            f.write(member)


@pytest.mark.slow
def test_a_gzip_bomb_is_not_read_whole(tmp_path):
    (tmp_path / "contract.yaml").write_text(CONTRACT_TEXT, "utf-8")
    folder = tmp_path / "shards" / "rows_0-2000"
    folder.mkdir(parents=True)
    _gzip_bomb(folder / "data_0.ckpt.gz", 3)  # 3 GiB: the child may not map that much
    with gzip.open(folder / "data_1.ckpt.gz", "wb") as f:
        torch.save(good(), f)
    report = tmp_path / "report.json"
    check(tmp_path, report)
    found = codes_by_file(report)
    assert found["rows_0-2000/data_0.ckpt.gz"] == {"EC001"}
    assert not {"EC001", "EC002"} & found.get("rows_0-2000/data_1.ckpt.gz", set())
    res = run("inspect", folder / "data_0.ckpt.gz")
    assert res.returncode == 1 and f"expands to more than {256 << 20} bytes" in res.stderr
    res = run("infer", folder / "data_0.ckpt.gz", "--num-layers", "8")
    assert res.returncode == 2 and "EC001" in res.stderr


def test_gunzip_cap_reads_its_env_var(monkeypatch):
    monkeypatch.delenv(GUNZIP_CAP_ENV, raising=False)
    assert gunzip_cap() == GUNZIP_CAP
    assert gunzip_cap(1 << 20) == 256 << 20  # small files: the 256 MiB floor
    assert gunzip_cap(8 << 20) == 512 << 20  # 64 times the compressed size
    assert gunzip_cap(1 << 30) == GUNZIP_CAP  # never past 1 GiB
    monkeypatch.setenv(GUNZIP_CAP_ENV, "4G")
    assert gunzip_cap() == 4 << 30
    assert gunzip_cap(1 << 20) == 4 << 30  # set: the only bound
    monkeypatch.setenv(GUNZIP_CAP_ENV, "-3")
    with pytest.raises(ShardReadError):
        gunzip_cap()


def test_fifos_devices_and_symlinks_are_never_opened(tmp_path):
    (tmp_path / "contract.yaml").write_text(CONTRACT_TEXT, "utf-8")
    folder = tmp_path / "shards" / "rows_0-2000"
    folder.mkdir(parents=True)
    torch.save(good(), folder / "data_0.ckpt")
    os.mkfifo(folder / "data_1.ckpt")
    (folder / "data_2.ckpt").symlink_to("/dev/zero")
    (folder / "data_3.ckpt").symlink_to(folder / "missing")
    (folder / "loop").symlink_to(folder)
    report = tmp_path / "report.json"
    res = check(tmp_path, report)
    assert set(codes_by_file(report)) == {"rows_0-2000/data_0.ckpt"}  # the others are skipped
    assert res.returncode in (0, 1)
    res = run("check", tmp_path / "contract.yaml", folder / "data_1.ckpt", "--no-sharpness")
    assert res.returncode == 2 and "not a regular file" in res.stderr
    assert run("inspect", folder / "data_1.ckpt").returncode == 1
    with pytest.raises(ShardReadError, match="not a file"):
        inspect_shard(folder / "data_2.ckpt")
