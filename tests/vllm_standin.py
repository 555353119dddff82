"""A stand-in for vLLM's hidden-state writer (not vLLM, which needs a GPU to serve): the
files an ``extract_hidden_states`` server with ``ExampleHiddenStatesConnector`` writes, from
a tiny transformers model's states, byte for byte as vLLM writes them.

Why these bytes, from vLLM 0.34.0's wheel (``tests/release/test_vllm_writer.py`` runs vLLM's own
functions from the wheel, under ``tox -e vllm-writer``, and checks the bytes are equal):

- ``v1/worker/gpu/spec_decode/extract_hidden_states.py:133``: the target's aux list is
  ``torch.stack(aux_hidden_states, dim=1)`` -> [T, n, H], in the list's order (the target's
  layer loop appends in ascending layer order), in the model dtype (``self.dtype``, l. 47-53).
- ``model_executor/models/extract_hidden_states.py:81-90`` (``basic_cache``): the [T, n, H]
  rows go into a cache [blocks, n, block_size, H] at ``slot // block_size, :, slot %
  block_size`` (from 0.29.0; [blocks, block_size, n, H] before: the same rows come out);
  ``distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py:37-45``
  (``extract_from_kv_cache``) reads them back with the same indexing, the request's blocks
  in order, cut to ``num_tokens``.
- same connector, l. 416-419: the tensors saved are ``{"hidden_states": pinned_hs,
  "token_ids": pending.token_ids.clone()}``, the ids ``token_ids_to_tensor(prompt_token_ids)``
  (l. 546; int64, ``utils/torch_utils.py:98-103``); l. 329-347 (``_write_tensors``):
  ``save_file(tensors, filename)``, no metadata; l. 497-499: ``{shared_storage_path}/
  {req_id}.safetensors``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import save_file

from pytest_eagle_contract.layers import Layer
from pytest_eagle_contract.models.reference import capture_canonical

BLOCK = 16  # cache_config.block_size's default


def aux_list(model: object, ids: torch.Tensor, layer_ids: Sequence[int]) -> list[torch.Tensor]:
    """What vLLM's target appends for ``layer_ids``: residual:k for id k, ascending."""
    states = capture_canonical(model, ids)
    return [states[Layer(k)].to(torch.bfloat16) for k in sorted(set(layer_ids))]


def through_cache(stacked: torch.Tensor, first_block: int = 3) -> torch.Tensor:
    """The rows written into a block cache and read back for one request (as vLLM does)."""
    tokens, n, hidden = stacked.shape
    blocks = list(range(first_block, first_block + (tokens + BLOCK - 1) // BLOCK))
    cache = torch.zeros(first_block + len(blocks) + 1, n, BLOCK, hidden, dtype=stacked.dtype)
    slots = torch.tensor([b * BLOCK + o for b in blocks for o in range(BLOCK)])[:tokens]
    cache[slots // BLOCK, :, slots % BLOCK] = stacked
    return cache[slots // BLOCK, :, slots % BLOCK][:tokens]


def write_vllm_file(out: Path, name: str, ids: torch.Tensor, aux: Sequence[torch.Tensor]) -> Path:
    """One file as the connector writes it: ``{out}/{name}.safetensors``."""
    stacked = torch.stack(list(aux), dim=1)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.safetensors"
    tensors = {
        "hidden_states": through_cache(stacked).contiguous(),
        "token_ids": torch.as_tensor(ids, dtype=torch.int64).clone(),
    }
    save_file(tensors, str(path))
    return path


class VllmServer:
    """A stand-in for ``vllm serve`` with ``extract_hidden_states`` and the connector (not
    vLLM): ``/v1/models``, ``/version`` and ``/v1/completions``, whose answer names the file
    it wrote under ``storage`` (``kv_transfer_params.hidden_states_path``), as vLLM 0.34.0's
    ``ExampleHiddenStatesConnector.request_finished`` does (l. 550-556), the ``.lock`` held
    while writing. ``mode``: ``ok``; ``no-params`` (a server without the connector);
    ``other-ids`` (the prompt read differently); ``elsewhere`` (a path not on this machine);
    ``garbage`` (a file that is no safetensors)."""

    def __init__(self, model: object, layer_ids: Sequence[int], storage: Path, mode: str = "ok"):
        self.model, self.layer_ids, self.storage, self.mode = model, layer_ids, storage, mode
        self.requests = 0

    def __enter__(self) -> str:
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return None

            def _send(self, payload: object, status: int = 200) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._send({"object": "list", "data": [{"id": "tiny", "object": "model"}]})
                elif self.path == "/version":
                    self._send({"version": "0.34.0"})
                else:
                    self._send({"error": "not found"}, 404)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests += 1
                ids = list(body["prompt"])
                name = f"cmpl-{outer.requests:04d}-0"
                path = outer.write(name, ids)
                echoed = ids[::-1] if outer.mode == "other-ids" else ids
                answer: dict[str, object] = {
                    "id": name,
                    "choices": [{"text": "x", "prompt_token_ids": echoed, "index": 0}],
                }
                if outer.mode != "no-params":
                    answer["kv_transfer_params"] = {"hidden_states_path": str(path)}
                self._send(answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def write(self, name: str, ids: list[int]) -> Path:
        import fcntl
        import os

        if self.mode == "elsewhere":
            return Path("/nonexistent-vllm-storage") / f"{name}.safetensors"
        self.storage.mkdir(parents=True, exist_ok=True)
        path = self.storage / f"{name}.safetensors"
        fd = os.open(f"{path}.lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if self.mode == "garbage":
                path.write_bytes(b"\x00" * 64)
            else:
                t = torch.tensor(ids)
                write_vllm_file(self.storage, name, t, aux_list(self.model, t, self.layer_ids))
        finally:
            os.close(fd)
        return path

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
