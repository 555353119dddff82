"""A STAND-IN for an SGLang HTTP server, for tests. It is not SGLang.

The real engine runs on CPU only in aux-capture mode (tests/live/test_sglang_live.py runs it:
no draft, no GPU topology, a minute or two to start), so for everything else this small
server answers the few endpoints the capture client uses, in SGLang 0.5.23's wire format
(read from its source, and held against the real server where it runs):

- ``POST /generate`` (``srt/entrypoints/http_server.py``): a JSON ``GenerateReqInput``;
  the answer is ``{"text", "output_ids", "meta_info"}`` where ``meta_info["hidden_states"]``
  is ``[prefill_rows, decode_row, ...]``: element 0 holds one list of floats per prompt
  token that was prefilled (``_append_prefill_hidden_states``: ``tolist()`` of the
  ``[T, width]`` slice), then one row per decode token; with ``max_new_tokens: 1`` there
  is none. Errors are ``{"error": {"message": ...}}`` with HTTP 400
  (``_create_error_response``), e.g. hidden states requested from a server that does not
  return them (``tokenizer_manager._validate_...``), and, for a body that is not JSON,
  FastAPI's ``ErrorResponse`` shape ``{"object": "error", "message", "type", "param",
  "code"}``.
- ``GET /server_info`` (server args + ``version``), ``GET /model_info``
  (``architectures``), ``GET /health``.

The states come from a tiny random-weight Llama (``pytest_eagle_contract.models.tiny``),
captured with SGLang's convention: ``LlamaForCausalLM.set_eagle3_layers_to_capture`` maps
each id k to capture index k + 1 (the default, without ids, is ``[2, L//2, L-3]``, no +1);
``LlamaModel.forward`` captures the residual stream entering layer i when
``i in layers_to_capture`` (so: ascending, duplicates once, an index >= L never), which is
HF's ``hidden_states[i]``; the rows are the concat in the served dtype (bf16). Without aux
capture the rows are the post-norm last layer.

A radix cache is emulated (on unless ``disable_radix_cache``): a prompt sharing a prefix
with an earlier one of the same ``extra_key`` prefills only the rest (SGLang always
recomputes the last token), its rows are only those, and ``meta_info["cached_tokens"]``
says how many were cached. ``extra_key`` is part of the cache key from 0.5.3
(``RadixKey(token_ids, extra_key)``); older releases ignore the field. (The real 0.5.23
recomputes that last row over the cached keys, equal to the full prefill's to rounding;
the stand-in returns the full prefill's row.) ``/flush_cache``
(GET or POST, ``?timeout=``) empties the cache and answers ``Cache flushed...`` as text,
or HTTP 400 ``Flush cache failed.`` while other requests run (``busy``).

``fault``, when set, may take over any request before it is served (for the hostile-server
tests): ``fault(handler, path)`` returns True when it answered; a POST's body is read
first (``handler.request_body``).

Loopback only (127.0.0.1, an ephemeral port), bounded (``max_requests``) and it stops by
itself after ``lifetime_s`` seconds.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import torch

from pytest_eagle_contract.models.tiny import TinySpec, tiny_target

SPEC = TinySpec()  # the demo's tiny Llama: L=8, H=64
ARCH = "LlamaForCausalLM"

_NOT_CONFIGURED = (  # sglang 0.5.23 tokenizer_manager.py
    "The server is not configured to return hidden states. Please set "
    "`--return-hidden-states-mode last`, `--return-hidden-states-mode full`, or the legacy "
    "`--enable-return-hidden-states` flag."
)
_SAMPLING_FIELDS = (  # sglang.api.v1.SamplingParams: unknown keys rejected
    "max_new_tokens",
    "stop",
    "stop_token_ids",
    "stop_regex",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "min_new_tokens",
    "n",
    "json_schema",
    "regex",
    "ebnf",
    "structural_tag",
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "no_stop_trim",
    "stream_interval",
    "logit_bias",
    "sampling_seed",
    "custom_params",
    "beam_width",
    "watermark",
    "choice",
)


@dataclass
class Launch:
    """How the stand-in was "launched" (the SGLang flags it imitates).

    mode: ``aux``  --speculative-algorithm EAGLE3 --enable-return-aux-hidden-states
                   [--return-aux-hidden-state-layer-ids ...]  (0.5.23+)
          ``eagle3``  an EAGLE-3 target (draft ids ``layer_ids``) --enable-return-hidden-states
          ``last-layer``  --enable-return-hidden-states, no EAGLE-3: post-norm last layer
          ``off``  no hidden-state return
    """

    mode: str = "aux"
    layer_ids: list[int] | None = None
    version: str = "0.5.23"
    disable_radix_cache: bool = True
    busy: bool = False  # other clients' requests running: /flush_cache is refused
    max_requests: int = 64
    lifetime_s: float = 120.0
    spec: TinySpec = field(default_factory=lambda: SPEC)
    fault: Callable[[BaseHTTPRequestHandler, str], bool] | None = None

    def honours_extra_key(self) -> bool:
        """``GenerateReqInput.extra_key`` and ``RadixKey.extra_key``: sglang 0.5.3+."""
        return tuple(int(p) for p in self.version.split(".")[:3]) >= (0, 5, 3)

    def layers_to_capture(self) -> list[int]:
        """``set_eagle3_layers_to_capture`` for Llama (sglang srt/models/llama.py)."""
        L = self.spec.num_layers
        if self.layer_ids is None:
            return [2, L // 2, L - 3]
        return [i + 1 for i in self.layer_ids]

    def server_args(self) -> dict[str, Any]:
        aux = self.mode == "aux"
        return {
            "model_path": "tiny-llama-standin",
            "dtype": "bfloat16",
            "enable_return_hidden_states": self.mode in ("eagle3", "last-layer"),
            "return_hidden_states_mode": "full" if self.mode != "off" else None,
            "enable_return_aux_hidden_states": aux,
            "aux_hidden_state_capture": "eagle3" if aux else None,
            "return_aux_hidden_state_layer_ids": self.layer_ids if aux else None,
            # reset to None by handle_aux_hidden_state_capture in aux mode
            "speculative_algorithm": "EAGLE3" if self.mode == "eagle3" else None,
            "speculative_draft_model_path": "draft" if self.mode == "eagle3" else None,
            "disable_radix_cache": self.disable_radix_cache,
            "chunked_prefill_size": 8192,
            "tp_size": 1,
            "pp_size": 1,
        }


class _State:
    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        self._model: Any = None  # built at the first /generate
        self.cache: list[tuple[str | None, list[int]]] = []  # (extra_key, ids) prefilled
        self.requests = 0
        self.flushes = 0  # /flush_cache calls that emptied the cache
        self.bodies: list[Any] = []  # every /generate body received, as parsed
        self.lock = threading.Lock()

    def rows(self, ids: list[int], key: str | None) -> tuple[list[list[float]], int]:
        """The prefill rows SGLang would return for ``ids``, and the cached prefix length."""
        key = key if self.launch.honours_extra_key() else None
        cached = 0 if self.launch.disable_radix_cache else self._cached_prefix(ids, key)
        with torch.no_grad():
            if self._model is None:
                self._model = tiny_target(self.launch.spec)
            out = self._model(torch.tensor([ids]), output_hidden_states=True)
        hidden = out.hidden_states  # [0] = embed, [k] = residual:k (k < L), [L] = final_norm
        L = self.launch.spec.num_layers
        if self.launch.mode in ("aux", "eagle3"):
            capture = sorted({c for c in self.launch.layers_to_capture() if c < L})
            states = torch.cat([hidden[c][0] for c in capture], dim=-1)
        else:
            states = hidden[L][0]
        rows = states.to(torch.bfloat16)[cached:].tolist()
        return rows, cached

    def _cached_prefix(self, ids: list[int], key: str | None) -> int:
        best = 0
        for seen_key, seen in self.cache:
            if seen_key != key:
                continue
            n = 0
            while n < min(len(seen), len(ids)) and seen[n] == ids[n]:
                n += 1
            best = max(best, n)
        self.cache.append((key, list(ids)))
        return min(best, len(ids) - 1)  # SGLang always recomputes the last token


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    request_body = b""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _count(self) -> bool:
        state = self.server.state
        with state.lock:
            state.requests += 1
            over = state.requests > state.launch.max_requests
        if over:
            self._send(503, {"error": {"message": "stand-in request budget spent"}})
            threading.Thread(target=self.server.shutdown, daemon=True).start()
        return not over

    def _text(self, status: int, text: str) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _flush(self) -> None:
        """``/flush_cache`` (http_server.py): text, 200 when flushed, 400 when busy."""
        state = self.server.state
        if state.launch.busy:
            self._text(400, "Flush cache failed.\n")
            return
        with state.lock:
            state.cache.clear()
            state.flushes += 1
        self._text(
            200,
            "Cache flushed.\nPlease check backend logs for more details. (When "
            "there are running or waiting requests, the operation will not be "
            "performed.)\n",
        )

    def _faulted(self) -> bool:
        fault = self.server.state.launch.fault
        return fault is not None and fault(self, urlsplit(self.path).path)

    def do_GET(self) -> None:
        if not self._count() or self._faulted():
            return
        launch = self.server.state.launch
        if urlsplit(self.path).path == "/flush_cache":
            self._flush()
        elif self.path in ("/server_info", "/get_server_info"):
            self._send(
                200, {**launch.server_args(), "version": launch.version, "internal_states": [{}]}
            )
        elif self.path in ("/model_info", "/get_model_info"):
            self._send(
                200,
                {
                    "model_path": "tiny-llama-standin",
                    "is_generation": True,
                    "model_type": "llama",
                    "architectures": [ARCH],
                },
            )
        elif self.path in ("/health", "/health_generate"):
            self._send(200, {})
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.request_body = raw  # for a fault that answers in the request's terms
        if not self._count() or self._faulted():
            return
        if urlsplit(self.path).path == "/flush_cache":
            self._flush()
            return
        if self.path != "/generate":
            self._send(404, {"detail": "Not Found"})
            return
        try:
            body = json.loads(raw)
        except ValueError as exc:
            self._send(
                400,
                {
                    "object": "error",
                    "message": f"JSON decode error: {exc}",
                    "type": "Bad Request",
                    "param": None,
                    "code": 400,
                },
            )
            return
        status, payload = self._generate(body)
        self._send(status, payload)

    def _generate(self, body: Any) -> tuple[int, Any]:
        state = self.server.state
        state.bodies.append(body)
        if not isinstance(body, dict):
            return 400, {"error": "invalid type: sequence, expected struct GenerateRequest"}
        params = body.get("sampling_params") or {}
        for key in params:
            if key not in _SAMPLING_FIELDS:
                listed = ", ".join(f"`{f}`" for f in _SAMPLING_FIELDS)
                return 400, {"error": f"unknown field `{key}`, expected one of {listed}"}
        ids = body.get("input_ids")
        if ids is None:  # io_struct.GenerateReqInput._validate_inputs
            return 400, {
                "error": {"message": "Either text, input_ids or input_embeds should be provided."}
            }
        if ids == []:
            return 400, {"error": {"message": "input_ids cannot be empty."}}
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            return 400, {"error": "invalid type: expected a sequence of token ids"}
        if any(i < 0 or i >= state.launch.spec.vocab_size for i in ids):  # not SGLang's text
            return 400, {
                "error": {
                    "message": "stand-in: an input id lies outside the tiny model's vocabulary"
                }
            }
        key = body.get("extra_key")
        if key is not None and not isinstance(key, str):  # io_struct._normalize_single_inputs
            return 400, {"error": {"message": "extra_key should be a string for a single request."}}
        wants = body.get("return_hidden_states") is True
        if wants and state.launch.mode == "off":
            return 400, {"error": {"message": _NOT_CONFIGURED}}
        with state.lock:
            rows, cached = state.rows(ids, key or None)
        new = int(params.get("max_new_tokens", 128))
        meta: dict[str, Any] = {
            "id": uuid.uuid4().hex,
            "finish_reason": {"type": "length", "length": new},
            "prompt_tokens": len(ids),
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": 1,
            "cached_tokens": cached,
        }
        if wants:
            meta["hidden_states"] = [rows]  # element 0: the prefill rows; no decode rows
        return 200, {"text": " the", "output_ids": [279], "meta_info": meta}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: _State


class SGLangStandin:
    """``with SGLangStandin(Launch(mode="aux", layer_ids=[1, 3, 4])) as url: ...``"""

    def __init__(self, launch: Launch | None = None) -> None:
        self.launch = launch or Launch()
        self._server: _Server | None = None
        self._timer: threading.Timer | None = None

    @property
    def state(self) -> _State:
        """What the stand-in saw: ``requests``, ``flushes``, ``bodies``."""
        assert self._server is not None
        return self._server.state

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> str:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.state = _State(self.launch)
        self._server = server
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        self._timer = threading.Timer(self.launch.lifetime_s, server.shutdown)
        self._timer.daemon = True
        self._timer.start()
        return self.url

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
