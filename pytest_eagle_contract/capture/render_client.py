"""A running engine's renderer: vLLM's ``POST /tokenize`` in its messages form
(``check --render-url URL``), or vLLM's ``POST /v1/chat/completions/render`` when the URL
names that path (what speculators' data generation renders through, its
``render_client.py``: ``{"messages", "add_generation_prompt", "chat_template_kwargs"}``
answered with ``{"token_ids"}``).

The request is vLLM's ``TokenizeChatRequest``: ``{"messages": [...],
"add_generation_prompt": false, "continue_final_message": false, "add_special_tokens":
false, "chat_template_kwargs": {...}}`` (a training sequence is the whole conversation, no
generation prompt; the template writes its own special tokens, as vLLM's chat path does).
The answer is ``TokenizeResponse``: ``{"count", "max_model_len", "tokens",
"token_strs"}``; only ``tokens`` is read, checked to be a list of ids with ``count`` of
them. The exchange is the project's bounded HTTP (``transport.py``); every failure is
CodedError EC347.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import CaptureError, CodedError, UsageError
from .transport import check_url, exchange

ANSWER_CAP = 64 << 20  # the ids of one conversation, with their strings
MAX_ID = 1 << 22
_HINT = (
    "give --render-url the address of vLLM's OpenAI server (vllm serve), e.g. "
    "http://gpu-box:8000: its /tokenize renders messages with the served template"
)


RENDER_PATH = "/v1/chat/completions/render"


def render_url(url: str) -> str:
    """``url`` as the endpoint to ask: the server base's /tokenize, or the render path it
    names; UsageError otherwise."""
    try:
        base = check_url(url)
    except UsageError:
        raise UsageError(
            f"--render-url {url!r}: give the server's http:// or https:// address, "
            "e.g. http://gpu-box:8000"
        ) from None
    if base.endswith(("/tokenize", RENDER_PATH)):
        return base
    return base + "/tokenize"


def served_ids(
    url: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    template_kwargs: Mapping[str, Any] | None = None,
    timeout: float = 60.0,
) -> list[int]:
    """The ids the engine at ``url`` renders ``messages`` to. Raises CodedError EC347."""
    endpoint = render_url(url)
    rendering = endpoint.endswith(RENDER_PATH)
    body: dict[str, Any] = {"messages": [dict(m) for m in messages], "add_generation_prompt": False}
    if not rendering:
        body |= {"continue_final_message": False, "add_special_tokens": False}
    if template_kwargs:
        body["chat_template_kwargs"] = dict(template_kwargs)
    try:
        reply = exchange(endpoint, json.dumps(body).encode(), timeout=timeout, cap=ANSWER_CAP)
    except CaptureError as exc:
        raise CodedError("EC347", f"{endpoint}: {exc.message}", _HINT) from None
    if reply.status != 200:
        text = reply.body[:200].decode("utf-8", "replace").strip()
        raise CodedError("EC347", f"{endpoint} answered HTTP {reply.status}: {text!r}", _HINT)
    try:
        answer = json.loads(reply.body)
    except (ValueError, RecursionError):
        raise CodedError("EC347", f"{endpoint} answered with no JSON", _HINT) from None
    key = "token_ids" if rendering else "tokens"
    tokens = answer.get(key) if isinstance(answer, dict) else None
    if not isinstance(tokens, list) or not all(type(t) is int and 0 <= t < MAX_ID for t in tokens):
        raise CodedError("EC347", f"{endpoint}'s answer has no list of token ids", _HINT)
    count = None if rendering else answer.get("count")
    if count is not None and count != len(tokens):
        raise CodedError(
            "EC347", f"{endpoint} says count {count} but sent {len(tokens)} ids", _HINT
        )
    return tokens
