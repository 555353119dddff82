"""Where a release's capturing ``forward`` takes the aux state, read with ``ast``.

Given the class whose ``forward`` captures (``sglang_wheel.run`` names it), classify the
capture site: the layer loop appending ``hidden_states + residual`` before layer i (residual
is None before layer 0: index 0 fails), the same guarded by ``residual is not None`` or the
full stream ``hidden_states`` / a residual-stream snapshot (index 0 is the embedding), or a
capture handed to the layer (``captured_last_layer_outputs``: the layer communicator after
``prepare_attn``, which sets ``residual = hidden_states`` when it is None; ``capture_output``:
the layer boundary, which captures the embedding when no residual exists yet). A comparison
``self.end_layer in self.layers_to_capture`` (or ``num_layers``) after the loop captures
index L; an ``AuxHiddenStatePacker`` sized from the list fails when an index is never reached.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sglang_wheel import ClassRef, Wheel, is_self_attr


@dataclass(frozen=True)
class Forward:
    """Where the capturing forward takes a state, and what indices 0 and >= L do there."""

    site: str  # see SITES
    index0: str  # "embed" or "error"
    beyond: str  # "dropped", "raises" (fails at the first forward) or "final" (index L)
    forward_in: str  # "module.py:Class"


# capture site -> what index 0 (before layer 0, residual still None) gives
SITES = {
    "loop: hidden_states + residual": "error",
    "loop: hidden_states + residual if residual is not None": "embed",
    "loop: hidden_states": "embed",
    "loop: residual stream snapshot": "embed",  # residual/stream.py: no residual -> a copy
    "layer: communicator after prepare_attn": "embed",
    "layer: boundary capture": "embed",
}
_KEYWORDS = {
    "captured_last_layer_outputs": "layer: communicator after prepare_attn",
    "capture_output": "layer: boundary capture",
}


def _mentions(node: ast.AST, *names: str) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and n.attr in names)
        or (isinstance(n, ast.Constant) and n.value in names)
        for n in ast.walk(node)
    )


def _append_kind(arg: ast.expr) -> str | None:
    if isinstance(arg, ast.Name) and arg.id == "hidden_states":
        return "loop: hidden_states"
    if isinstance(arg, ast.Call) and "snapshot" in ast.unparse(arg.func):
        return "loop: residual stream snapshot"
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add):
        return "loop: hidden_states + residual"
    if isinstance(arg, ast.IfExp) and any(
        isinstance(n, ast.Name) and n.id == "residual" for n in ast.walk(arg.test)
    ):
        return "loop: hidden_states + residual if residual is not None"
    return None


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements of a block and its nested if/else/with blocks (not nested functions)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If):
            yield from _statements(stmt.body)
            yield from _statements(stmt.orelse)
        elif isinstance(stmt, ast.With):
            yield from _statements(stmt.body)


def _assigned(arg: ast.expr, body: list[ast.stmt], helper: _Helper) -> ast.expr:
    """What a local name appended was set to in the same block (``x = gather(h + r)``,
    ``x = self._prepare(h, r)``): the sum or conditional inside it, or in the helper."""
    if not (isinstance(arg, ast.Name) and arg.id != "hidden_states"):
        return arg
    for stmt in body:
        if isinstance(stmt, ast.Assign) and _target(stmt) == arg.id:
            value = stmt.value
            if isinstance(value, ast.Call) and is_self_attr(value.func, _attr(value.func)):
                found = helper(_attr(value.func))
                value = found if found is not None else value
            for node in ast.walk(value):
                if isinstance(node, ast.IfExp | ast.BinOp):
                    return node
    return arg


def _attr(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else ""


_Helper = Callable[[str], "ast.FunctionDef | None"]


def _target(node: ast.Assign) -> str | None:
    first = node.targets[0]
    return first.id if isinstance(first, ast.Name) else None


def _sites(fn: ast.FunctionDef, helper: _Helper) -> tuple[set[str], bool, bool]:
    loop_vars = {
        t.id
        for n in ast.walk(fn)
        if isinstance(n, ast.For)
        for t in ast.walk(n.target)
        if isinstance(t, ast.Name)
    }
    sites: set[str] = set()
    final = packer = False
    for node in ast.walk(fn):
        if isinstance(node, ast.Compare) and _mentions(node.comparators[0], "layers_to_capture"):
            if isinstance(node.left, ast.Name) and node.left.id in loop_vars:
                continue
            final = True
        elif isinstance(node, ast.If) and _mentions(node.test, "layers_to_capture"):
            body = list(_statements(node.body))
            for stmt in body:
                inner = stmt.value if isinstance(stmt, ast.Expr) else None
                if (
                    isinstance(inner, ast.Call)
                    and isinstance(inner.func, ast.Attribute)
                    and inner.func.attr == "append"
                    and inner.args
                ):
                    kind = _append_kind(_assigned(inner.args[0], body, helper))
                    sites.add(kind or f"unknown append {ast.unparse(inner.args[0])[:60]}")
        elif isinstance(node, ast.keyword | ast.Assign):
            name = node.arg if isinstance(node, ast.keyword) else _target(node)
            if (
                name in _KEYWORDS
                and isinstance(node.value, ast.IfExp)
                and _mentions(node.value.test, "layers_to_capture", "_is_layer_to_capture")
            ):
                sites.add(_KEYWORDS[name])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            packer = packer or node.func.id == "AuxHiddenStatePacker"
    return sites, final, packer


def _capturing_forward(
    wheel: Wheel, holder: ClassRef | None, arch: ClassRef
) -> tuple[ClassRef, ast.FunctionDef] | None:
    """The holder's ``forward``; for an unresolved holder, the first capturing ``forward``
    in the modules of the architecture's classes."""
    if holder is not None:
        return wheel.function(holder, "forward")
    for module in dict.fromkeys(m for m, _ in wheel.mro(arch)):
        for name in wheel.modules[module].classes:
            found = wheel.function((module, name), "forward")
            if found and _mentions(found[1], "layers_to_capture", "_is_layer_to_capture"):
                return found
    return None


def forward(wheel: Wheel, holder: ClassRef | None, arch: ClassRef) -> Forward:
    found = _capturing_forward(wheel, holder, arch)
    if found is None:
        return Forward("unknown: no capturing forward", "unknown", "unknown", "")
    (module, cls), fn = found

    def helper(name: str) -> ast.FunctionDef | None:
        method = wheel.function((module, cls), name)
        return method[1] if method else None

    sites, final, packer = _sites(fn, helper)
    where = f"{module}.py:{cls}"
    if not sites:
        return Forward("none: the forward never captures", "none", "none", where)
    index0 = {SITES.get(site, "unknown") for site in sites}
    if len(index0) != 1 or "unknown" in index0:
        return Forward(f"unknown: {sorted(sites)}", "unknown", "unknown", where)
    beyond = "final" if final else "raises" if packer else "dropped"
    return Forward(" + ".join(sorted(sites)), index0.pop(), beyond, where)
