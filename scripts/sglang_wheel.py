"""What one sglang release wheel says about EAGLE-3 capture, read from its source.

Nothing of sglang is imported. The model files are parsed with ``ast``; each architecture
named in a module's ``EntryClass`` is followed through its base classes to the
``set_eagle3_layers_to_capture`` it runs. That one method (a few lines that only compute a
list) is compiled alone, with no builtins but ``hasattr``/``setattr``/``len``/``list``/
``max`` and no import, and run on stub objects shaped from the classes' ``__init__``
assignments (``self.model = DeepseekV2Model(...)``), so delegation (Kimi-K2.5 to its
DeepSeek-V3 model, Qwen-MoE to its inner model) is followed as the release wrote it. The
stub that ends up holding ``layers_to_capture`` names the class whose ``forward`` captures;
that forward is read (``sglang_forward.py``) to say where the capture happens and what
indices 0 and L do.
"""

from __future__ import annotations

import ast
import functools
import re
import textwrap
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

METHOD = "set_eagle3_layers_to_capture"
MODELS = "sglang/srt/models/"
PROBE_LAYERS = 61
_SAFE_BUILTINS = {
    "hasattr": hasattr,
    "setattr": setattr,
    "getattr": getattr,
    "len": len,
    "list": list,
    "max": max,
    "min": min,
    "AttributeError": AttributeError,
    "ValueError": ValueError,
    "IndexError": IndexError,
}


@dataclass
class _Module:
    name: str
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)  # local -> (module, name)
    modules: dict[str, str] = field(default_factory=dict)  # local -> module (import qwen3_5)
    entries: list[str] = field(default_factory=list)
    text: str = ""


_PARSED: dict[int, _Module] = {}  # hash of a file's text -> its module (releases share files)


ClassRef = tuple[str, str]  # (module, class name)


class Wheel:
    """The model sources of one release wheel, indexed by module and class."""

    def __init__(self, path: Path) -> None:
        self.modules: dict[str, _Module] = {}
        self._mro: dict[ClassRef, list[ClassRef]] = {}
        texts: dict[str, str] = {}
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if name.startswith(MODELS) and name.endswith(".py") and name.count("/") == 3:
                    texts[name[len(MODELS) : -3]] = z.read(name).decode(errors="replace")
            self.graph_default = any(
                _zero_arg_call(z.read(n).decode(errors="replace"))
                for n in z.namelist()
                if n.startswith("sglang/srt/model_executor/") and n.endswith(".py")
            )
        for name in _relevant(texts):
            self._add(name, texts[name])

    def _add(self, name: str, text: str) -> None:
        key = hash((name, text))
        if key in _PARSED:
            self.modules[name] = _PARSED[key]
            return
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return
        mod = _Module(name, text=text)
        _PARSED[key] = mod
        for node in [*tree.body, *(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))]:
            if isinstance(node, ast.ClassDef):
                mod.classes[node.name] = node
            elif isinstance(node, ast.ImportFrom) and node.module:
                source = node.module.rsplit(".", 1)[-1]
                if node.module == "sglang.srt.models":
                    for alias in node.names:
                        mod.modules[alias.asname or alias.name] = alias.name
                elif node.module.startswith("sglang.srt.models.") or node.level == 1:
                    for alias in node.names:
                        mod.imports[alias.asname or alias.name] = (source, alias.name)
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets
            ):
                values = (
                    node.value.elts
                    if isinstance(node.value, ast.List | ast.Tuple)
                    else [node.value]
                )
                mod.entries += [v.id for v in values if isinstance(v, ast.Name)]
        self.modules[name] = mod

    def resolve(self, module: str, name: str, depth: int = 0) -> ClassRef | None:
        mod = self.modules.get(module)
        if mod is None or depth > 8:
            return None
        if name in mod.classes:
            return module, name
        if name in mod.imports:
            return self.resolve(*mod.imports[name], depth + 1)
        return None

    def mro(self, ref: ClassRef) -> list[ClassRef]:
        """The class and its bases, depth first (enough for sglang's single inheritance)."""
        if ref in self._mro:
            return self._mro[ref]
        out: list[ClassRef] = self._mro.setdefault(ref, [])
        todo = [ref]
        while todo and len(out) < 32:
            module, name = todo.pop(0)
            out.append((module, name))
            for base in self.modules[module].classes[name].bases:
                found = self.resolve(module, base.id) if isinstance(base, ast.Name) else None
                if found and found not in out:
                    todo.append(found)
        return out

    def function(self, ref: ClassRef, name: str) -> tuple[ClassRef, ast.FunctionDef] | None:
        for module, cls in self.mro(ref):
            for item in self.modules[module].classes[cls].body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return (module, cls), item
        return None

    def architectures(self) -> dict[str, ClassRef]:
        """Every registered architecture whose class has the capture method."""
        out: dict[str, ClassRef] = {}
        for module, mod in sorted(self.modules.items()):
            for entry in mod.entries:
                ref = self.resolve(module, entry)
                if ref and self.function(ref, METHOD):
                    out.setdefault(entry, ref)
        return out

    def source(self, module: str, node: ast.stmt) -> str:
        lines = self.modules[module].text.splitlines()[node.lineno - 1 : node.end_lineno]
        return textwrap.dedent("\n".join(lines))

    def attribute_class(self, ref: ClassRef, attr: str) -> ClassRef | None:
        """The class ``__init__`` assigns to ``self.<attr>``: ``self.model = X(...)``,
        ``self._init_model(...)`` returning ``X(...)``, ``self.body_cls(...)`` with a class
        attribute ``body_cls = module.X``."""
        for module, cls in self.mro(ref):
            for item in self.modules[module].classes[cls].body:
                if not (isinstance(item, ast.FunctionDef) and item.name == "__init__"):
                    continue
                for node in ast.walk(item):
                    if (
                        isinstance(node, ast.Assign)
                        and any(is_self_attr(t, attr) for t in node.targets)
                        and isinstance(node.value, ast.Call)
                    ):
                        found = self._callee(ref, module, node.value.func)
                        if found:
                            return found
        return None

    def _callee(
        self, ref: ClassRef, module: str, func: ast.expr, depth: int = 0
    ) -> ClassRef | None:
        if isinstance(func, ast.Name):
            return self.resolve(module, func.id)
        if not isinstance(func, ast.Attribute) or depth > 2:
            return None
        if isinstance(func.value, ast.Name) and func.value.id in self.modules[module].modules:
            return self.resolve(self.modules[module].modules[func.value.id], func.attr)
        if not is_self_attr(func, func.attr):
            return None
        for owner, cls in self.mro(ref):
            for item in self.modules[owner].classes[cls].body:
                if isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == func.attr for t in item.targets
                ):
                    return self._callee(ref, owner, item.value, depth + 1)
                if isinstance(item, ast.FunctionDef) and item.name == func.attr:
                    for node in ast.walk(item):
                        if isinstance(node, ast.Return) and isinstance(node.value, ast.Call):
                            return self._callee(ref, owner, node.value.func, depth + 1)
        return None


