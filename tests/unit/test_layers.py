"""The layer rule of docs/design.md ("Layers"), made true for every import: each room imports
only the rooms above it in the table, counting imports at module level, inside functions
and under ``TYPE_CHECKING``; no circle between modules among those same imports; and
the third-party libraries imported lazily are the ones the docs name."""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "pytest_eagle_contract"
DESIGN = ROOT / "docs" / "design.md"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted under the package ("checks.norms")
    target: str  # the imported module ("shards.shard")
    line: int
    typing_only: bool  # under `if TYPE_CHECKING:`
    at_top: bool  # at module level


def _section(title: str) -> str:
    text = DESIGN.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def layer_table() -> tuple[list[str], set[str]]:
    """The rooms in order (top first), and the base modules (the ``base`` row)."""
    rooms, base = [], set()
    for row in re.findall(r"^\| (\S+) \| (.+) \|$", _section("Layers"), re.M):
        name, holds = row
        if name in ("room", "---"):
            continue
        rooms.append(name)
        if name == "base":
            base = {m.strip() for m in holds.split(",")}
    return rooms, base


def heavy_named() -> set[str]:
    """The libraries the docs allow to be imported lazily."""
    para = _section("Layers").split("Third-party libraries", 1)[1].split("(`tests/", 1)[0]
    return set(re.findall(r"([a-z_][a-z_0-9]*)[,\s]", para.split(":", 1)[1]))


def _name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_module(dotted: str) -> bool:
    base = PACKAGE.joinpath(*dotted.split(".")) if dotted else PACKAGE
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _guarded(tree: ast.Module) -> set[int]:
    return {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }


def package_imports() -> list[Import]:
    """Every import of a package module by a package module."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = _name(path)
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        package = [p for p in package if p]
        tree = ast.parse(path.read_text())
        guarded, top = _guarded(tree), {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            elif node.module and node.module.split(".")[0] == PACKAGE.name:
                module = node.module.partition(".")[2]
            else:
                continue
            for alias in node.names:  # `from .. import outputs` imports a module
                full = f"{module}.{alias.name}" if module else alias.name
                target = full if _is_module(full) else module
                if target != name:
                    out.append(
                        Import(name, target, node.lineno, id(node) in guarded, id(node) in top)
                    )
    return out


def room_of(module: str, base: set[str]) -> str:
    head = module.split(".")[0] if module else "__init__"
    if head in base:
        return "base"
    if head in ("__init__", "__main__"):
        return "root"
    return head


def test_the_table_names_every_room_and_module() -> None:
    rooms, base = layer_table()
    found = {room_of(_name(p), base) for p in PACKAGE.rglob("*.py")}
    root_modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert root_modules == base, "a module at the package root is not in the base row"
    assert found == set(rooms), f"rooms in the code {sorted(found)}, in the table {rooms}"


def test_every_import_points_down_the_table() -> None:
    rooms, base = layer_table()
    rank = {room: i for i, room in enumerate(rooms)}
    upward = [
        f"{i.source}:{i.line} imports {i.target} ({room_of(i.source, base)} -> "
        f"{room_of(i.target, base)}{', for type hints' if i.typing_only else ''})"
        for i in package_imports()
        if rank[room_of(i.target, base)] > rank[room_of(i.source, base)]
    ]
    assert not upward, "imports that point up docs/design.md's layer table:\n" + "\n".join(upward)


def test_the_table_is_read_as_written() -> None:
    """The test itself can fail: an import from checks into the planner points up."""
    rooms, base = layer_table()
    assert rooms.index("checks") < rooms.index("plan") < rooms.index("shells")
    assert room_of("plan.planner", base) == "plan" and room_of("shards.stats", base) == "shards"
    assert room_of("findings", base) == "base" and room_of("", base) == "root"


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    """The first import circle found in ``graph`` (module -> the modules it imports), as
    the modules from one back to itself, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 5000))

    def visit(name: str, stack: list[str]) -> list[str] | None:
        state[name] = 1
        for dep in sorted(graph.get(name, ())):
            if state.get(dep) == 1:  # the path from dep back to dep
                path = [*stack, name]
                return [*path[path.index(dep) :], dep]
            if dep not in state and (found := visit(dep, [*stack, name])):
                return found
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (found := visit(name, [])):
            return found
    return None


def test_no_circle_between_modules() -> None:
    """Among every import: module level, inside functions and under ``TYPE_CHECKING``. A
    circle that runs through a function's import or a type hint is still two modules that
    cannot be read, tested or moved apart (checks/layout_types.py broke the last one)."""
    graph: dict[str, set[str]] = {}
    for i in package_imports():
        graph.setdefault(i.source, set()).add(i.target)
    found = circle(graph)
    assert found is None, "import circle: " + " -> ".join(found or [])


def test_the_circle_finder_finds_one() -> None:
    """The test above can fail: the layout modules' old circle (layout -> layout_compare ->
    layout_serving -> layout, the last for a type hint) is found, a line is not."""
    old = {
        "checks.layout": {"checks.layout_compare", "checks.layout_serving", "findings"},
        "checks.layout_compare": {"checks.layout_serving"},
        "checks.layout_serving": {"checks.layout", "findings"},
    }
    assert circle(old) == [
        "checks.layout",
        "checks.layout_compare",
        "checks.layout_serving",
        "checks.layout",
    ]
    assert circle({"x": {"a"}, "a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert circle({"a": {"b"}, "b": {"c"}}) is None


def test_lazy_third_party_imports_are_the_named_heavy_ones() -> None:
    named = heavy_named()
    assert {"torch", "safetensors", "transformers", "yaml", "hypothesis"} <= named
    lazy: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        guarded, top = _guarded(tree), {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if id(node) in guarded or id(node) in top:
                continue
            if isinstance(node, ast.Import):
                roots = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                roots = [node.module.split(".")[0]]
            else:
                continue
            for root in roots:
                if root not in sys.stdlib_module_names and root != PACKAGE.name:
                    lazy.setdefault(root, []).append(f"{_name(path)}:{node.lineno}")
    unnamed = {lib: where[:3] for lib, where in lazy.items() if lib not in named}
    assert not unnamed, f"lazy imports of libraries docs/design.md does not name: {unnamed}"
