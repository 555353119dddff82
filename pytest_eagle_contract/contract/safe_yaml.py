"""YAML for untrusted contracts: PyYAML's safe reader with no constructor at all (no tag
builds an object), merge keys refused, and size, nesting, node count and alias expansion
bounded before anything is built. Every refusal is a located :class:`ContractError`.
"""

from __future__ import annotations

import math
import re
from functools import cache
from pathlib import Path
from typing import Any

from ..errors import ContractError
from ..limits import env_bytes

MAX_BYTES_ENV = "EAGLE_CONTRACT_MAX_BYTES"
DEFAULT_MAX_BYTES = 1 << 20  # a real contract is a few KiB
MAX_DEPTH = 32  # nesting levels (a contract needs 5)
MAX_NODES = 5_000  # YAML values, counted again for every use of an alias
MAX_ITEMS = 256  # entries of one list or mapping (jsonschema checks uniqueness in n**2)
_MESSAGE_CHARS = 300
_MAX_INT = 1 << 63  # beyond any count, size or index a contract holds
_TAG = "tag:yaml.org,2002:"
# What YAML forbids in a stream (the complement of PyYAML's Reader.NON_PRINTABLE's allowed
# set, the same code points: tests/hostile/test_hostile_contracts.py): refused up front with
# a location, and in strings built from escapes ("\0", "\ud800"). Spelled as the few
# forbidden ranges, which compile in a tenth of the time of the allowed ones (about 9 ms of
# every command).
_NON_PRINTABLE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f\ud800-\udfff\ufffe\uffff]"
)


def max_bytes() -> int:
    """The largest contract read: ``EAGLE_CONTRACT_MAX_BYTES``, else 1 MiB."""
    return env_bytes(MAX_BYTES_ENV, DEFAULT_MAX_BYTES)


def read_text(path: Path) -> str:
    """The file's text: at most :func:`max_bytes` bytes of UTF-8 (a UTF-8 BOM is dropped)."""
    import stat

    limit = max_bytes()
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # a FIFO would block, a device never end
            raise ContractError.single(path, "cannot read contract: not a regular file")
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise ContractError.single(path, f"cannot read contract: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise ContractError.single(
            path,
            f"the contract is larger than {limit} bytes; set {MAX_BYTES_ENV} to raise the limit",
        )
    for bom, name in (
        (b"\xff\xfe\x00\x00", "UTF-32"),
        (b"\x00\x00\xfe\xff", "UTF-32"),
        (b"\xff\xfe", "UTF-16"),
        (b"\xfe\xff", "UTF-16"),
    ):
        if data.startswith(bom):
            raise ContractError.single(path, f"the contract is {name}: save it as UTF-8")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        i = exc.start
        line, col = data.count(b"\n", 0, i) + 1, i - data.rfind(b"\n", 0, i)
        raise ContractError.single(
            path, f"byte 0x{data[i]:02X} is not UTF-8: save the contract as UTF-8", line, col
        ) from None


