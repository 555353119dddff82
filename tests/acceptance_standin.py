"""A STAND-IN for a serving engine running speculative decoding, for tests. It is not
llama-server, SGLang or vLLM, and it runs no model.

It answers the requests ``eagle-contract measure`` sends, in each engine's wire format as
read from its released code, with acceptance counters the test controls: every request
runs greedy rounds of ``k`` draft tokens whose accepted counts cycle through ``accepts``.
A request for ``n`` new tokens gets its first token from the prefill, then rounds until
``n`` tokens are out, as llama-server schedules them (``server-context.cpp``:
``get_n_draft_max`` drafts at most ``n_remaining - 1``; with none left to draft, one plain
decode step):

- ``llama.cpp``: ``POST /completion`` answers ``timings`` with ``predicted_n``,
  ``draft_n`` and ``draft_n_accepted`` (the last two only when the slot drafted,
  ``server-common.cpp:99``); ``GET /metrics`` (only with ``metrics=True``, else HTTP 501
  as a server launched without ``--metrics``) the ``llamacpp:`` counters of
  ``server-task.cpp:to_metrics``, the per-position one labelled ``position``.
- ``sglang``: ``POST /generate`` answers ``meta_info`` with ``completion_tokens`` and, when
  a verify round ran, ``spec_verify_ct``, ``spec_num_correct_drafts``,
  ``spec_num_proposed_drafts`` (rounds * k), ``spec_accept_length`` and
  ``spec_correct_drafts_histogram`` (``tokenizer_manager._calculate_spec_decoding_metrics``,
  0.5.23).
- ``vllm``: ``GET /v1/models``, ``GET /version``, ``POST /v1/completions`` and ``GET
  /metrics`` with ``prometheus_client``'s text for ``vllm:spec_decode_*_total`` labelled
  ``engine`` and ``model_name`` (per position also ``position``), beside their
  ``_created`` samples (``v1/spec_decode/metrics.py``, 0.34.0). The counters move
  ``lag_s`` seconds after the answer (vLLM records a step's stats after its outputs).

``draft=False`` serves as the engine without a draft; ``fault`` may answer any request
instead (``fault(handler, path) -> bool``). Loopback only, an ephemeral port.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Engine:
    kind: str  # llama.cpp, sglang or vllm
    accepts: tuple[int, ...] = (2,)
    k: int = 4
    draft: bool = True
    metrics: bool = True
    lag_s: float = 0.0
    fault: Callable[[Any, str], bool] | None = None
    counters: dict[str, int] = field(
        default_factory=lambda: dict(rounds=0, drafted=0, accepted=0, generated=0)
    )
    per_pos: list[int] = field(default_factory=list)
    requests: list[Any] = field(default_factory=list)
    _turn: int = 0

    def run(self, n: int) -> dict[str, Any]:
        """One request of ``n`` new tokens: its rounds, drafted, accepted, histogram."""
        out: dict[str, Any] = {"rounds": 0, "drafted": 0, "accepted": 0, "generated": n}
        out.update(hist=[0] * (self.k + 1), pos=[0] * self.k)
        left = n - 1  # the prefill's token
        while left > 0:
            draft = min(self.k, left - 1) if self.draft else 0
            if draft <= 0:
                left -= 1
                continue
            a = min(self.accepts[self._turn % len(self.accepts)], draft)
            self._turn += 1
            out["rounds"] += 1
            out["drafted"] += draft if self.kind != "sglang" else self.k
            out["accepted"] += a
            out["hist"][a] += 1
            for i in range(a):
                out["pos"][i] += 1
            left -= a + 1
        return out

    def record(self, got: dict[str, Any]) -> None:
        def add() -> None:
            for key in ("rounds", "drafted", "accepted", "generated"):
                self.counters[key] += got[key]
            self.per_pos += [0] * (self.k - len(self.per_pos))
            for i, v in enumerate(got["pos"]):
                self.per_pos[i] += v

        if self.lag_s:
            threading.Timer(self.lag_s, add).start()
        else:
            add()

    def prometheus(self) -> str:
        c = self.counters
        if self.kind == "llama.cpp":
            lines = []
            for name, value in (
                ("spec_decode_num_draft_tokens_total", c["drafted"]),
                ("spec_decode_num_accepted_tokens_total", c["accepted"]),
                ("spec_decode_num_drafts_total", c["rounds"]),
            ):
                lines += [
                    f"# HELP llamacpp:{name} Speculative",
                    f"# TYPE llamacpp:{name} counter",
                    f"llamacpp:{name} {value}",
                ]
            if self.per_pos:
                lines.append(
                    "# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter"
                )
                lines += [
                    f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {v}'
                    for i, v in enumerate(self.per_pos)
                ]
            return "\n".join(lines) + "\n"
        labels = 'engine="0",model_name="tiny"'
        lines = [
            "# HELP vllm:num_requests_running Number of requests.",
            f"vllm:num_requests_running{{{labels}}} 0.0",
            "# TYPE vllm:generation_tokens counter",
            f"vllm:generation_tokens_total{{{labels}}} {float(c['generated'])}",
        ]
        if self.draft:
            for name, value in (
                ("spec_decode_num_drafts", c["rounds"]),
                ("spec_decode_num_draft_tokens", c["drafted"]),
                ("spec_decode_num_accepted_tokens", c["accepted"]),
            ):
                lines += [
                    f"# TYPE vllm:{name} counter",
                    f"vllm:{name}_total{{{labels}}} {float(value)}",
                    f"vllm:{name}_created{{{labels}}} 1.7e9",
                ]
            lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter")
            per = self.per_pos or [0] * self.k
            name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
            lines += [f'{name}{{{labels},position="{i}"}} {float(v)}' for i, v in enumerate(per)]
        return "\n".join(lines) + "\n"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: Any, text: bool = False) -> None:
        body = payload.encode() if text else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if text else "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        e = self.server.engine
        if e.fault is not None and e.fault(self, self.path):
            return
        if self.path == "/metrics":
            if e.kind == "sglang" or (e.kind == "llama.cpp" and not e.metrics):
                self._send(
                    501,
                    {
                        "error": {
                            "code": 501,
                            "message": "This server does not support metrics endpoint.",
                            "type": "not_supported_error",
                        }
                    },
                )
                return
            self._send(200, e.prometheus(), text=True)
        elif self.path == "/v1/models" and e.kind == "vllm":
            self._send(200, {"object": "list", "data": [{"id": "tiny", "object": "model"}]})
        elif self.path == "/version" and e.kind == "vllm":
            self._send(200, {"version": "0.34.0"})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        e = self.server.engine
        size = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(size) or b"null")
        e.requests.append(body)
        if e.fault is not None and e.fault(self, self.path):
            return
        if e.kind == "llama.cpp" and self.path == "/completion":
            n = body["n_predict"]
            got = e.run(n)
            timings: dict[str, Any] = {"prompt_n": len(body["prompt"]), "predicted_n": n}
            if got["drafted"]:
                timings.update(draft_n=got["drafted"], draft_n_accepted=got["accepted"])
            e.record(got)
            self._send(200, {"content": "x" * n, "tokens": [], "stop": True, "timings": timings})
        elif e.kind == "sglang" and self.path == "/generate":
            n = body["sampling_params"]["max_new_tokens"]
            got = e.run(n)
            meta: dict[str, Any] = {"prompt_tokens": len(body["input_ids"]), "completion_tokens": n}
            if got["rounds"]:
                hist = got["hist"]
                while len(hist) > 1 and hist[-1] == 0:
                    hist.pop()
                meta.update(
                    spec_accept_rate=got["accepted"] / got["drafted"],
                    spec_accept_length=n / got["rounds"],
                    spec_num_correct_drafts=got["accepted"],
                    spec_num_proposed_drafts=got["drafted"],
                    spec_verify_ct=got["rounds"],
                    spec_correct_drafts_histogram=hist,
                )
            self._send(200, {"text": "x", "output_ids": [1] * n, "meta_info": meta})
        elif e.kind == "vllm" and self.path == "/v1/completions":
            n = body["max_tokens"]
            e.record(e.run(n))
            usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n}
            choices = [{"index": 0, "text": "x", "finish_reason": "length"}]
            self._send(200, {"id": "cmpl-1", "choices": choices, "usage": usage})
        else:
            self._send(404, {"error": "not found"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    engine: Engine


class EngineStandin:
    """``with EngineStandin(Engine("vllm", accepts=(3, 1))) as url: ...``"""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._server: _Server | None = None

    def __enter__(self) -> str:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.engine = self.engine
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
        time.sleep(0)
