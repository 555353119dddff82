"""The stand-in writer (tests/vllm_standin.py) against vLLM's own writer code, release by
release: every wheel in EAGLE_CONTRACT_VLLM_WHEELS whose ExampleHiddenStatesConnector exists
(0.17.0 on). vLLM cannot be imported without its GPU build, so its writer's functions are
taken from the wheel's source by ``ast`` and run as they are, on CPU: ``basic_cache`` (the
rows into the block cache), ``extract_from_kv_cache`` (back out for the request's blocks),
``token_ids_to_tensor`` (the saved ids) and ``_write_tensors`` (``save_file``; from 0.22.0,
before that the connector called ``save_file`` inline on the same dict, checked in its
source). The file they write must be byte-identical to the stand-in's, and readable by
``record --vllm-files``. ``tox -e vllm-writer`` downloads the wheels; never part of the
default run.
"""

from __future__ import annotations

import ast
import os
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from vllm_standin import BLOCK, write_vllm_file

WHEELS = os.environ.get("EAGLE_CONTRACT_VLLM_WHEELS")
if not WHEELS:
    pytest.skip(
        "set EAGLE_CONTRACT_VLLM_WHEELS to a folder of vllm wheels (tox -e vllm-writer)",
        allow_module_level=True,
    )

CONNECTOR = "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"
MODEL = "vllm/model_executor/models/extract_hidden_states.py"
TORCH_UTILS = "vllm/utils/torch_utils.py"


def _version(wheel: Path) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", wheel.name.split("-")[1])[:3])


def _wheels() -> list[Path]:
    found = []
    for wheel in sorted(Path(WHEELS or ".").glob("vllm-*.whl"), key=_version):
        with zipfile.ZipFile(wheel) as z:
            if CONNECTOR in z.namelist():
                found.append(wheel)
    return found


def _functions(source: str, names: Sequence[str], scope: dict[str, Any]) -> dict[str, Any]:
    """The module-level or class-level functions ``names`` of ``source``, defined in ``scope``
    (decorators dropped: ``_write_tensors`` is a staticmethod)."""
    tree = ast.parse(source)
    wanted = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in names:
            node.decorator_list = []
            wanted.append(node)
    module = ast.Module(body=wanted, type_ignores=[])
    exec(compile(module, "<vllm wheel>", "exec"), scope)  # vLLM's own code, from the wheel
    return {n: scope[n] for n in names if n in scope}


class _Event:
    """The CUDA event ``_write_tensors`` waits on: the copy is already done on CPU."""

    def synchronize(self) -> None:
        return None


def _vllm_write(wheel: Path, out: Path, ids: list[int], aux: list[torch.Tensor]) -> Path:
    import numpy as np
    from safetensors.torch import save_file

    with zipfile.ZipFile(wheel) as z:
        connector = z.read(CONNECTOR).decode()
        model = z.read(MODEL).decode()
        utils = z.read(TORCH_UTILS).decode() if TORCH_UTILS in z.namelist() else ""
    scope: dict[str, Any] = {
        "torch": torch,
        "np": np,
        "save_file": save_file,
        "Sequence": Sequence,
        "os": os,
    }
    fns = _functions(connector, ["extract_from_kv_cache", "_write_tensors"], scope)
    fns |= _functions(model, ["basic_cache"], scope)
    fns |= _functions(utils, ["token_ids_to_tensor"], scope) if utils else {}
    stacked = torch.stack(aux, dim=1)  # extract_hidden_states.py (spec decode): dim=1
    tokens, n, hidden = stacked.shape
    blocks = list(range(3, 3 + (tokens + BLOCK - 1) // BLOCK))
    # the cache's layout: [blocks, n, block, H] from 0.29.0 (block_size = kv_cache.shape[2]),
    # [blocks, block, n, H] before; each release's two functions agree with their own
    heads_first = "block_size = kv_cache.shape[2]" in model
    shape = (n, BLOCK) if heads_first else (BLOCK, n)
    cache = torch.zeros(3 + len(blocks) + 1, *shape, hidden, dtype=stacked.dtype)
    slots = torch.tensor([b * BLOCK + o for b in blocks for o in range(BLOCK)])
    fns["basic_cache"](stacked, cache, slots[:tokens])
    rows = fns["extract_from_kv_cache"](cache, slots, tokens)
    to_ids = fns.get("token_ids_to_tensor", lambda x: torch.tensor(x, dtype=torch.int64))
    tensors = {"hidden_states": rows, "token_ids": to_ids(ids).clone()}
    out.mkdir(parents=True, exist_ok=True)
    path = out / "cmpl-vllm.safetensors"
    if "_write_tensors" in fns:
        fns["_write_tensors"](tensors, _Event(), str(path), None)
    else:  # before 0.22.0: the same dict, saved inline
        assert '"hidden_states": hidden_states' in connector
        assert '"token_ids": request.token_ids' in connector
        assert "save_file(tensors, request.filename)" in connector
        save_file(tensors, str(path))
    return path


@pytest.mark.parametrize("wheel", _wheels(), ids=lambda w: w.name.split("-")[1])
def test_the_stand_in_writes_vllms_bytes(wheel, tmp_path):
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 500, (37,), generator=gen)
    aux = [torch.randn(37, 64, generator=gen).to(torch.bfloat16) for _ in range(4)]
    theirs = _vllm_write(wheel, tmp_path / "vllm", ids.tolist(), aux)
    ours = write_vllm_file(tmp_path / "standin", "cmpl-standin", ids, aux)
    assert theirs.read_bytes() == ours.read_bytes()

    from pytest_eagle_contract.capture.vllm_files import read_vllm_file

    read = read_vllm_file(theirs)
    assert torch.equal(read.states, torch.stack(aux, dim=1))
    assert read.token_ids.tolist() == ids.tolist()


def test_some_wheel_was_tested():
    assert _wheels(), f"no vllm wheel with {CONNECTOR} in {WHEELS}"
