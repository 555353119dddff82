"""Hostile servers (issue 16): the capture client against a stand-in (tests/sglang_standin.py,
not SGLang) that misbehaves in each way seen -- huge bodies, a trickle, a hang, protocol
garbage, wrong JSON shapes, redirects to another host. Each ends in a coded finding for the
shard (the run goes on) or a usage error (exit 2): never a traceback, and the CLI child
runs under a 3 GiB address-space limit. A dead server costs one timeout per run, not one
per shard: counted in the requests the stand-in saw, never in seconds."""

from __future__ import annotations

import json
import select
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from sglang_standin import Launch, SGLangStandin

from pytest_eagle_contract.capture import transport
from pytest_eagle_contract.capture.sglang_client import capture, server_info
from pytest_eagle_contract.errors import CaptureError
from pytest_eagle_contract.shards.discovery import discover
from pytest_eagle_contract.shards.reading import read_sample
from pytest_eagle_contract.shells.cli import main
from pytest_eagle_contract.shells.demo import SPEC, shipped_contract, write_demo_shards

MEMORY = 3 << 30
H, N_AUX = SPEC.hidden_size, 3
Fault = Callable[[Any, str], bool]


@pytest.fixture(autouse=True)
def _fresh_run() -> Any:
    """Each test is its own run: no server remembered as down from another."""
    transport._DOWN.clear()
    yield
    transport._DOWN.clear()


# -- the misbehaviours -------------------------------------------------------------------


def _raw(data: bytes) -> Fault:
    """``data`` is the whole answer, then the connection closes."""

    def fault(h: Any, path: str) -> bool:
        h.wfile.write(data)
        return True

    return fault


def _answer(payload: object, status: int = 200) -> Fault:
    """Well-formed HTTP carrying ``payload`` (bytes, JSON, or a function of the ids sent)."""

    def fault(h: Any, path: str) -> bool:
        value = payload(_ids_of(h)) if callable(payload) else payload
        body = value if isinstance(value, bytes) else json.dumps(value).encode()
        h.send_response(status)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
        return True

    return fault


