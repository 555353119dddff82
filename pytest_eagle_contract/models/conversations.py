"""The conversations a data pipeline tokenized: JSONL rows, read as the trainer that made
the shards reads them, each row turned into the OpenAI messages it rendered.

A line holds ``conversations`` or ``messages``: a list of turns, each OpenAI's ``{"role",
"content"}`` or ShareGPT's ``{"from", "value"}``. Both trainers map ``human``/``user`` to
user and ``gpt``/``assistant`` to assistant; then (from their data code):

- SpecForge (``specforge/data/parse.py``, ``GeneralParser``): keeps ``role``, ``content``
  and ``tool_calls`` (``ThinkingParser``, for thinking data, also ``reasoning_content``),
  keeps a leading system turn, drops turns before the first user turn, and cuts the
  conversation at a turn out of order (an assistant not after a user or tool, a tool not
  after an assistant or tool). One conversation is one row (``data_<i>``).
- speculators (``data_generation/preprocessing.py``, ``_normalize_conversation``): an
  unknown role is an assistant; keeps ``tool_calls``, ``tool_call_id``, and the reasoning
  as both ``thinking`` and ``reasoning_content``. Each assistant turn after the first
  message is a row of its own: the conversation up to and including it (``hs_<i>`` is
  row i, counted over the file's conversations in order).

The file is read line by line, a line at most ``EAGLE_CONVERSATION_MAX_BYTES``, and no
further than the last row asked for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..errors import CodedError
from ..limits import env_bytes

LINE_MAX_BYTES_ENV = "EAGLE_CONVERSATION_MAX_BYTES"
DEFAULT_LINE_MAX_BYTES = 16 << 20  # one conversation; a long agentic trace is a few MiB
MAX_TURNS = 1 << 14  # turns read from one conversation
_USER, _ASSISTANT = frozenset({"human", "user"}), frozenset({"gpt", "assistant"})
_INDEX = re.compile(r"(?:^|[_-])(\d+)$")
_HINT = "give the pipeline's JSONL: one conversation per line (ShareGPT or OpenAI messages)"
Messages = list[dict[str, Any]]
PER_TURN_FORMATS = frozenset({"speculators"})  # one row per assistant turn


def row_index(stem: str) -> int | None:
    """The row a shard file names (SpecForge's ``data_<i>``, speculators' ``hs_<i>``)."""
    found = _INDEX.search(stem)
    return int(found.group(1)) if found else None


def read_rows(
    path: Path, wanted: Iterable[int], *, format: str = "specforge", thinking: bool = False
) -> dict[int, Messages | str]:
    """The rows ``wanted`` of the JSONL ``path`` as ``format``'s trainer reads them: their
    messages, or why a line is not a conversation (a string). Raises CodedError EC344 when
    the file cannot be read."""
    want = set(wanted)
    out: dict[int, Messages | str] = {}
    if not want:
        return out
    last = max(want)
    per_turn = format in PER_TURN_FORMATS
    row = 0
    for line in _lines(path):
        turns = _turns(line)
        if isinstance(turns, str):
            rows: list[Messages | str] = [turns]
        elif per_turn:
            rows = list(_per_turn(_speculators(turns)))
        else:
            rows = [_specforge(turns, thinking)]
        for one in rows:
            if row in want:
                out[row] = one
            row += 1
        if row > last:
            break
    return out


def _lines(path: Path) -> Iterator[bytes]:
    limit = env_bytes(LINE_MAX_BYTES_ENV, DEFAULT_LINE_MAX_BYTES)
    try:
        if not path.is_file():
            raise CodedError("EC344", f"{path}: not a regular file", _HINT)
        with path.open("rb") as f:
            i = 0
            while line := f.readline(limit + 1):
                if len(line) > limit and not line.endswith(b"\n"):
                    raise CodedError(
                        "EC344",
                        f"{path}: line {i} is longer than {limit} bytes",
                        f"set {LINE_MAX_BYTES_ENV} to raise the limit",
                    )
                yield line
                i += 1
    except OSError as exc:
        raise CodedError("EC344", f"cannot read {path}: {exc}", _HINT) from None


def _turns(line: bytes) -> list[dict[str, Any]] | str:
    """The line's turns with ``role`` and ``content`` (ShareGPT's names mapped), else why
    it is not a conversation."""
    try:
        data = json.loads(line.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        return f"not JSON: {type(exc).__name__}"
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    turns = data.get("conversations", data.get("messages"))
    if not isinstance(turns, list) or not turns:
        return "no 'conversations' or 'messages' list"
    out = []
    for j, turn in enumerate(turns[:MAX_TURNS]):
        if not isinstance(turn, dict):
            return f"turn {j} is not an object"
        role = turn.get("role", turn.get("from"))
        content = turn.get("content") or turn.get("value") or ""
        if not isinstance(role, str):
            return f"turn {j} has no role"
        if not isinstance(content, str | list):
            return f"turn {j}'s content is not text"
        role = "user" if role in _USER else "assistant" if role in _ASSISTANT else role
        out.append({**turn, "role": role, "content": content})
    return out


def _specforge(turns: list[dict[str, Any]], thinking: bool) -> Messages:
    """SpecForge's GeneralParser (ThinkingParser with ``thinking``): its keys, its order."""
    keys = {"role", "content", "tool_calls"} | ({"reasoning_content"} if thinking else set())
    messages: Messages = []
    if turns[0]["role"] == "system":
        messages.append({"role": "system", "content": turns[0]["content"]})
        turns = turns[1:]
    while turns and turns[0]["role"] != "user":
        turns = turns[1:]
    for j, turn in enumerate(turns):
        role = turn["role"]
        before = turns[j - 1]["role"] if j else None
        if j and role == "tool" and before not in ("assistant", "tool"):
            break
        if j and role == "assistant" and before not in ("user", "tool"):
            break
        messages.append({k: v for k, v in turn.items() if k in keys})
    return messages


def _speculators(turns: list[dict[str, Any]]) -> Messages:
    """speculators' _normalize_conversation: unknown roles are the assistant's."""
    out: Messages = []
    for turn in turns:
        role = turn["role"] if turn["role"] in ("user", "assistant", "system", "tool") else None
        message: dict[str, Any] = {"role": role or "assistant", "content": turn["content"]}
        for key in ("tool_calls", "tool_call_id"):
            if turn.get(key):
                message[key] = turn[key]
        reasoning = turn.get("thinking") or turn.get("reasoning_content")
        if reasoning:
            message["thinking"] = message["reasoning_content"] = reasoning
        out.append(message)
    return out


def _per_turn(messages: Messages) -> Iterator[Messages]:
    """speculators' rows: for each assistant turn after the first message, the
    conversation up to and including it."""
    for j, message in enumerate(messages):
        if j and message["role"] == "assistant":
            yield messages[: j + 1]
