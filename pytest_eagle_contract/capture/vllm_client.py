"""Asking a running vLLM for a shard's hidden states (``record --vllm-url``).

vLLM answers with a file, not the states: a server launched with the ``extract_hidden_states``
speculative method and ``ExampleHiddenStatesConnector`` (see ``vllm_files``) writes each
request's states to ``{shared_storage_path}/{request_id}.safetensors`` and names it in the
answer's ``kv_transfer_params.hidden_states_path``, holding an exclusive ``flock`` on
``{path}.lock`` until the write is done. So the client must run where that folder is
mounted. The request is speculators' (``data_generation/vllm_client.py``): ``POST
/v1/completions`` with the ids as the prompt, ``max_tokens`` 1 and ``return_token_ids``, the
answer's ``prompt_token_ids`` checked against the ids sent.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..errors import CaptureError, CaptureFileError
from .transport import check_url, exchange
from .vllm_files import VllmStates, read_vllm_file

ANSWER_CAP = 4 << 20  # a completion of one token, with the prompt's ids echoed
_NOT_VLLM = (
    "is it vLLM's OpenAI server (vllm serve) launched with --speculative-config "
    '\'{"method": "extract_hidden_states", ...}\' and --kv-transfer-config '
    '\'{"kv_connector": "ExampleHiddenStatesConnector", ...}\'?'
)


def _json(url: str, body: dict[str, Any] | None, timeout: float) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    reply = exchange(url, data, timeout=timeout, cap=ANSWER_CAP)
    try:
        return reply.status, json.loads(reply.body)
    except (ValueError, RecursionError):
        text = reply.body[:200].decode("utf-8", "replace").strip()
        raise CaptureError(
            "EC705", f"{url} answered HTTP {reply.status} with no JSON: {text!r}", _NOT_VLLM
        ) from None


def served_model(url: str, timeout: float) -> tuple[str, str | None]:
    """(the model's name, the server's version) from ``/v1/models`` and ``/version``."""
    base = check_url(url)
    status, models = _json(base + "/v1/models", None, timeout)
    data = models.get("data") if isinstance(models, dict) else None
    if status != 200 or not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise CaptureError(
            "EC705", f"{base}/v1/models answered no model (HTTP {status})", _NOT_VLLM
        )
    name = data[0].get("id")
    if not isinstance(name, str) or not 0 < len(name) < 1000:
        raise CaptureError("EC705", f"{base}/v1/models: a model without a name", _NOT_VLLM)
    status, version = _json(base + "/version", None, timeout)
    found = version.get("version") if isinstance(version, dict) else None
    ok = status == 200 and isinstance(found, str) and len(found) < 100
    return name, found if ok else None


def hidden_states_path(url: str, model: str, ids: list[int], timeout: float) -> Path:
    """The file vLLM wrote for ``ids``: EC702 when the answer names none (the server does not
    extract hidden states), EC705 for an answer of the wrong shape or other prompt ids."""
    base = check_url(url)
    body = {"model": model, "prompt": ids, "max_tokens": 1, "return_token_ids": True}
    status, answer = _json(base + "/v1/completions", body, timeout)
    if status != 200 or not isinstance(answer, dict):
        message = json.dumps(answer)[:300]
        raise CaptureError("EC705", f"{base}/v1/completions: HTTP {status}: {message}", _NOT_VLLM)
    choices = answer.get("choices")
    echoed = (
        choices[0].get("prompt_token_ids")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict)
        else None
    )
    if echoed is not None and echoed != ids:
        raise CaptureError(
            "EC705",
            f"{base}/v1/completions: the server read other prompt ids than the {len(ids)} sent",
            "a server that re-tokenizes or truncates the prompt (max_model_len?)",
        )
    params = answer.get("kv_transfer_params")
    path = params.get("hidden_states_path") if isinstance(params, dict) else None
    if not isinstance(path, str) or not 0 < len(path) < 4096:
        raise CaptureError(
            "EC702",
            f"{base}/v1/completions answered without kv_transfer_params.hidden_states_path",
            _NOT_VLLM,
        )
    return Path(path)


def wait_and_read(path: Path, timeout: float) -> VllmStates:
    """The file once the server's write is done (its ``.lock`` free), read as untrusted."""
    import fcntl
    import os

    lock = Path(f"{path}.lock")
    deadline = time.monotonic() + timeout
    if lock.is_file():
        fd = os.open(lock, os.O_RDONLY)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise CaptureError(
                            "EC705", f"{path}: still being written after {timeout:g} s"
                        ) from None
                    time.sleep(0.05)
        finally:
            os.close(fd)
    if not path.exists():
        raise CaptureError(
            "EC705",
            f"the server wrote {path}, which is not on this machine",
            "run record where the connector's shared_storage_path is mounted",
        )
    try:
        return read_vllm_file(path)
    except CaptureFileError as exc:
        raise CaptureError("EC705", f"the server's file: {exc.message}") from None
