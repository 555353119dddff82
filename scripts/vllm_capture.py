"""The capture rule of each EAGLE-3 architecture's layer loop in a vLLM release wheel
(read with zipfile and ast; vllm is never imported). Used by gen_vllm_rules.py.

For every registry architecture whose class defines or inherits
``get_eagle3_(default_)aux_hidden_state_layers``, the layer loop that serves it (its module's,
a base class's, or an imported module's) is classified: ``plus`` (id k captures
residual:k+plus), ``id0`` (``embed``: the embedding output, or with the residual None
handled; ``crash``: ``hidden_states + residual`` with residual None; ``layer``/``never``)
and ``last`` (the largest id reached is L - 1 + last: the loop's own captures, or a capture after
the loop at ``self.end_layer``, id L, before the final norm, as DeepSeek-V2's loop has from
0.25.0).
"""

from __future__ import annotations

import ast
import json
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

MODELS = "vllm/model_executor/models/"


class Release:
    def __init__(self, wheel: Path) -> None:
        self.zip = zipfile.ZipFile(wheel)
        self.names = set(self.zip.namelist())
        self._trees: dict[str, ast.Module | None] = {}
        self.classes: dict[str, dict[str, ast.ClassDef]] = {}
        self.captures: dict[str, list[dict[str, Any]]] = {}

    def text(self, name: str) -> str | None:
        return self.zip.read(name).decode("utf-8") if name in self.names else None

    def tree(self, name: str) -> ast.Module | None:
        if name not in self._trees:
            text = self.text(name)
            self._trees[name] = None if text is None else ast.parse(text)
        return self._trees[name]


def functions(tree: ast.AST) -> Iterator[ast.FunctionDef]:
    yield from (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))