def join(parent: str, key: str | int) -> str:
    """The key path of ``key`` under ``parent``: ``a.b``, ``a[0]``."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def short(text: str) -> str:
    """``text``, cut to a length a message can carry."""
    if len(text) <= _MESSAGE_CHARS:
        return text
    return f"{text[:_MESSAGE_CHARS]}... ({len(text)} characters)"


def _at(mark: Any) -> tuple[int, int]:
    return (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)


def _fail(file: str, message: str, mark: Any = None, path: str = "") -> ContractError:
    return ContractError.single(file, short(message), *_at(mark), short(path))


@cache
def _reader_class() -> Any:
    """PyYAML's reader, scanner, parser, composer and resolver, with no constructor at all
    (no tag can build an object), nesting and node count bounded while composing."""
    from yaml.composer import Composer
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.resolver import Resolver
    from yaml.scanner import Scanner

    class _Reader(Reader, Scanner, Parser, Composer, Resolver):
        def __init__(self, text: str, file: str) -> None:
            Reader.__init__(self, text)
            Scanner.__init__(self)
            Parser.__init__(self)
            Composer.__init__(self)
            Resolver.__init__(self)
            self.file, self.depth, self.nodes = file, 0, 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            parser: Any = self  # PyYAML's parser methods carry no annotations
            mark = parser.peek_event().start_mark
            self.depth, self.nodes = self.depth + 1, self.nodes + 1
            if self.depth > MAX_DEPTH:
                raise _fail(self.file, f"nested deeper than {MAX_DEPTH} levels", mark)
            if self.nodes > MAX_NODES:
                raise _fail(self.file, f"more than {MAX_NODES} YAML nodes", mark)
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    return _Reader


def _check_text(text: str, file: str) -> str:
    """The text without a UTF-8 BOM; refused when too long or holding characters YAML
    forbids (control characters, unpaired surrogates)."""
    limit = max_bytes()
    if len(text) > limit:
        raise _fail(
            file,
            f"the contract is larger than {limit} bytes; set {MAX_BYTES_ENV} to raise the limit",
        )
    text = text.removeprefix("\ufeff")
    bad = _NON_PRINTABLE.search(text)
    if bad is not None:
        i = bad.start()
        line, col = text.count("\n", 0, i) + 1, i - text.rfind("\n", 0, i)
        raise ContractError.single(file, _bad_char_message(bad.group()), line, col)
    return text


def _bad_char_message(char: str) -> str:
    kind = "unpaired surrogate" if "\ud800" <= char <= "\udfff" else "control character"
    hint = " (is the file UTF-16? save it as UTF-8)" if char == "\0" else ""
    return f"{kind} U+{ord(char):04X} is not allowed in a contract{hint}"


def compose(text: str, file: str) -> tuple[Any, dict[str, tuple[int, int]]]:
    """Parse YAML and remember (line, column) of every key path, 1-based."""
    import yaml

    reader = _reader_class()(_check_text(text, file), file)
    try:
        node = reader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        raise _fail(file, f"invalid YAML: {exc.problem}", exc.problem_mark) from None
    except yaml.YAMLError as exc:
        raise _fail(file, f"invalid YAML: {exc}") from None
    finally:
        reader.dispose()
    if node is None:
        raise ContractError.single(file, "the contract file is empty")
    builder = _Builder(file)
    return builder.value(node), builder.lines


class _Builder:
    """Plain data from composed YAML nodes: standard tags only, no merge keys, aliases
    expanded against a node budget, recursion refused."""

    def __init__(self, file: str) -> None:
        from yaml.constructor import SafeConstructor

        self.file = file
        self.scalars = SafeConstructor()
        self.lines: dict[str, tuple[int, int]] = {}
        self.budget = MAX_NODES
        self.open: set[int] = set()

    def value(self, n: Any, path: str = "", depth: int = 1) -> Any:
        import yaml

        self.lines.setdefault(path, _at(n.start_mark))
        self.budget -= 1
        if self.budget < 0:
            raise _fail(
                self.file,
                f"more than {MAX_NODES} values once aliases are expanded (an alias bomb?)",
                n.start_mark,
                path,
            )
        if depth > MAX_DEPTH:
            raise _fail(self.file, f"nested deeper than {MAX_DEPTH} levels", n.start_mark, path)
        if isinstance(n, yaml.ScalarNode):
            return self.scalar(n, path)
        kind = "map" if isinstance(n, yaml.MappingNode) else "seq"
        if n.tag != _TAG + kind:
            raise self.tag_error(n, path)
        if id(n) in self.open:
            raise _fail(self.file, "an alias refers to a node that contains it", n.start_mark, path)
        if len(n.value) > MAX_ITEMS:
            raise _fail(self.file, f"more than {MAX_ITEMS} items", n.start_mark, path)
        self.open.add(id(n))
        try:
            if kind == "seq":
                return [
                    self.value(item, join(path, i), depth + 1) for i, item in enumerate(n.value)
                ]
            return self.mapping(n, path, depth)
        finally:
            self.open.discard(id(n))

    def mapping(self, n: Any, path: str, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key_node, value_node in n.value:
            if key_node.tag == _TAG + "merge":
                raise _fail(
                    self.file,
                    "merge keys (<<) are not supported in a contract: write the keys out",
                    key_node.start_mark,
                    path,
                )
            key = self.value(key_node, path, depth + 1)
            if not isinstance(key, str):
                raise _fail(
                    self.file,
                    f"keys must be strings, not {short(repr(key))}",
                    key_node.start_mark,
                    path,
                )
            child = join(path, key)
            if key in out:
                raise _fail(self.file, f"duplicate key {key!r}", key_node.start_mark, child)
            self.lines[child] = _at(key_node.start_mark)
            out[key] = self.value(value_node, child, depth + 1)
        return out

    def scalar(self, n: Any, path: str) -> Any:
        kind = n.tag.removeprefix(_TAG)
        if kind in ("str", "timestamp", "value"):  # dates stay text
            bad = _NON_PRINTABLE.search(n.value)
            if bad is not None:
                raise _fail(self.file, _bad_char_message(bad.group()), n.start_mark, path)
            return n.value
        if kind not in ("int", "float", "bool", "null"):
            raise self.tag_error(n, path)
        try:
            out = getattr(self.scalars, f"construct_yaml_{kind}")(n)
        except (ValueError, KeyError, OverflowError):
            raise _fail(
                self.file, f"{self.what(n)} is not a valid {kind}", n.start_mark, path
            ) from None
        if isinstance(out, float) and math.isnan(out):
            raise _fail(self.file, "NaN is not a value a contract can hold", n.start_mark, path)
        if isinstance(out, int) and abs(out) >= _MAX_INT:
            raise _fail(
                self.file, f"{self.what(n)} is out of range (at most 2**63)", n.start_mark, path
            )
        return out

    @staticmethod
    def what(n: Any) -> str:
        return f"a {len(n.value)}-character value" if len(n.value) > 40 else repr(n.value)

    def tag_error(self, n: Any, path: str) -> ContractError:
        tag = "!!" + n.tag.removeprefix(_TAG) if n.tag.startswith(_TAG) else n.tag
        return _fail(
            self.file, f"the YAML tag {short(tag)} is not allowed in a contract", n.start_mark, path
        )
