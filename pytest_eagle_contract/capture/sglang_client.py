"""Ask a running SGLang server for the states it would feed the draft (standard library only).

One request per sequence: ``POST /generate`` with the shard's own ``input_ids``,
``return_hidden_states: true`` and one new token. SGLang answers, in
``meta_info["hidden_states"]``, element 0 = the prefill rows (one list of floats per prompt
token, ``batch_result_processor._append_prefill_hidden_states``), then one row per decode
token. The rows are the aux concat ``[T, n_aux * H]`` when the target runs with
``--speculative-algorithm EAGLE3 --enable-return-aux-hidden-states`` (0.5.23+) or as an
EAGLE-3 target with ``--enable-return-hidden-states``; otherwise they are the post-norm
last layer ``[T, H]``. See docs/verify-against-server.md.

Prefix cache: SGLang returns rows only for the tokens it prefilled, so a prompt it has
cached comes back short. Each request carries a fresh ``extra_key``, which SGLang 0.5.3+
puts in the radix-cache key (``RadixKey(token_ids, extra_key)``): nothing is matched and
every token is prefilled. A server that ignores it (older releases) and still answers
from its cache has it flushed (``POST /flush_cache``) and is asked once more, when the
user allows it (:func:`use_server` with ``flush_cache``); else EC703 says how to fix it.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from ..errors import CaptureError
from .files import plain
from .transport import check_timeout, check_url, exchange

if TYPE_CHECKING:
    import torch

MODES = ("aux", "eagle3", "last-layer", "off", "unknown")
# Server arguments worth keeping beside a capture (0.5.14: dataclass fields; 0.5.23:
# resolved_dict(); both under /server_info, /get_server_info on older releases).
_KEPT_ARGS = (
    "model_path",
    "dtype",
    "enable_return_hidden_states",
    "return_hidden_states_mode",
    "enable_return_aux_hidden_states",
    "aux_hidden_state_capture",
    "return_aux_hidden_state_layer_ids",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "disable_radix_cache",
    "chunked_prefill_size",
    "disable_cuda_graph",
    "tp_size",
    "pp_size",
)
INFO_CAP = 4 << 20  # bytes: /server_info, /model_info (0.5.23 sends about 20 KB)
_FLOAT_BYTES = 26  # the longest JSON float (17 digits, sign, point, exponent) and ", "
_VERSION = re.compile(r"\d{1,4}(\.\d{1,6}){1,3}[a-z0-9.+\-]{0,40}", re.IGNORECASE)
_NOT_SGLANG = "is this an SGLang server (python -m sglang.launch_server), reached directly?"
_FLUSH: set[str] = set()  # servers whose prefix cache this process may flush


def use_server(url: object, timeout: object, *, flush_cache: bool = False) -> str:
    """Check a server address and timeout the user gave (UsageError), and note whether this
    run may flush the server's prefix cache (``--sglang-flush-cache``). Returns the base URL."""
    base = check_url(url)
    check_timeout(timeout)
    if flush_cache:
        _FLUSH.add(base)
    return base


def answer_cap(tokens: int, n_aux: int, hidden_size: int) -> int:
    """The most bytes a /generate answer for ``tokens`` ids may take: rows up to twice the
    draft's aux states wide (so a server with more still gets EC704), two extra rows, and
    1 MiB for the rest."""
    width = max(2 * n_aux, n_aux + 2) * hidden_size
    return (tokens + 2) * width * _FLOAT_BYTES + (1 << 20)


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
        """Every field but the URL, as JSON holds it."""
        return {f.name: plain(getattr(self, f.name)) for f in fields(self) if f.name != "url"}


def _parse(body: bytes) -> tuple[bool, Any]:
    try:
        return True, json.loads(body)
    except (ValueError, RecursionError):
        return False, None