def _relevant(texts: dict[str, str]) -> set[str]:
    """The model files that define the method or import (transitively) one that does: the
    only ones worth parsing."""
    imports = {name: _imported(text) for name, text in texts.items()}
    found = {name for name, text in texts.items() if METHOD in text}
    while True:  # the files that import them
        more = {n for n, used in imports.items() if n not in found and used & found}
        if not more:
            break
        found |= more
    todo = list(found)
    while todo:  # and the files those import (base classes, inner models)
        for name in imports[todo.pop()] & texts.keys() - found:
            found.add(name)
            todo.append(name)
    return found


def _imported(text: str) -> set[str]:
    found = set(re.findall(r"sglang\.srt\.models\.(\w+)|from \.(\w+) import", text))
    names = {a or b for a, b in found}
    for group in re.findall(r"from sglang\.srt\.models import (\([^)]*\)|[\w, ]+)", text):
        names |= set(re.findall(r"\w+", group))
    return names


def is_self_attr(node: ast.AST, attr: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attr
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _zero_arg_call(text: str) -> bool:
    """The release calls ``set_eagle3_layers_to_capture()`` with no ids outside the model:
    CUDA graphs captured with the default list (EC514)."""
    if METHOD not in text:
        return False
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == METHOD
        and not n.args
        and not n.keywords
        for n in ast.walk(ast.parse(text))
    )


class _Stub(SimpleNamespace):
    ref: ClassRef | None


@functools.cache
def _compile(source: str) -> Any:
    namespace: dict[str, Any] = {"__builtins__": _SAFE_BUILTINS}
    last = SimpleNamespace(is_last_rank=True)
    namespace.update(
        Optional=Any,
        List=list,
        get_pp_group=lambda: last,
        get_parallel=lambda: SimpleNamespace(pp_group=last),
    )
    exec(compile(source, "<sglang method>", "exec"), namespace)
    return namespace[METHOD]


def stub(wheel: Wheel, ref: ClassRef | None, num_layers: int, depth: int = 0) -> _Stub:
    """A stand-in for an instance of ``ref`` with its ``model`` / ``language_model``."""
    config = SimpleNamespace(
        num_hidden_layers=num_layers, text_config=SimpleNamespace(num_hidden_layers=num_layers)
    )
    obj = _Stub(
        ref=ref,
        config=config,
        pp_group=SimpleNamespace(is_last_rank=True),
        layers=[SimpleNamespace() for _ in range(num_layers)],
        layers_to_capture=None,
        capture_aux_hidden_states=False,
    )
    if ref is None or depth > 3:
        return obj
    for attr in ("model", "language_model"):
        inner = wheel.attribute_class(ref, attr)
        setattr(obj, attr, stub(wheel, inner, num_layers, depth + 1))
    found = wheel.function(ref, METHOD)
    if found:
        (module, _), node = found
        fn = _compile(wheel.source(module, node))
        if len(node.args.args) == 1:
            obj.set_eagle3_layers_to_capture = lambda ids=None: fn(obj)
        else:
            obj.set_eagle3_layers_to_capture = lambda ids=None: fn(obj, ids)
    return obj


def _holder(obj: _Stub) -> _Stub | None:
    """The stub (depth first, innermost) whose ``layers_to_capture`` was set."""
    for attr in ("model", "language_model"):
        inner = getattr(obj, attr, None)
        if isinstance(inner, _Stub):
            found = _holder(inner)
            if found is not None:
                return found
    return obj if obj.layers_to_capture is not None else None


def run(
    wheel: Wheel, ref: ClassRef, ids: list[int] | None
) -> tuple[str | list[int], ClassRef | None]:
    """``layers_to_capture`` as the release's method leaves it (or the exception it
    raises), and the class of the object holding it."""
    top = stub(wheel, ref, PROBE_LAYERS)
    try:
        top.set_eagle3_layers_to_capture(ids)
    except Exception as exc:  # the method's own failure is the finding
        return type(exc).__name__, None
    holder = _holder(top)
    if holder is None:
        return "unset", None
    return list(holder.layers_to_capture), holder.ref