def _stream(head: bytes, piece: bytes, total: int = 600_000_000) -> Fault:
    """``head``, then ``piece`` again and again up to ``total`` bytes or the client leaving."""

    def fault(h: Any, path: str) -> bool:
        try:
            h.wfile.write(head)
            for _ in range(total // len(piece)):
                h.wfile.write(piece)
        except OSError:
            pass
        return True

    return fault


def _redirect(where: Callable[[Any], str]) -> Fault:
    def fault(h: Any, path: str) -> bool:
        h.send_response(307)
        h.send_header("Location", where(h))
        h.send_header("Content-Length", "0")
        h.end_headers()
        return True

    return fault


def _trickle(h: Any, path: str) -> bool:
    """A valid answer, one byte every 0.1 s: no single read ever waits long."""
    data = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b" " * 100_000
    end = time.monotonic() + 30
    try:
        for byte in data:
            if time.monotonic() > end:
                break
            h.wfile.write(bytes([byte]))
            time.sleep(0.1)
    except OSError:
        pass
    return True


def _hang(h: Any, path: str) -> bool:
    """Accept, then say nothing until the client hangs up (30 s at most)."""
    end = time.monotonic() + 30
    while time.monotonic() < end:
        ready, _, _ = select.select([h.connection], [], [], 0.1)
        if ready and not h.connection.recv(1, socket.MSG_PEEK):
            break
    return True


def _ids_of(h: Any) -> list[int]:
    try:
        return list(json.loads(h.request_body)["input_ids"])
    except (ValueError, KeyError, TypeError):
        return []


def _rows(ids: list[int], cell: object = 0.0, **meta: object) -> dict[str, Any]:
    """A /generate answer of the right shape whose first cell is ``cell``."""
    rows: list[list[object]] = [[0.0] * (N_AUX * H) for _ in ids]
    rows[0][0] = cell
    return {"text": "", "output_ids": [1], "meta_info": {"hidden_states": [rows], **meta}}


def _other_host(h: Any) -> str:
    return f"http://127.0.0.2:{h.server.server_address[1]}/generate"


class Script:
    """Faults per path, used in order (None: served normally); ``always`` per path."""

    def __init__(
        self, queues: dict[str, list[Fault | None]], always: dict[str, Fault] | None = None
    ) -> None:
        self.queues = {k: list(v) for k, v in queues.items()}
        self.always = always or {}
        self.lock = threading.Lock()

    def __call__(self, h: Any, path: str) -> bool:
        if path in self.always:
            return self.always[path](h, path)
        with self.lock:
            queue = self.queues.get(path)
            fault = queue.pop(0) if queue else None
        return fault is not None and fault(h, path)


LOOP = {"/loop": _redirect(lambda h: "/loop")}
# /generate answers -> the code the shard gets (None: a capture, compared as usual)
GENERATE: dict[str, tuple[Fault, str | None]] = {
    "not-http": (_raw(b"hello there\r\n\r\n"), "EC705"),
    "bad-status-line": (_raw(b"HTTP/1.1 abc OK\r\n\r\n"), "EC705"),
    "http2-preface": (_raw(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), "EC705"),
    "closed-at-once": (_raw(b""), "EC705"),
    "header-line-70k": (_raw(b"HTTP/1.1 200 OK\r\nX-A: " + b"a" * 70_000 + b"\r\n\r\n"), "EC705"),
    "200-headers": (_raw(b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 200 + b"\r\n"), "EC705"),
    "short-body": (_raw(b'HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{"meta_info"'), "EC705"),
    "bad-chunk-size": (
        _raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
        "EC705",
    ),
    "chunk-size-70k": (
        _raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1" * 70_000 + b"\r\n"),
        "EC705",
    ),
    "negative-length": (_raw(b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n{}"), "EC705"),
    "declared-600MB": (
        _stream(b"HTTP/1.1 200 OK\r\nContent-Length: 600000000\r\n\r\n", b"0.0," * 16384),
        "EC705",
    ),
    "streamed-600MB": (
        _stream(b'HTTP/1.1 200 OK\r\n\r\n{"meta_info": {"hidden_states": [[', b"0.0," * 16384),
        "EC705",
    ),
    "chunked-600MB": (
        _stream(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"10000\r\n" + b"0" * 65536 + b"\r\n",
        ),
        "EC705",
    ),
    "nested-100k": (_answer(b"[" * 100_000 + b"]" * 100_000), "EC705"),
    "html-500": (_answer(b"<html>Internal Server Error</html>", 500), "EC705"),
    "utf16-junk": (_answer("{}".encode("utf-16") + b"\xff\xfe\x00"), "EC705"),
    "json-list": (_answer([1, 2, 3]), "EC705"),
    "error-is-int": (_answer({"error": 5}, 400), "EC705"),
    "meta-info-int": (_answer({"meta_info": 5}), "EC705"),
    "states-dict": (_answer({"meta_info": {"hidden_states": {"a": 1}}}), "EC705"),
    "states-string": (_answer({"meta_info": {"hidden_states": "abc"}}), "EC705"),
    "states-number": (_answer({"meta_info": {"hidden_states": [5]}}), "EC705"),
    "rows-empty": (_answer({"meta_info": {"hidden_states": [[]]}}), "EC704"),
    "rows-ragged": (
        _answer(
            lambda ids: {
                "meta_info": {
                    "hidden_states": [[[0.0] * (N_AUX * H - i % 2) for i in range(len(ids))]]
                }
            }
        ),
        "EC704",
    ),
    "cell-string": (_answer(lambda ids: _rows(ids, "x")), "EC705"),
    "cell-list": (_answer(lambda ids: _rows(ids, [0.0])), "EC705"),
    "cell-int-400-digits": (_answer(lambda ids: _rows(ids, 10**400)), "EC705"),
    "cell-dict": (_answer(lambda ids: _rows(ids, {"a": 1})), "EC705"),
    "rows-short-cached-garbage": (
        _answer(
            lambda ids: {
                "meta_info": {
                    "hidden_states": [_rows(ids)["meta_info"]["hidden_states"][0][:-3]],
                    "cached_tokens": "abc",
                }
            }
        ),
        "EC703",
    ),
    "cell-nan": (_answer(lambda ids: _rows(ids, float("nan"))), None),
    "redirect-other-host": (_redirect(_other_host), "EC705"),
    "redirect-loop": (_redirect(lambda h: "/loop"), "EC705"),
    "redirect-bad-location": (_redirect(lambda h: "http://[::1"), "EC705"),
}
SERVER_INFO: dict[str, object] = {
    "list": [1, 2],
    "string": "ok",
    "version-int": {"version": 5},
    "version-path": {"version": "../../etc/passwd"},
    "version-5000-digits": {"version": "0.5." + "1" * 5000},
    "ids-string": {"return_aux_hidden_state_layer_ids": "1,3"},
    "ids-floats": {"return_aux_hidden_state_layer_ids": [1.5, 3]},
    "ids-bools": {"return_aux_hidden_state_layer_ids": [True]},
    "ids-huge": {"return_aux_hidden_state_layer_ids": [2**40]},
    "ids-nested": {"return_aux_hidden_state_layer_ids": [[1]]},
    "ids-dict": {"return_aux_hidden_state_layer_ids": {"1": 3}},
}
MODEL_INFO: dict[str, object] = {
    "list": [],
    "archs-string": {"architectures": "LlamaForCausalLM"},
    "archs-int": {"architectures": [5]},
    "archs-nested": {"architectures": [["a"]]},
    "archs-space": {"architectures": ["Llama For"]},
    "archs-dict": {"architectures": {"a": 1}},
    "archs-long": {"architectures": ["A" * 5000]},
}


# -- in process: every answer, its code ---------------------------------------------------


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One demo shard per bad /generate answer, and one more (copies: each asks anew)."""
    root = tmp_path_factory.mktemp("hostile-http")
    good, _ = write_demo_shards(root, shards=1)
    (first,) = discover(good)
    for i in range(1, len(GENERATE) + 1):
        shutil.copyfile(first, first.with_name(f"data_{i}.ckpt"))
    return good


@pytest.fixture(scope="module")
def ids(shards: Path) -> list[int]:
    tensor = read_sample(discover(shards)[0], "specforge").input_ids
    assert tensor is not None
    return [int(i) for i in tensor.tolist()]


@pytest.mark.parametrize("name", GENERATE)
def test_generate_answer(name: str, ids: list[int]) -> None:
    fault, code = GENERATE[name]
    script = Script({"/generate": [fault]}, always=LOOP)
    with SGLangStandin(Launch(mode="aux", layer_ids=[1, 3, 4], fault=script)) as url:
        try:
            aux = capture(url, ids, N_AUX, H, timeout=20)
        except CaptureError as exc:
            assert exc.code == code, exc
        else:
            assert code is None and aux.shape == (len(ids), N_AUX * H)


@pytest.mark.parametrize(
    "where,name",
    [("/server_info", n) for n in SERVER_INFO]
    + [("/model_info", n) for n in MODEL_INFO]
    + [("/server_info", "5MB"), ("/model_info", "garbage")],
)
def test_info_answer(where: str, name: str) -> None:
    table = SERVER_INFO if where == "/server_info" else MODEL_INFO
    fault = (
        _answer({"version": "0.5.23", "pad": "x" * (5 << 20)})
        if name == "5MB"
        else _raw(b"\x00" * 100)
        if name == "garbage"
        else _answer(table[name])
    )
    with (
        SGLangStandin(Launch(fault=Script({where: [fault]}))) as url,
        pytest.raises(CaptureError) as exc,
    ):
        server_info(url, timeout=20)
    assert exc.value.code == "EC705"


def test_redirect_to_the_same_host_is_followed(ids: list[int]) -> None:
    script = Script({"/generate": [_redirect(lambda h: "/generate")]})
    standin = SGLangStandin(Launch(mode="aux", layer_ids=[1, 3, 4], fault=script))
    with standin as url:
        assert capture(url, ids, N_AUX, H, timeout=20).shape == (len(ids), N_AUX * H)
    assert standin.state.requests == 2


@pytest.mark.parametrize("fault", [_hang, _trickle], ids=["hang", "trickle"])
def test_a_dead_server_is_asked_once_per_process(fault: Fault, ids: list[int]) -> None:
    standin = SGLangStandin(Launch(fault=fault))
    with standin as url:
        for _ in range(3):
            with pytest.raises(CaptureError) as exc:
                capture(url, ids, N_AUX, H, timeout=0.5)
            assert exc.value.code == "EC705"
    assert "within 0.5 s" in exc.value.message and "not asked again" in exc.value.message
    assert standin.state.requests == 1


# -- from outside: the CLI, memory-capped ---------------------------------------------------


def _cli(*args: object) -> subprocess.CompletedProcess[str]:
    res = run_cli(*args, memory=MEMORY, timeout=240)
    out = res.stdout + res.stderr
    assert "Traceback" not in out and "MemoryError" not in out, out[-3000:]
    assert res.returncode in (1, 2, 69), out[-3000:]  # 69: the server never reached
    return res


def _check_capture(
    url: str, report: Path, *shards: object, timeout: str = ""
) -> subprocess.CompletedProcess[str]:
    """``check --checks capture --sample all`` of ``shards`` against the server at ``url``
    (``timeout``: its --sglang-timeout), the JSON report written to ``report``."""
    wait = ["--sglang-timeout", timeout] if timeout else []
    return _cli(
        "check",
        shipped_contract(),
        *shards,
        "--checks",
        "capture",
        "--sample",
        "all",
        "--sglang-url",
        url,
        *wait,
        "--json",
        report,
    )


def _codes(report: Path) -> list[list[str]]:
    from pytest_eagle_contract.reports.json_report import problems

    data = json.loads(report.read_text())
    assert problems(data) == []
    units = data["units"]
    return sorted(sorted({f["code"] for f in u["findings"]}) for u in units)


@pytest.mark.slow
def test_check_goes_on_through_every_bad_answer(shards: Path, tmp_path: Path) -> None:
    """One shard per bad /generate answer, then a good one: each gets its own finding."""
    script = Script({"/generate": [fault for fault, _ in GENERATE.values()]}, always=LOOP)
    with SGLangStandin(
        Launch(mode="aux", layer_ids=[1, 3, 4], fault=script, max_requests=200)
    ) as url:
        res = _check_capture(url, tmp_path / "r.json", shards, timeout="20")
    assert res.returncode == 1
    want = sorted([[code or "EC701"] for _, code in GENERATE.values()] + [[]])
    assert _codes(tmp_path / "r.json") == want


@pytest.mark.slow
def test_check_goes_on_through_every_bad_server_info(shards: Path, tmp_path: Path) -> None:
    server, model = list(SERVER_INFO.values()), list(MODEL_INFO.values())
    script = Script(
        {
            "/server_info": [_answer(v) for v in server] + [None] * len(model),
            "/model_info": [None] * len(server) + [_answer(v) for v in model],
        }
    )
    paths = discover(shards)[: len(server) + len(model) + 1]
    with SGLangStandin(
        Launch(mode="aux", layer_ids=[1, 3, 4], fault=script, max_requests=200)
    ) as url:
        res = _check_capture(url, tmp_path / "r.json", *paths)
    assert res.returncode == 1
    assert _codes(tmp_path / "r.json") == [[]] + [["EC705"]] * (len(server) + len(model))


@pytest.mark.slow
def test_a_dead_server_costs_one_timeout_per_run(shards: Path, tmp_path: Path) -> None:
    standin = SGLangStandin(Launch(fault=_hang))
    with standin as url:
        res = _check_capture(url, tmp_path / "r.json", *discover(shards)[:4], timeout="1")
    # no shard compared: the engine unreachable (69), not findings in the data (1)
    assert res.returncode == 69 and "did not answer within 1 s" in res.stdout
    assert _codes(tmp_path / "r.json") == [["EC705"]] * 4
    assert standin.state.requests == 1  # not one per shard


@pytest.mark.slow
def test_record_stops_with_the_code(shards: Path, tmp_path: Path) -> None:
    fault = Script({"/generate": [GENERATE["streamed-600MB"][0]]})
    with SGLangStandin(Launch(mode="aux", layer_ids=[1, 3, 4], fault=fault)) as url:
        res = _cli(
            "record",
            shipped_contract(),
            discover(shards)[0],
            "--sglang-url",
            url,
            "-o",
            tmp_path / "captures",
        )
    assert res.returncode == 1 and "EC705" in res.stderr and "bytes this request" in res.stderr


# -- usage errors: the URL, the timeout, the output folder --------------------------------

BAD_URLS = [
    "localhost:30000",
    "127.0.0.1:30000",
    "file:///etc/passwd",
    "ftp://host/",
    "javascript:alert(1)",
    "http://",
    "http://host:99999",
    "http://host:-1",
    "http://a b",
    "http://host/\x00",
    "http://user:pw@host",
    "http://host/?q=1",
    "http://host#frag",
    "http://h\u00e9.example",
    "",
    " ",
    "http://" + "a" * 3000,
]
BAD_TIMEOUTS = ["-1", "0", "nan", "inf", "-inf", "1e999", "86401"]


@pytest.mark.parametrize(
    "url,timeout", [(u, "60") for u in BAD_URLS] + [("http://127.0.0.1:9", t) for t in BAD_TIMEOUTS]
)
def test_bad_url_or_timeout_is_a_usage_error(
    url: str, timeout: str, shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    contract, shard = str(shipped_contract()), str(discover(shards)[0])
    assert main(["check", contract, shard, "--sglang-url", url, f"--sglang-timeout={timeout}"]) == 2
    assert (
        main(
            [
                "record",
                contract,
                shard,
                "--sglang-url",
                url,
                f"--timeout={timeout}",
                "-o",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert capsys.readouterr().err.count("eagle-contract: error: SGLang ") == 2


def test_usage_errors_from_outside(shards: Path, pytester: pytest.Pytester) -> None:
    res = _cli("check", shipped_contract(), shards, "--sglang-url", "file:///etc/passwd")
    assert res.returncode == 2 and "eagle-contract: error: SGLang URL" in res.stderr
    for args in (
        ["--eagle-sglang-url", "ftp://x"],
        ["--eagle-sglang-url", "http://h:1", "--eagle-sglang-timeout", "nan"],
    ):
        run = pytester.runpytest(*args)
        assert run.ret == pytest.ExitCode.USAGE_ERROR
        run.stderr.fnmatch_lines(["*ERROR: SGLang *: give *"])


def test_record_never_writes_beside_or_over_a_shard(shards: Path) -> None:
    shard = discover(shards)[0]
    for out in (shard.parent, shard):
        assert (
            main(
                [
                    "record",
                    str(shipped_contract()),
                    str(shard),
                    "--sglang-url",
                    "http://127.0.0.1:9",
                    "-o",
                    str(out),
                ]
            )
            == 2
        )
    assert not list(shard.parent.glob("capture_*"))