def _post(endpoint: str, body: dict[str, Any], timeout: float, cap: int) -> tuple[int, Any]:
    """(HTTP status, parsed JSON) of a JSON POST; EC705 when the answer is not JSON."""
    reply = exchange(endpoint, json.dumps(body).encode(), timeout=timeout, cap=cap)
    ok, payload = _parse(reply.body)
    if not ok:
        text = reply.body[:200].decode("utf-8", "replace").strip()
        raise CaptureError(
            "EC705", f"{endpoint} answered HTTP {reply.status} with no JSON: {text!r}", _NOT_SGLANG
        )
    return reply.status, payload


def _error_message(payload: Any) -> str:
    """SGLang's error bodies: {"error": {"message"}}, {"error": str}, {"message"} (400s)."""
    if isinstance(payload, dict):
        err = payload.get("error")
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])[:2000]
        if isinstance(err, str):
            return err[:2000]
        if "message" in payload:
            return str(payload["message"])[:2000]
    return json.dumps(payload)[:300]


def server_info(url: str, timeout: float = 10.0) -> ServerInfo:
    """Version, architecture and capture mode from /server_info and /model_info.

    Raises :class:`CaptureError` (EC705) when nothing answers or an answer has the wrong
    shape; a server that answers without these endpoints gives an info with unknown fields.
    """
    base = check_url(url)
    info = _first_json(base, "/server_info", "/get_server_info", timeout=timeout)
    model = _first_json(base, "/model_info", "/get_model_info", timeout=timeout)
    for path, payload in (("/server_info", info), ("/model_info", model)):
        if not isinstance(payload, dict):
            raise _unusable(base + path, f"a JSON {type(payload).__name__}, not an object")
    return ServerInfo(
        url=base,
        version=_version(base, info),
        arch=_arch(base, model),
        mode=_mode(info),
        layer_ids=_layer_ids(base, info),
        args={k: info[k] for k in _KEPT_ARGS if k in info},
    )


def _first_json(base: str, *paths: str, timeout: float) -> Any:
    """The JSON of the first of ``paths`` that answers 200 with JSON; {} when none does (an
    older server, a proxy page)."""
    for path in paths:
        reply = exchange(base + path, None, timeout=timeout, cap=INFO_CAP)
        ok, payload = _parse(reply.body)
        if reply.status == 200 and ok:
            return payload
    return {}


def _unusable(endpoint: str, what: str) -> CaptureError:
    return CaptureError("EC705", f"{endpoint} answered {what}", _NOT_SGLANG)


def _version(base: str, info: dict[str, Any]) -> str | None:
    version = info.get("version")
    if version is None:
        return None
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        raise _unusable(
            f"{base}/server_info", f"version {str(version)[:60]!r}, not a release number"
        )
    return version


def _arch(base: str, model: dict[str, Any]) -> str | None:
    archs = _listed(
        f"{base}/model_info",
        model,
        "architectures",
        lambda v: isinstance(v[0], str) and v[0].isidentifier() and len(v[0]) <= 200,
        "class names",
    )
    return None if archs is None else str(archs[0])


def _layer_ids(base: str, info: dict[str, Any]) -> tuple[int, ...] | None:
    ids = _listed(
        f"{base}/server_info",
        info,
        "return_aux_hidden_state_layer_ids",
        lambda v: len(v) <= 1024 and all(type(i) is int and -(2**31) <= i < 2**31 for i in v),
        "layer ids",
    )
    return None if ids is None else tuple(ids)


def _listed(
    where: str, d: dict[str, Any], key: str, ok: Callable[[list[Any]], bool], what: str
) -> list[Any] | None:
    """``d[key]``: None when absent or empty, else a list ``ok`` accepts (EC705 if not)."""
    value = d.get(key)
    if value is None or value == []:
        return None
    if not (isinstance(value, list) and ok(value)):
        raise _unusable(where, f"{key} {str(value)[:80]}, not a list of {what}")
    return value


