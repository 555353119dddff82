"""The conversations a data pipeline tokenized: JSONL rows, as SpecForge and speculators
read them, each turned into OpenAI messages (``role``, ``content``).

A row holds ``conversations`` or ``messages``: a list of turns, each either OpenAI's
``{"role", "content"}`` (SpecForge's prepared data, speculators' ``messages``) or
ShareGPT's ``{"from", "value"}`` (``human``/``gpt``/``system``, as speculators and
SpecForge's ``prepare_data`` map them). ``reasoning_content`` (or ``thinking``) is kept.
The file is read line by line, each line at most ``EAGLE_TEMPLATE_MAX_BYTES`` x 16, and
no further than the last row asked for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import CodedError
from ..limits import env_bytes

LINE_MAX_BYTES_ENV = "EAGLE_CONVERSATION_MAX_BYTES"
DEFAULT_LINE_MAX_BYTES = 16 << 20  # one conversation; a long agentic trace is a few MiB
ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "chatgpt": "assistant",
    "system": "system",
    "tool": "tool",
}
_KEPT = ("reasoning_content", "thinking", "tool_calls", "name")
_INDEX = re.compile(r"(?:^|[_-])(\d+)$")
Messages = list[dict[str, Any]]


def row_index(stem: str) -> int | None:
    """The row a shard file names (SpecForge's ``data_<i>``), else None."""
    found = _INDEX.search(stem)
    return int(found.group(1)) if found else None


def read_rows(path: Path, wanted: Iterable[int]) -> dict[int, Messages | str]:
    """The rows ``wanted`` of the JSONL ``path``: their messages, or why a row is not a
    conversation (a string). Raises CodedError EC344 when the file cannot be read."""
    want = set(wanted)
    out: dict[int, Messages | str] = {}
    if not want:
        return out
    limit = env_bytes(LINE_MAX_BYTES_ENV, DEFAULT_LINE_MAX_BYTES)
    last = max(want)
    try:
        if not path.is_file():
            raise CodedError("EC344", f"{path}: not a regular file", _HINT)
        with path.open("rb") as f:
            for i in range(last + 1):
                line = f.readline(limit + 1)
                if not line:
                    break
                if len(line) > limit and not line.endswith(b"\n"):
                    raise CodedError(
                        "EC344",
                        f"{path}: row {i} is longer than {limit} bytes",
                        f"set {LINE_MAX_BYTES_ENV} to raise the limit",
                    )
                if i in want:
                    out[i] = _messages(line)
    except OSError as exc:
        raise CodedError("EC344", f"cannot read {path}: {exc}", _HINT) from None
    return out


_HINT = "give the pipeline's JSONL: one conversation per line (ShareGPT or OpenAI messages)"


def _messages(line: bytes) -> Messages | str:
    try:
        row = json.loads(line.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        return f"not JSON: {type(exc).__name__}"
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__}, not an object"
    turns = row.get("messages", row.get("conversations"))
    if not isinstance(turns, list) or not turns:
        return "no 'conversations' or 'messages' list"
    out: Messages = []
    for j, turn in enumerate(turns):
        if not isinstance(turn, dict):
            return f"turn {j} is not an object"
        role = turn.get("role", turn.get("from"))
        content = turn.get("content", turn.get("value"))
        if not isinstance(role, str) or role.lower() not in ROLES:
            return f"turn {j} has no known role ({str(role)[:40]!r})"
        if not isinstance(content, str | list | type(None)):
            return f"turn {j}'s content is not text"
        message: dict[str, Any] = {"role": ROLES[role.lower()], "content": content or ""}
        for key in _KEPT:
            if key in turn:
                message[key] = turn[key]
        if "thinking" in message and "reasoning_content" not in message:
            message["reasoning_content"] = message["thinking"]
        out.append(message)
    return out