def imported_modules(tree: ast.Module, package: str) -> list[str]:
    """Paths of the vllm modules ``tree`` imports from (absolute, or relative to package)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.level == 1:
                out.append(f"{package}{node.module.replace('.', '/')}.py")
            elif node.module.startswith("vllm."):
                out.append(node.module.replace(".", "/") + ".py")
    return out


def registry(release: Release) -> dict[str, tuple[str, str]]:
    tree = release.tree(MODELS + "registry.py")
    assert tree is not None
    out = {}
    for node in tree.body:
        target = (
            node.target if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [None])[0]
        )
        name = getattr(target, "id", "")
        if name in {"_TEXT_GENERATION_MODELS", "_MULTIMODAL_MODELS"} and isinstance(
            node.value, ast.Dict
        ):
            for k, v in zip(node.value.keys, node.value.values):
                if isinstance(k, ast.Constant) and isinstance(v, ast.Tuple) and len(v.elts) == 2:
                    module, cls = (e.value for e in v.elts if isinstance(e, ast.Constant))
                    out[k.value] = (f"{MODELS}{module}.py", cls)
    return out


def _classes(release: Release, module: str) -> dict[str, ast.ClassDef]:
    if module not in release.classes:
        tree = release.tree(module)
        release.classes[module] = (
            {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)} if tree else {}
        )
    return release.classes[module]


def _origin(release: Release, module: str, name: str) -> str | None:
    """The module a class name used in ``module`` is defined in."""
    if name in _classes(release, module):
        return module
    tree = release.tree(module)
    for node in tree.body if tree else ():
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and any(a.name == name for a in node.names)
        ):
            found = imported_modules(ast.Module(body=[node], type_ignores=[]), MODELS)
            return found[0] if found else None
    return None


def _bases(cls: ast.ClassDef) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in cls.bases]


_EAGLE3_METHODS = {
    "get_eagle3_aux_hidden_state_layers",
    "get_eagle3_default_aux_hidden_state_layers",
}


def inherits(
    release: Release, module: str, name: str, has: Callable[[ast.ClassDef], bool], depth: int = 0
) -> bool:
    """Whether class ``name`` of ``module``, or a base class it imports (8 deep at most),
    ``has`` what is asked."""
    cls = _classes(release, module).get(name)
    if cls is None or depth > 8:
        return False
    if has(cls):
        return True
    for base in _bases(cls):
        origin = _origin(release, module, base)
        if origin and inherits(release, origin, base, has, depth + 1):
            return True
    return False


def _eagle3(release: Release, module: str, name: str) -> bool:
    """Whether the class defines or inherits the EAGLE-3 aux-layer methods."""
    return inherits(
        release,
        module,
        name,
        lambda cls: any(
            isinstance(n, ast.FunctionDef) and n.name in _EAGLE3_METHODS for n in cls.body
        ),
    )


def _captures(release: Release, module: str) -> list[dict[str, Any]]:
    if module not in release.captures:
        tree = release.tree(module)
        text = release.text(module) or ""
        release.captures[module] = (
            [r for fn in functions(tree) if (r := _capture_rule(release, fn))]
            if tree and "aux_hidden_state" in text
            else []
        )
    return release.captures[module]


def _capture_module(release: Release, module: str, name: str) -> str | None:
    """The module whose layer loop serves class ``name``: its own, a base's, an import's."""
    if _captures(release, module):
        return module
    cls = _classes(release, module).get(name)
    for base in _bases(cls) if cls else ():
        origin = _origin(release, module, base)
        if origin and origin != module and (found := _capture_module(release, origin, base)):
            return found
    tree = release.tree(module)
    for imported in imported_modules(tree, MODELS) if tree else ():
        if imported.startswith(MODELS) and _captures(release, imported):
            return imported
    return None


def _rule(release: Release, module: str, cls: str) -> dict[str, Any] | None:
    """The capture rule of the layer loop serving class ``cls`` of ``module``."""
    found = _capture_module(release, module, cls)
    if found is None:
        return None
    rules = {json.dumps(r, sort_keys=True) for r in _captures(release, found)}
    if len(rules) != 1:
        print(f"  {cls}: {len(rules)} capture rules in {found}", file=sys.stderr)
        return None
    return {**json.loads(rules.pop()), "file": found.removeprefix(MODELS)}


def _init_of(
    release: Release, module: str, name: str, depth: int = 0
) -> tuple[str, ast.FunctionDef] | None:
    """The ``__init__`` class ``name`` runs (its own or a base's), with its module."""
    cls = _classes(release, module).get(name)
    if cls is None or depth > 8:
        return None
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            return module, node
    for base in _bases(cls):
        origin = _origin(release, module, base)
        if origin and (found := _init_of(release, origin, base, depth + 1)):
            return found
    return None


def delegate(release: Release, module: str, name: str) -> tuple[str, str] | None:
    """Where a multimodal wrapper's ``self.language_model`` comes from: ``("arch", X)`` (built
    by registry name X), ``("class", "module:Class")`` (built directly), ``("text_config",
    "")`` (the architecture the checkpoint's text config names), or None (no such line)."""
    found = _init_of(release, module, name)
    if found is None:
        return None
    where, init = found
    for node in ast.walk(init):
        if not (
            isinstance(node, ast.Assign)
            and getattr(node.targets[0], "attr", "") == "language_model"
            and isinstance(node.value, ast.Call)
        ):
            continue
        call = node.value
        callee = call.func.id if isinstance(call.func, ast.Name) else ""
        given = next((k.value for k in call.keywords if k.arg == "model_class"), None)
        if isinstance(given, ast.Name) and (origin := _origin(release, where, given.id)):
            return "class", f"{origin}:{given.id}"
        if callee in {"init_vllm_registered_model", "initialize_model"}:
            names = [
                e.value
                for lst in ast.walk(call)
                if isinstance(lst, ast.List)
                for e in lst.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            ]
            return ("arch", names[0]) if names else ("text_config", "")
        origin = _origin(release, where, callee) if callee else None
        if origin:
            return "class", f"{origin}:{callee}"
    return None


def archs(release: Release) -> dict[str, dict[str, Any]]:
    """Per served architecture, its layer loop's capture rule; a multimodal wrapper that passes
    the ids to its language model carries that model's rule and ``via`` (its architecture or
    class), or only ``via: text_config`` when the checkpoint names it."""
    out = {}
    known = registry(release)
    for arch, (module, cls) in sorted(known.items()):
        if module not in release.names or not _eagle3(release, module, cls):
            continue
        rule = _rule(release, module, cls) if _capture_module(release, module, cls) else None
        if rule is not None:
            out[arch] = rule
            continue
        via = delegate(release, module, cls)
        if via is None:
            print(f"  {arch}: no capture loop found", file=sys.stderr)
            continue
        kind, target = via
        wrapper = module.removeprefix(MODELS)
        if kind == "text_config":
            out[arch] = {"via": "text_config", "wrapper": wrapper}
            continue
        if kind == "arch":
            inner = known.get(target)
            found = _rule(release, *inner) if inner and inner[0] in release.names else None
        else:
            inner_module, inner_cls = target.split(":")
            found, target = _rule(release, inner_module, inner_cls), inner_cls
        if found is None:
            print(f"  {arch}: its language model {target} has no capture loop", file=sys.stderr)
            continue
        out[arch] = {**found, "via": target, "wrapper": wrapper}
    return out


def _index_offset(node: ast.expr) -> int | None:
    if isinstance(node, ast.Name):
        return 0
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        if isinstance(node.right, ast.Constant) and isinstance(node.right.value, int):
            return node.right.value
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return None
    return None


def _handles_none(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Compare) and any(isinstance(op, ast.Is | ast.IsNot) for op in n.ops)
        for n in ast.walk(node)
    )