def _mode(info: dict[str, Any]) -> str:
    if not info:
        return "unknown"
    if info.get("enable_return_aux_hidden_states") or info.get("aux_hidden_state_capture"):
        return "aux"
    returns = (
        info.get("enable_return_hidden_states") or info.get("return_hidden_states_mode") == "full"
    )
    if not returns:
        return "off"
    if str(info.get("speculative_algorithm") or "").upper() == "EAGLE3":
        return "eagle3"
    return "last-layer"


def generate(url: str, input_ids: list[int], timeout: float = 60.0, *, cap: int) -> dict[str, Any]:
    """The raw /generate response for one sequence with hidden states and one new token,
    in at most ``cap`` bytes. A fresh ``extra_key`` keeps SGLang's prefix cache out."""
    body = {
        "input_ids": [int(i) for i in input_ids],
        "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
        "return_hidden_states": True,
        "extra_key": f"eagle-contract-{uuid.uuid4().hex}",
    }
    endpoint = check_url(url) + "/generate"
    status, payload = _post(endpoint, body, timeout, cap)
    if status != 200:
        message = _error_message(payload)
        if "hidden states" in message or "return_hidden_states" in message:
            raise CaptureError(
                "EC702",
                f"the server refuses to return hidden states: {message}",
                "launch the target with --speculative-algorithm EAGLE3 "
                "--enable-return-aux-hidden-states (0.5.23+), or as an EAGLE-3 target with "
                "--enable-return-hidden-states",
            )
        raise CaptureError("EC705", f"{endpoint} answered HTTP {status}: {message}")
    if not isinstance(payload, dict):
        raise CaptureError(
            "EC705",
            f"{endpoint} answered {type(payload).__name__}, not an object",
            "send one sequence per request (input_ids: [int, ...])",
        )
    return payload


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def prefill_rows(payload: dict[str, Any]) -> tuple[list[list[Any]], dict[str, Any]]:
    """Element 0 of ``meta_info["hidden_states"]`` (the prefill rows) and the meta_info."""
    meta = payload.get("meta_info")
    if not isinstance(meta, dict):
        raise CaptureError("EC705", "the /generate answer has no meta_info object")
    states = meta.get("hidden_states")
    if states is None or states == []:
        raise CaptureError(
            "EC702",
            "the /generate answer has no meta_info.hidden_states",
            "this server ignores return_hidden_states: launch with "
            "--enable-return-hidden-states (or --enable-return-aux-hidden-states, 0.5.23+)",
        )
    if not isinstance(states, list):
        raise CaptureError(
            "EC705", f"meta_info.hidden_states is a {type(states).__name__}, not a list"
        )
    first = states[0]
    if isinstance(first, list) and first and _number(first[0]):
        return [first], meta  # a flat row: the server returned only the last token
    if not isinstance(first, list) or not all(isinstance(r, list) for r in first):
        raise CaptureError("EC705", "meta_info.hidden_states[0] is not a list of rows")
    return first, meta


def _to_tensor(rows: list[list[Any]]) -> torch.Tensor:
    """float32 rows -> the narrowest dtype that holds them exactly (the served dtype)."""
    import torch

    try:
        full = torch.tensor(rows, dtype=torch.float32)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        raise CaptureError(
            "EC705",
            "meta_info.hidden_states[0] holds something other than rows of numbers",
            _NOT_SGLANG,
        ) from None
    for dtype in (torch.bfloat16, torch.float16):
        narrow = full.to(dtype)
        if torch.equal(narrow.to(torch.float32), full):
            return narrow
    return full


