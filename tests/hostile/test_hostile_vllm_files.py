"""Hostile vLLM capture files (``record --vllm-files``): truncated, wrong dtypes, huge declared
shapes, NaN and Inf, wrong names, shapes that disagree, things that are not files. Each is
EC707 for that file (the others are converted), never a traceback; the sweep's
``vllm-files`` surface (benchmarks/hostile_sweep.py) runs the same cases one per process."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from conftest import no_traceback, run_cli
from safetensors.torch import save

from pytest_eagle_contract.capture.vllm_files import read_vllm_file
from pytest_eagle_contract.errors import CaptureFileError
from pytest_eagle_contract.shells.demo import shipped_contract

T, N, H = 12, 4, 64  # the shipped contract's H; four states as speculators launches
LAUNCH = ["--layer-ids", "2", "4", "5", "8", "--fc-ids", "2", "4", "5"]


def _file(states: torch.Tensor | None = None, ids: torch.Tensor | None = None, **more) -> bytes:
    tensors = {
        "hidden_states": torch.randn(T, N, H).to(torch.bfloat16) if states is None else states,
        "token_ids": torch.arange(T, dtype=torch.int64) if ids is None else ids,
        **more,
    }
    return save({k: v for k, v in tensors.items() if v is not None})


def _raw(header: dict, body: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + body


def _split(data: bytes) -> tuple[dict, bytes]:
    size = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8 : 8 + size]), data[8 + size :]


def _declared(shape: list[int]) -> bytes:
    header, body = _split(_file())
    header["hidden_states"]["shape"] = shape
    return _raw(header, body)


def _with_nan(value: float) -> bytes:
    states = torch.randn(T, N, H).to(torch.bfloat16)
    states[7, 2, 5] = value
    return _file(states)


def cases() -> dict[str, bytes]:
    """name -> the file's bytes, each one vLLM would never write."""
    good = _file()
    header, body = _split(good)
    return {
        "empty": b"",
        "8 bytes": good[:8],
        "cut in the header": good[:40],
        "cut in the body": good[: len(good) - 100],
        "header size 2**62": struct.pack("<Q", 1 << 62) + good[8:],
        "header not JSON": _raw({}, b"")[:8] + b"{not json" + b" " * 100,
        "header a list": _raw([], b""),  # type: ignore[arg-type]
        "metadata of 2 MiB": _raw({**header, "__metadata__": {"x": "y" * (2 << 20)}}, body),
        "huge declared tokens": _declared([1 << 40, N, H]),
        "huge declared states": _declared([T, 1 << 20, H]),
        "declared shape beyond the body": _declared([T, N, H * 2]),
        "int states": _file(torch.zeros(T, N, H, dtype=torch.int32)),
        "float64 states": _file(torch.zeros(T, N, H, dtype=torch.float64)),
        "float8 states": _file(torch.zeros(T, N, H).to(torch.float8_e4m3fn)),
        "float ids": _file(ids=torch.arange(T, dtype=torch.float32)),
        "bool ids": _file(ids=torch.ones(T, dtype=torch.bool)),
        "negative ids": _file(ids=-torch.arange(T, dtype=torch.int64) - 1),
        "2-d states": _file(torch.randn(T, N * H).to(torch.bfloat16)),
        "4-d states": _file(torch.randn(1, T, N, H).to(torch.bfloat16)),
        "2-d ids": _file(ids=torch.arange(T, dtype=torch.int64).reshape(1, T)),
        "rows beside other ids": _file(ids=torch.arange(T + 1, dtype=torch.int64)),
        "no tokens": _file(
            torch.zeros(0, N, H).to(torch.bfloat16), torch.zeros(0, dtype=torch.int64)
        ),
        "NaN state": _with_nan(float("nan")),
        "Inf state": _with_nan(float("inf")),
        "SGLang's names": save(
            {"aux_hidden_states": torch.zeros(T, N * H), "input_ids": torch.arange(T)}
        ),
        "no token_ids": _file(ids=torch.zeros(0)).replace(b"token_ids", b"token_idz"),
        "an extra tensor": _file(extra=torch.zeros(1)),
        "three states for four ids": _file(torch.randn(T, 3, H).to(torch.bfloat16)),
        "another model's width": _file(torch.randn(T, N, 32).to(torch.bfloat16)),
    }


SPECIAL: dict[str, Callable[[Path], None]] = {
    "a folder": lambda p: p.mkdir(),
    "a FIFO": lambda p: os.mkfifo(p),
    "a link to /dev/zero": lambda p: p.symlink_to("/dev/zero"),
}


def _write_all(folder: Path) -> list[str]:
    folder.mkdir(parents=True)
    names = []
    for i, (name, data) in enumerate(cases().items()):
        (folder / f"bad-{i:02d}.safetensors").write_bytes(data)
        names.append(name)
    for i, (name, make) in enumerate(SPECIAL.items()):
        make(folder / f"odd-{i:02d}.safetensors")
        names.append(name)
    return names


@pytest.mark.parametrize("name", list(cases()))
def test_each_hostile_vllm_file_is_ec707(name, tmp_path):
    path = tmp_path / "x.safetensors"
    path.write_bytes(cases()[name])
    with pytest.raises(CaptureFileError) as exc:
        vs = read_vllm_file(path)
        # what the reader accepts, the conversion refuses: the launch's count and width
        from pytest_eagle_contract.capture.vllm_files import Launch, fc_input

        fc_input(vs, Launch((2, 4, 5, 8), (2, 4, 5), 8, 64))
    assert exc.value.code == "EC707" and str(path) in exc.value.message


@pytest.mark.parametrize("name", list(SPECIAL))
def test_what_is_not_a_file_is_ec707(name, tmp_path):
    path = tmp_path / "x.safetensors"
    SPECIAL[name](path)
    with pytest.raises(CaptureFileError, match="not a regular file"):
        read_vllm_file(path)


@pytest.mark.slow
def test_record_over_a_folder_of_hostile_files(tmp_path):
    """One run: every bad file is EC707 on stderr, the one good file is converted."""
    folder = tmp_path / "vllm"
    _write_all(folder)
    (folder / "good.safetensors").write_bytes(_file())
    res = run_cli(
        "record", shipped_contract(), "--vllm-files", folder, *LAUNCH, "-o", tmp_path / "caps"
    )
    no_traceback(res)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "recorded 1 capture file(s)" in res.stdout
    refused = [line for line in res.stderr.splitlines() if " EC707 " in line]
    named = {Path(line.split("EC707 ", 1)[1].split(":", 1)[0]).name for line in refused}
    expected = {p.name for p in folder.iterdir() if p.name != "good.safetensors"}
    assert named == expected
    assert f"{len(expected)} file(s) refused" in res.stderr
