"""Ask a running SGLang server for the states it would feed the draft (standard library only).

One request per sequence: ``POST /generate`` with the shard's own ``input_ids``,
``return_hidden_states: true`` and one new token. SGLang answers, in
``meta_info["hidden_states"]``, element 0 = the prefill rows (one list of floats per prompt
token, ``batch_result_processor._append_prefill_hidden_states``), then one row per decode
token. The rows are the aux concat ``[T, n_aux * H]`` when the target runs with
``--speculative-algorithm EAGLE3 --enable-return-aux-hidden-states`` (0.5.23+) or as an
EAGLE-3 target with ``--enable-return-hidden-states``; otherwise they are the post-norm
last layer ``[T, H]``. See docs/verify-against-server.md.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import CaptureError, ServerUnreachable

if TYPE_CHECKING:
    import torch

MODES = ("aux", "eagle3", "last-layer", "off", "unknown")
# Server arguments worth keeping beside a capture (0.5.14: dataclass fields; 0.5.23:
# resolved_dict(); both under /server_info, /get_server_info on older releases).
_KEPT_ARGS = ("model_path", "dtype", "enable_return_hidden_states", "return_hidden_states_mode",
              "enable_return_aux_hidden_states", "aux_hidden_state_capture",
              "return_aux_hidden_state_layer_ids", "speculative_algorithm",
              "speculative_draft_model_path", "disable_radix_cache", "chunked_prefill_size",
              "disable_cuda_graph", "tp_size", "pp_size")






@dataclass(frozen=True)
class ServerInfo:
    """What the server says about itself (best effort: every field may be unknown)."""

    url: str
    version: str | None = None
    arch: str | None = None
    mode: str = "unknown"  # one of MODES
    layer_ids: tuple[int, ...] | None = None  # --return-aux-hidden-state-layer-ids
    args: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "arch": self.arch, "mode": self.mode,
                "layer_ids": None if self.layer_ids is None else list(self.layer_ids),
                "args": self.args}


def _base(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        url = "http://" + url
    return url.removesuffix("/generate")


def _unreachable(url: str, reason: object) -> CaptureError:
    return ServerUnreachable(
        "EC705", f"SGLang at {url} cannot be reached: {reason}",
        "start the server (see docs/verify-against-server.md), check --sglang-url, or verify "
        "offline against capture files (--captures DIR)")


def _request(url: str, body: dict[str, Any] | None, timeout: float) -> tuple[int, Any]:
    """(HTTP status, parsed JSON) for a GET (no body) or a JSON POST."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if body is not None else {}
    req = urllib.request.Request(url, data=data, headers=headers,
                                 method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise _unreachable(url, reason) from None
    try:
        return status, json.loads(raw)
    except ValueError:
        text = raw[:200].decode("utf-8", "replace").strip()
        raise CaptureError("EC705", f"{url} answered HTTP {status} with no JSON: {text!r}",
                           "is this an SGLang server (python -m sglang.launch_server)?") from None


def _error_message(payload: Any) -> str:
    """SGLang's error bodies: {"error": {"message"}}, {"error": str}, {"message"} (400s)."""
    if isinstance(payload, dict):
        err = payload.get("error")
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        if isinstance(err, str):
            return err
        if "message" in payload:
            return str(payload["message"])
    return json.dumps(payload)[:300]


def server_info(url: str, timeout: float = 10.0) -> ServerInfo:
    """Version, architecture and capture mode from /server_info and /model_info.

    Raises :class:`CaptureError` (EC705) when nothing answers; a server that answers
    without these endpoints gives an info with unknown fields.
    """
    base = _base(url)
    info = _first_object(base, ("/server_info", "/get_server_info"), timeout)
    model = _first_object(base, ("/model_info", "/get_model_info"), timeout)
    archs = model.get("architectures") or []
    ids = info.get("return_aux_hidden_state_layer_ids")
    return ServerInfo(
        url=base, version=info.get("version"), arch=archs[0] if archs else None,
        mode=_mode(info), layer_ids=tuple(int(i) for i in ids) if ids else None,
        args={k: info[k] for k in _KEPT_ARGS if k in info})


def _first_object(base: str, paths: tuple[str, ...], timeout: float) -> dict[str, Any]:
    """The first of ``paths`` that answers a JSON object; {} when none does."""
    for path in paths:
        try:
            status, payload = _request(base + path, None, timeout)
        except ServerUnreachable:
            raise
        except CaptureError:
            continue  # answered, but not JSON: a proxy page, an older server
        if status == 200 and isinstance(payload, dict):
            return payload
    return {}


def _mode(info: dict[str, Any]) -> str:
    if not info:
        return "unknown"
    if info.get("enable_return_aux_hidden_states") or info.get("aux_hidden_state_capture"):
        return "aux"
    returns = info.get("enable_return_hidden_states") or info.get(
        "return_hidden_states_mode") == "full"
    if not returns:
        return "off"
    if str(info.get("speculative_algorithm") or "").upper() == "EAGLE3":
        return "eagle3"
    return "last-layer"


def generate(url: str, input_ids: list[int], timeout: float = 60.0) -> dict[str, Any]:
    """The raw /generate response for one sequence with hidden states and one new token."""
    body = {"input_ids": [int(i) for i in input_ids],
            "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
            "return_hidden_states": True}
    endpoint = _base(url) + "/generate"
    status, payload = _request(endpoint, body, timeout)
    if status != 200:
        message = _error_message(payload)
        if "hidden states" in message or "return_hidden_states" in message:
            raise CaptureError(
                "EC702", f"the server refuses to return hidden states: {message}",
                "launch the target with --speculative-algorithm EAGLE3 "
                "--enable-return-aux-hidden-states (0.5.23+), or as an EAGLE-3 target with "
                "--enable-return-hidden-states")
        raise CaptureError("EC705", f"{endpoint} answered HTTP {status}: {message}")
    if not isinstance(payload, dict):
        raise CaptureError("EC705", f"{endpoint} answered {type(payload).__name__}, not an "
                           "object", "send one sequence per request (input_ids: [int, ...])")
    return payload


def prefill_rows(payload: dict[str, Any]) -> tuple[list[list[float]], dict[str, Any]]:
    """Element 0 of ``meta_info["hidden_states"]`` (the prefill rows) and the meta_info."""
    meta = payload.get("meta_info")
    if not isinstance(meta, dict):
        raise CaptureError("EC705", "the /generate answer has no meta_info object")
    states = meta.get("hidden_states")
    if not states:
        raise CaptureError(
            "EC702", "the /generate answer has no meta_info.hidden_states",
            "this server ignores return_hidden_states: launch with "
            "--enable-return-hidden-states (or --enable-return-aux-hidden-states, 0.5.23+)")
    first = states[0]
    if isinstance(first, list) and first and isinstance(first[0], (int, float)):
        return [first], meta  # a flat row: the server returned only the last token
    if not isinstance(first, list) or not all(isinstance(r, list) for r in first):
        raise CaptureError("EC705", "meta_info.hidden_states[0] is not a list of rows")
    return first, meta


def _to_tensor(rows: list[list[float]]) -> torch.Tensor:
    """float32 rows -> the narrowest dtype that holds them exactly (the served dtype)."""
    import torch

    full = torch.tensor(rows, dtype=torch.float32)
    for dtype in (torch.bfloat16, torch.float16):
        narrow = full.to(dtype)
        if torch.equal(narrow.to(torch.float32), full):
            return narrow
    return full


def capture(url: str, input_ids: list[int], n_aux: int, hidden_size: int,
            timeout: float = 60.0) -> torch.Tensor:
    """The aux concat ``[T, n_aux * hidden_size]`` SGLang feeds the draft for ``input_ids``.

    In the served dtype (bf16 rows come back as bf16). Raises :class:`CaptureError`:
    EC705 unreachable, EC702 no aux capture (post-norm last layer or hidden states off),
    EC703 row count != token count, EC704 wrong width.
    """
    rows, meta = prefill_rows(generate(url, input_ids, timeout))
    tokens = len(input_ids)
    width = len(rows[0]) if rows else 0
    want = n_aux * hidden_size
    if width == hidden_size and n_aux > 1:
        raise CaptureError(
            "EC702", f"the server returned {width}-wide rows (one state of H={hidden_size}), "
            f"not the {n_aux} aux states the draft's fc takes ({want} wide): the post-norm "
            "last layer, aux capture is off",
            "launch with --speculative-algorithm EAGLE3 --enable-return-aux-hidden-states "
            "(0.5.23+), or serve the EAGLE-3 draft (--speculative-algorithm EAGLE3 "
            "--speculative-draft-model-path ...) with --enable-return-hidden-states")
    if any(len(r) != width for r in rows) or width != want:
        found = sorted({len(r) for r in rows})
        per = f"{width / hidden_size:g} states of {hidden_size}" if width else "empty rows"
        raise CaptureError(
            "EC704", f"the server's rows are {found} wide ({per}), the contract's fc input "
            f"{n_aux} * {hidden_size} = {want}",
            "the server captures another number of layers (--return-aux-hidden-state-layer-ids"
            ", the draft's eagle_aux_hidden_state_layer_ids), or target.hidden_size is wrong")
    if len(rows) != tokens:
        cached = meta.get("cached_tokens")
        why = (f"{cached} prompt tokens came from the prefix cache, only the rest were "
               "prefilled: launch with --disable-radix-cache" if cached else
               "a chunked prefill returns only its last chunk's rows: raise "
               "--chunked-prefill-size above the longest shard, or -1")
        raise CaptureError("EC703", f"the server returned {len(rows)} prefill rows for "
                           f"{tokens} input ids", why)
    return _to_tensor(rows)