def capture(
    url: str, input_ids: list[int], n_aux: int, hidden_size: int, timeout: float = 60.0
) -> torch.Tensor:
    """The aux concat ``[T, n_aux * hidden_size]`` SGLang feeds the draft for ``input_ids``.

    In the served dtype (bf16 rows come back as bf16). Raises :class:`CaptureError`:
    EC705 unreachable or an unusable answer, EC702 no aux capture (post-norm last layer or
    hidden states off), EC703 row count != token count, EC704 wrong width.
    """
    base = check_url(url)
    rows, cached = _prefill(base, input_ids, n_aux, hidden_size, timeout)
    why = None
    if len(rows) != len(input_ids) and cached and base in _FLUSH:
        why = flush_cache(base, timeout)
        if why is None:
            rows, cached = _prefill(base, input_ids, n_aux, hidden_size, timeout)
    if len(rows) != len(input_ids):
        raise CaptureError(
            "EC703",
            f"the server returned {len(rows)} prefill rows for {len(input_ids)} input ids",
            _rows_hint(cached, base, why),
        )
    return _to_tensor(rows)


def _prefill(
    base: str, input_ids: list[int], n_aux: int, hidden_size: int, timeout: float
) -> tuple[list[list[Any]], int]:
    """The prefill rows, checked for width (EC702, EC704), and how many tokens were cached."""
    cap = answer_cap(len(input_ids), n_aux, hidden_size)
    rows, meta = prefill_rows(generate(base, input_ids, timeout, cap=cap))
    width = len(rows[0]) if rows else 0
    want = n_aux * hidden_size
    if width == hidden_size and n_aux > 1:
        raise CaptureError(
            "EC702",
            f"the server returned {width}-wide rows (one state of H={hidden_size}), "
            f"not the {n_aux} aux states the draft's fc takes ({want} wide): the post-norm "
            "last layer, aux capture is off",
            "launch with --speculative-algorithm EAGLE3 --enable-return-aux-hidden-states "
            "(0.5.23+), or serve the EAGLE-3 draft (--speculative-algorithm EAGLE3 "
            "--speculative-draft-model-path ...) with --enable-return-hidden-states",
        )
    if any(len(r) != width for r in rows) or width != want:
        found = sorted({len(r) for r in rows})[:8]
        per = f"{width / hidden_size:g} states of {hidden_size}" if width else "empty rows"
        raise CaptureError(
            "EC704",
            f"the server's rows are {found} wide ({per}), the contract's fc input "
            f"{n_aux} * {hidden_size} = {want}",
            "the server captures another number of layers (--return-aux-hidden-state-layer-ids"
            ", the draft's eagle_aux_hidden_state_layer_ids), or target.hidden_size is wrong",
        )
    cached = meta.get("cached_tokens")
    return rows, cached if type(cached) is int and cached > 0 else 0


def flush_cache(url: str, timeout: float) -> str | None:
    """Empty the server's prefix cache (``POST /flush_cache``, 0.4+). None when done, else
    why not: SGLang flushes only when no request is running or waiting (``?timeout=``, from
    0.5.14, waits for that)."""
    base = check_url(url)
    wait = min(timeout / 2, 30.0)
    reply = exchange(f"{base}/flush_cache?timeout={wait:g}", b"", timeout=timeout, cap=1 << 16)
    if reply.status == 200:
        return None
    text = reply.body[:200].decode("utf-8", "replace").strip()
    return f"HTTP {reply.status}: {text or 'no reason given'}"


def _rows_hint(cached: int, base: str, flush_failed: str | None) -> str:
    fix = "or launch the server with --disable-radix-cache"
    if not cached:
        return (
            "a chunked prefill returns only its last chunk's rows: raise "
            "--chunked-prefill-size above the longest shard, or -1"
        )
    came = f"{cached} prompt tokens came from the prefix cache"
    if base not in _FLUSH:
        return (
            f"{came} (this server ignores the request's extra_key, which SGLang 0.5.3+ "
            "honours): let the client flush the cache and ask again with "
            f"--sglang-flush-cache (pytest: --eagle-sglang-flush-cache), {fix}"
        )
    if flush_failed is not None:
        return (
            f"{came} and the cache flush was refused ({flush_failed}; SGLang flushes "
            f"only an idle server): retry when the server is idle, {fix}"
        )
    return f"{came} even after a cache flush (other requests refilled it): retry, {fix}"
