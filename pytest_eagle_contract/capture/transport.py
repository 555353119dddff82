"""HTTP to a server that may misbehave (standard library only).

Every request has one deadline (connect, send, status line, headers and body together: a
server that trickles one byte a second still stops at the deadline), a body cap (a
``Content-Length`` over it is refused unread; a longer body is read in bounded chunks and
refused at the cap), redirects followed only to the same scheme, host and port, and every
failure turned into a :class:`~pytest_eagle_contract.errors.CaptureError` (EC705). A
server found unreachable (refused, no such host, no answer before the deadline) is not
asked again in the same process: the later shards of a run fail at once.
"""

from __future__ import annotations

import http.client
import io
import socket
import time
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urljoin, urlsplit, urlunsplit

from ..errors import CaptureError, ServerUnreachable, UsageError

MAX_TIMEOUT = 86400.0  # seconds; a day is longer than any request should take
MAX_REDIRECTS = 3
_CHUNK = 1 << 16
_REDIRECT = frozenset({301, 302, 303, 307, 308})
_DOWN: dict[str, ServerUnreachable] = {}  # origin -> why, for the rest of the process
_HINT = (
    "start the server (see docs/verify-against-server.md), check --sglang-url, or verify "
    "offline against capture files (--captures DIR)"
)


def check_url(url: object) -> str:
    """``url`` as a server base (``scheme://host[:port][/prefix]``); UsageError otherwise."""
    text = url.strip() if isinstance(url, str) else ""
    try:
        parts = urlsplit(text)
        _ = parts.port  # a bad port raises ValueError
    except ValueError:
        parts = urlsplit("")
    if (
        len(text) > 2048
        or not text.isascii()
        or any(c.isspace() or not c.isprintable() for c in text)
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.query
        or parts.fragment
        or "@" in parts.netloc
    ):
        raise UsageError(
            f"SGLang URL {url!r}: give the server's http:// or https:// address, "
            "e.g. http://gpu-box:30000"
        )
    path = parts.path.rstrip("/").removesuffix("/generate")
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def check_timeout(value: object) -> float:
    """``value`` as a request timeout in seconds; UsageError unless 0 < value <= a day."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (0 < value <= MAX_TIMEOUT)
    ):  # also refuses nan and inf
        raise UsageError(
            f"SGLang timeout {value!r}: give seconds, a number above 0 and at most {MAX_TIMEOUT:g}"
        )
    return float(value)


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    url: str  # after redirects


def exchange(url: str, body: bytes | None, *, timeout: float, cap: int) -> Reply:
    """GET ``url`` (``body`` None) or POST it JSON ``body``, all within ``timeout`` seconds.

    Raises :class:`ServerUnreachable` (remembered for the origin) when nothing answers in
    time, :class:`CaptureError` (EC705) for a body over ``cap`` bytes, a redirect to
    another origin, or an answer that is not HTTP.
    """
    deadline = time.monotonic() + check_timeout(timeout)
    origin = _origin(url)
    if origin in _DOWN:
        down = _DOWN[origin]
        raise ServerUnreachable(
            down.code, f"{down.message} (not asked again in this run)", down.hint
        )
    for _ in range(MAX_REDIRECTS + 1):
        try:
            status, location, data = _one(url, body, deadline, cap, timeout)
        except ServerUnreachable as exc:
            _DOWN[origin] = exc
            raise
        if location is None:
            return Reply(status, data, url)
        try:
            target = urljoin(url, location)
        except ValueError:  # a Location that is no URL
            target = location
        if _origin(target) != origin:
            raise CaptureError(
                "EC705",
                f"{url} redirects to {target[:200]!r}, another host: not followed",
                "if that server is the one, give its address as the SGLang URL",
            )
        url = target
    raise CaptureError("EC705", f"{url}: more than {MAX_REDIRECTS} redirects")


def _origin(url: str) -> str:
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return url
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


def _left(deadline: float, timeout: float, url: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise ServerUnreachable("EC705", f"{url} did not answer within {timeout:g} s", _HINT)
    return left


def _one(
    url: str, body: bytes | None, deadline: float, cap: int, timeout: float
) -> tuple[int, str | None, bytes]:
    """One request: (status, redirect target or None, body)."""
    parts = urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn = cls(parts.hostname or "", parts.port, timeout=_left(deadline, timeout, url))
    try:
        conn.connect()
    except (OSError, ValueError, http.client.HTTPException) as exc:
        conn.close()
        raise ServerUnreachable(
            "EC705", f"SGLang at {url} cannot be reached: {_reason(exc)}", _HINT
        ) from None
    sock = conn.sock
    conn.sock = cast(socket.socket, _DeadlineSocket(sock, deadline))
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request("GET" if body is None else "POST", path, body, headers)
        resp = conn.getresponse()
        if resp.status in _REDIRECT and resp.getheader("Location"):
            return resp.status, str(resp.getheader("Location")), b""
        return resp.status, None, _read(resp, cap, url)
    except TimeoutError:
        raise ServerUnreachable(
            "EC705", f"{url} did not answer within {timeout:g} s", _HINT
        ) from None
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise CaptureError(
            "EC705",
            f"{url} gave no usable HTTP answer: {_reason(exc)}",
            "is this an SGLang server (python -m sglang.launch_server), reached directly?",
        ) from None
    finally:
        conn.close()  # closes nothing: the proxy leaves the socket to its owner, here
        sock.close()


def _read(resp: http.client.HTTPResponse, cap: int, url: str) -> bytes:
    """The body, in chunks, refused beyond ``cap`` bytes (a declared length: before reading)."""
    if resp.length is not None and resp.length > cap:
        raise _too_large(url, f"{resp.length} bytes declared", cap)
    data = bytearray()
    while chunk := resp.read(min(_CHUNK, cap + 1 - len(data))):
        data += chunk
        if len(data) > cap:
            raise _too_large(url, "more", cap)
    return bytes(data)


def _too_large(url: str, size: str, cap: int) -> CaptureError:
    return CaptureError(
        "EC705",
        f"{url} answered {size} than the {cap} bytes this request can need: not read",
        "is this an SGLang server, reached directly?",
    )


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _DeadlineSocket:
    """A connected socket whose every send and receive ends by ``deadline``. Its owner
    closes the socket (http.client would close it under a response still being read)."""

    def __init__(self, sock: Any, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def _arm(self) -> None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        self._sock.settimeout(left)

    def sendall(self, data: Any) -> None:
        self._arm()
        self._sock.sendall(data)

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self))

    def recv_into(self, buffer: Any) -> int:
        self._arm()
        return int(self._sock.recv_into(buffer))

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _DeadlineReader(io.RawIOBase):
    def __init__(self, sock: _DeadlineSocket) -> None:
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._sock.recv_into(buffer)
