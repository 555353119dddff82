"""A chat template rendered as transformers renders it, in a sandbox with bounds.

Chat templates come from other teams: untrusted code. They run in Jinja's
``ImmutableSandboxedEnvironment`` with transformers' settings (``trim_blocks``,
``lstrip_blocks``, ``loopcontrols``, a ``generation`` tag that renders its body, ``tojson``
without HTML escaping, ``raise_exception``, ``strftime_now``), and with bounds of our own:
the output stops at ``EAGLE_TEMPLATE_OUTPUT_MAX_BYTES``, ``range`` counts every step it
would take against one budget per render, a repeated string or list is refused past the
output cap, and a render stops after ``RENDER_SECONDS`` (checked between output chunks,
and by a timer signal where the render runs on the main thread).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import CodedError
from ..limits import env_bytes

OUTPUT_MAX_BYTES_ENV = "EAGLE_TEMPLATE_OUTPUT_MAX_BYTES"
DEFAULT_OUTPUT_MAX_BYTES = 4 << 20  # a rendered conversation; real ones are KiB
RANGE_BUDGET = 1_000_000  # loop steps over range() in one render
RENDER_SECONDS = 10.0
_HINT = "the template must render the conversation plainly: check it with transformers"


def render(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    special: Mapping[str, str],
    add_generation_prompt: bool = False,
    kwargs: Mapping[str, Any] | None = None,
) -> str:
    """``messages`` rendered by ``template`` (the variables transformers passes: messages,
    add_generation_prompt, the special tokens' texts, the pipeline's template kwargs).
    Raises CodedError EC346 for a template that fails, escapes or runs past a bound."""
    import jinja2

    cap = env_bytes(OUTPUT_MAX_BYTES_ENV, DEFAULT_OUTPUT_MAX_BYTES)
    try:
        compiled = _environment(cap).from_string(template)
    except jinja2.TemplateError as exc:
        message = f"the chat template does not compile: {_line(exc)}"
        raise CodedError("EC346", message, _HINT) from None
    variables: dict[str, Any] = {
        **dict(special),
        **dict(kwargs or {}),
        "messages": [dict(m) for m in messages],
        "add_generation_prompt": add_generation_prompt,
        "tools": None,
        "documents": None,
    }
    deadline = time.monotonic() + RENDER_SECONDS
    out: list[str] = []
    size = 0
    try:
        with _alarm(RENDER_SECONDS):
            for chunk in compiled.generate(**variables):
                size += len(chunk)
                if size > cap:
                    raise CodedError(
                        "EC346",
                        f"the chat template's output passed {cap} characters",
                        f"set {OUTPUT_MAX_BYTES_ENV} to raise the limit, if it should",
                    )
                if time.monotonic() > deadline:
                    raise _Timeout
                out.append(chunk)
    except CodedError:
        raise
    except _Timeout:
        raise CodedError(
            "EC346", f"the chat template ran past {RENDER_SECONDS:g} s", _HINT
        ) from None
    except (jinja2.TemplateError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CodedError("EC346", f"the chat template failed: {_line(exc)}", _HINT) from None
    except (RecursionError, MemoryError, OverflowError) as exc:
        raise CodedError(
            "EC346", f"the chat template ran past a bound: {type(exc).__name__}", _HINT
        ) from None
    return "".join(out)


class _Timeout(Exception):
    pass


def _line(exc: BaseException) -> str:
    text = str(exc).splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def _environment(cap: int) -> Any:
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}``: transformers marks assistant text
        with it; here it renders its body."""

        tags = {"generation"}  # noqa: RUF012 (jinja2 reads a set)

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            call = self.call_method("_body")
            return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return str(caller())

    steps = [0]

    def bounded_range(*args: int) -> range:
        r = range(*args)
        steps[0] += len(r)
        if steps[0] > RANGE_BUDGET:
            raise ValueError(f"range() past {RANGE_BUDGET} steps in one render")
        return r

    from jinja2.sandbox import SandboxedFormatter

    class BoundedFormatter(SandboxedFormatter):
        """str.format with every resolved width and precision bounded."""

        def format_field(self, value: Any, format_spec: str) -> Any:
            _numbers_within(_SPEC_NUMBER.findall(format_spec), cap)
            return super().format_field(value, format_spec)

    class Bounded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "%"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "**" and isinstance(right, int) and abs(right) > 64:
                raise ValueError("an exponent past 64")
            if operator == "*":
                for seq, n in ((left, right), (right, left)):
                    if isinstance(seq, str | list | tuple) and isinstance(n, int):
                        if len(seq) * n > cap:
                            raise ValueError(f"a repetition past {cap} items")
            if operator == "%" and isinstance(left, str):
                _percent_within(left, right, cap)
            return super().call_binop(context, operator, left, right)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
            owner = getattr(__obj, "__self__", None)
            if isinstance(owner, str):
                _str_call_within(owner, getattr(__obj, "__name__", ""), args, cap)
            return super().call(__context, __obj, *args, **kwargs)

        def wrap_str_format(self, value: Any) -> Any:
            if super().wrap_str_format(value) is None:
                return None
            text, is_map = value.__self__, value.__name__ == "format_map"
            formatter = BoundedFormatter(self)

            def bounded(*args: Any, **kwargs: Any) -> str:
                if is_map:
                    if kwargs or len(args) != 1:
                        raise TypeError("format_map() takes exactly one argument")
                    kwargs = dict(args[0])
                    args = ()
                return str(formatter.vformat(text, args, kwargs))

            return bounded

    def raise_exception(message: object) -> None:
        raise jinja2.TemplateError(str(message))

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        width = indent if isinstance(indent, int) else len(indent) if indent else 0
        if width > 64:
            raise ValueError("a tojson indent past 64")
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(fmt: str) -> str:
        return time.strftime(str(fmt)[:100])

    env = Bounded(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    for name in ("center", "indent", "truncate", "wordwrap", "join", "replace", "format"):
        env.filters[name] = _bounded_filter(name, env.filters[name], cap)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["range"] = bounded_range
    return env


_SPEC_NUMBER = re.compile(r"\d+")
_PERCENT = re.compile(r"%[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def _numbers_within(numbers: Sequence[str | int], cap: int) -> None:
    """Refuse a width, precision or count past ``cap`` (a string's allocation)."""
    for n in numbers:
        if isinstance(n, bool):
            continue
        if isinstance(n, str):
            if len(n) > 12 or int(n) > cap:
                raise ValueError(f"a width or count past {cap}")
        elif isinstance(n, int) and n > cap:
            raise ValueError(f"a width or count past {cap}")


def _percent_within(text: str, right: Any, cap: int) -> None:
    """``text % right`` with every width and precision (``*`` ones too) bounded."""
    specs = _PERCENT.findall(text)
    _numbers_within([n for spec in specs for n in spec if n and n != "*"], cap)
    if any("*" in spec for spec in specs):
        values = right if isinstance(right, tuple) else (right,)
        _numbers_within([v for v in values if isinstance(v, int)], cap)


def _str_call_within(text: str, name: str, args: tuple[Any, ...], cap: int) -> None:
    """A string method that grows its string, bounded before it runs."""
    if name in ("ljust", "rjust", "center", "zfill"):
        _numbers_within(args[:1], cap)
    elif name == "expandtabs":
        size = args[0] if args and isinstance(args[0], int) else 8
        _numbers_within([text.count("\t") * size + len(text)], cap)
    elif name == "replace" and len(args) >= 2:
        old, new = args[0], args[1]
        if isinstance(old, str) and isinstance(new, str):
            count = text.count(old) if old else len(text) + 1
            _numbers_within([len(text) + count * max(0, len(new) - len(old))], cap)
    elif name == "join" and args:
        items = args[0]
        n = len(items) if hasattr(items, "__len__") else 0
        _numbers_within([len(text) * max(0, n - 1)], cap)


def _bounded_filter(name: str, original: Any, cap: int) -> Any:
    """A Jinja filter that grows a string, its sizes checked first (the ``pass_*`` marker
    that tells Jinja what to pass it kept)."""
    import functools

    @functools.wraps(original)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        values = [*args, *kwargs.values()]
        if name == "format" and args and isinstance(args[0], str):
            _percent_within(args[0], tuple(args[1:]), cap)
        elif name == "join":
            seq = next((v for v in values if hasattr(v, "__len__") and not isinstance(v, str)), ())
            sep = next((v for v in values[2:] if isinstance(v, str)), "")
            _numbers_within([len(sep) * len(seq)], cap)
        elif name == "replace":
            texts = [v for v in values if isinstance(v, str)]
            if len(texts) >= 3:
                _str_call_within(texts[0], "replace", (texts[1], texts[2]), cap)
        else:
            _numbers_within([v for v in values if isinstance(v, int)], cap)
        return original(*args, **kwargs)

    return bounded


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """A timer signal that stops a render stuck between output chunks (an empty loop):
    on the main thread of a platform that has SIGALRM; elsewhere the chunk check only."""
    import signal

    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "setitimer"
    ):
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise _Timeout

    old = signal.signal(signal.SIGALRM, stop)
    previous = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if previous[0] > 0:  # someone else's timer: give it back what is left
            signal.setitimer(signal.ITIMER_REAL, previous[0], previous[1])