def _mixin_handles_none(release: Release) -> bool:
    tree = release.tree(MODELS + "interfaces.py")
    fn = (
        next((f for f in functions(tree) if f.name == "_maybe_add_hidden_state"), None)
        if tree
        else None
    )
    return fn is not None and _handles_none(fn)


def _capture_in(stmt: ast.stmt) -> tuple[int | None, bool] | None:
    """(index offset, handles a None residual) of a capture in one statement, if any."""
    for node in ast.walk(stmt):
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.ops[0], ast.In)
            and getattr(node.test.comparators[0], "attr", "") == "aux_hidden_state_layers"
        ):
            return _index_offset(node.test.left), _handles_none(node)
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", "") == "_maybe_add_hidden_state"
        ):
            return _index_offset(node.args[1]), True
    return None


def _calls_layer(stmt: ast.stmt) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and "layer" in n.func.id
        for n in ast.walk(stmt)
    )


def _capture_test(stmt: ast.stmt) -> ast.expr | None:
    """The index a capture in ``stmt`` is taken at (``X`` of ``if X in
    self.aux_hidden_state_layers`` or of ``_maybe_add_hidden_state(states, X, ...)``), if any."""
    for node in ast.walk(stmt):
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.ops[0], ast.In)
            and getattr(node.test.comparators[0], "attr", "") == "aux_hidden_state_layers"
        ):
            return node.test.left
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", "") == "_maybe_add_hidden_state"
        ):
            return node.args[1]
    return None


def _calls_norm(stmt: ast.stmt) -> bool:
    return any(
        isinstance(n, ast.Call) and getattr(n.func, "attr", "") in {"norm", "final_layernorm"}
        for n in ast.walk(stmt)
    )


def _after_loop(rest: list[ast.stmt]) -> int | None:
    """What the statements after the layer loop add to the largest id reached: 1 where one
    captures at ``self.end_layer`` (id L, the last layer's output) the un-normalised
    ``hidden_states + residual`` before the final norm runs (``residual:L``), 0 where none
    captures; None (printed) for a capture after the loop of any other kind."""
    normed = False
    for stmt in rest:
        at = _capture_test(stmt)
        if at is None:
            normed = normed or _calls_norm(stmt)
            continue
        text = ast.unparse(stmt)
        if (
            ast.unparse(at) == "self.end_layer"
            and not normed
            and ("hidden_states + residual" in text or "_maybe_add_hidden_state" in text)
        ):
            return 1
        print(f"  a capture after the layer loop not understood: {text[:120]!r}", file=sys.stderr)
        return None
    return 0


def _capture_rule(release: Release, fn: ast.FunctionDef) -> dict[str, Any] | None:
    """plus (id k captures residual:k+plus), id0 and the largest id reached (L-1+last)."""
    embed_first = False
    for n, stmt in enumerate(fn.body):
        if isinstance(stmt, ast.For):
            at = [i for i, s in enumerate(stmt.body) if _calls_layer(s)]
            caps = [(i, c) for i, s in enumerate(stmt.body) if (c := _capture_in(s))]
            if not at or not caps:
                continue
            ((where, (offset, none_ok)),) = caps
            if offset is None:
                return None
            none_ok = none_ok and (
                _mixin_handles_none(release) if "_maybe_add" in ast.unparse(stmt) else True
            )
            plus = (1 if where > at[0] else 0) - offset
            if embed_first:
                id0 = "embed"
            elif offset == 0 and plus == 0:
                id0 = "embed" if none_ok else "crash"
            else:
                id0 = "never" if offset > 0 else "layer"
            after = _after_loop(fn.body[n + 1 :])
            if after is None:
                return None
            if after and plus != 0:
                print(f"  {fn.name}: a capture after a loop with plus {plus}", file=sys.stderr)
                return None
            return {"plus": plus, "id0": id0, "last": max(offset, after)}
        if _capture_in(stmt) and "_maybe_add" in ast.unparse(stmt):
            embed_first = _mixin_handles_none(release)
    return None
