"""Derive MLX's (mlx-vlm's) EAGLE-3 rules from its released wheels; write
engines/mlx_rules.json.

    python scripts/gen_mlx_rules.py WHEEL_DIR [--out FILE] [--check] [--download]

``--download`` fetches every mlx-vlm wheel (pure Python, about 1 MB each; mlx-lm has no
EAGLE-3 drafter). Each ``mlx_vlm-X-*.whl`` is read with zipfile and ast; mlx is never imported:

- the draft config: ``Eagle3Config.__post_init__`` (``speculative/drafters/eagle3/config.py``)
  is compiled alone and *run* on probe configs: which top-level keys it takes the ids from,
  in what order, the default without them (it counts the *draft's* own layers), and how an
  id becomes a capture index (``capture_layer_ids``);
- the draft fc's width (``nn.Linear(N * self.target_hidden_size, ...)`` in the drafter);
- per model folder whose layer loop captures (``capture_layer_ids``): where (after layer i:
  ``residual:i+1``), that states come out in layer order, each once (a set).

A structure the script does not recognise makes it exit 1. ``--check`` compares with the
committed file and exits 1 on any difference.
"""

from __future__ import annotations

import ast
import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import release_scan
from release_scan import Scan, Wheel, compile_alone, grouped, rows

OUT = Path(__file__).resolve().parents[1] / "pytest_eagle_contract/engines/mlx_rules.json"
CONFIG = "mlx_vlm/speculative/drafters/eagle3/config.py"
DRAFTER = "mlx_vlm/speculative/drafters/eagle3/eagle3.py"
_PROBE = [5, 9, 13]


def _post_init(wheel: Wheel) -> Callable[[Any], None]:
    tree = ast.parse(wheel.text(CONFIG) or "")
    cls = next(
        (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Eagle3Config"), None
    )
    fn = (
        next(
            (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__post_init__"),
            None,
        )
        if cls
        else None
    )
    if fn is None:
        raise SystemExit(f"{wheel.version}: Eagle3Config.__post_init__ not found")
    run: Callable[[Any], None] = compile_alone(fn, "<mlx>")
    return run


def _fields(wheel: Wheel) -> list[str]:
    tree = ast.parse(wheel.text(CONFIG) or "")
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Eagle3Config")
    return [
        n.target.id
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    ]


def _config(run: Callable[[Any], None], fields: list[str], layers: int, **given: Any) -> Any:
    text = types.SimpleNamespace(num_hidden_layers=layers, hidden_size=64)
    cfg = types.SimpleNamespace(transformer_layer_config=text, target_hidden_size=None)
    for name in fields:
        if name.endswith("layer_ids"):
            setattr(cfg, name, [] if name != "eagle_aux_hidden_state_layer_ids" else None)
    for key, value in given.items():
        setattr(cfg, key, value)
    run(cfg)
    return cfg


def _draft_side(wheel: Wheel) -> dict[str, Any]:
    run, fields = _post_init(wheel), _fields(wheel)
    keys = [f for f in fields if f.endswith("layer_ids") and f != "capture_layer_ids"]
    order = []
    for key in keys:  # which key wins when several hold ids
        others = [k for k in keys if k != key]
        got = _config(run, fields, 32, **{key: _PROBE, **{k: [1, 2, 3] for k in others}})
        if got.target_layer_ids == _PROBE:
            order.insert(0, key)
        else:
            order.append(key)
    for key in order:
        if _config(run, fields, 32, **{key: _PROBE}).target_layer_ids != _PROBE:
            raise SystemExit(f"{wheel.version}: {key} is not read as the ids")
    defaults = {n: _config(run, fields, n).target_layer_ids for n in (1, 32, 61)}
    if all(defaults[n] == [2, n // 2, max(n - 3, 0)] for n in defaults):
        default = "2,D//2,max(D-3,0) of the draft's own num_hidden_layers D"
    else:
        raise SystemExit(f"{wheel.version}: default ids {defaults} not understood")
    probe = [0, 1, 2, 7, 40]
    captures = _config(run, fields, 32, target_layer_ids=probe).capture_layer_ids
    if captures != [max(i - 1, 0) for i in probe]:
        raise SystemExit(f"{wheel.version}: capture index rule {captures} not understood")
    given = _config(run, fields, 32, target_layer_ids=_PROBE, capture_layer_ids=[4, 4, 4])
    tree = ast.parse(wheel.text(CONFIG) or "")
    text_cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TextConfig")
    layers = next(
        n.value.value
        for n in text_cls.body
        if isinstance(n, ast.AnnAssign)
        and getattr(n.target, "id", "") == "num_hidden_layers"
        and isinstance(n.value, ast.Constant)
    )
    return {
        "draft_layers_default": layers,
        "keys": order,
        "default": default,
        "capture": "max(id-1,0)",
        "capture_key": given.capture_layer_ids == [4, 4, 4],
    }


def _fc(wheel: Wheel) -> int:
    found = set(
        re.findall(
            r"nn\.Linear\(\s*(\d+)\s*\*\s*self\.target_hidden_size", wheel.text(DRAFTER) or ""
        )
    )
    if len(found) != 1:
        raise SystemExit(f"{wheel.version}: fc width {found} not understood")
    return int(found.pop())


def _captures_after(fn: ast.FunctionDef) -> bool | None:
    """True when a layer loop in ``fn`` appends the layer's output for ``i in capture...``
    after calling the layer; None when ``fn`` has no such loop."""
    for loop in (n for n in ast.walk(fn) if isinstance(n, ast.For)):
        called = appended = None
        for k, stmt in enumerate(loop.body):
            text = ast.unparse(stmt)
            if called is None and re.search(r"=\s*[\w.]*layers?\w*(\[[^\]]*\])?\(", text):
                called = k
            if appended is None and re.search(r"\bin capture\w*", text) and ".append(" in text:
                appended = k
        if appended is not None:
            if called is None:
                raise SystemExit(f"{fn.name}: a capture loop without a layer call")
            return appended > called
    return None


def _models(wheel: Wheel) -> dict[str, str]:
    """model folder -> where its loop captures (``after``: the output of layer i, each once,
    an id it never reaches dropped; ``after-strict``: the same, refusing such ids)."""
    out: dict[str, str] = {}
    for name in sorted(wheel.names):
        m = re.fullmatch(r"mlx_vlm/models/(\w+)/\w+\.py", name)
        text = wheel.text(name) if m else None
        if not m or not text or "capture_layer_ids" not in text:
            continue
        for fn in (n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef)):
            after = _captures_after(fn)
            if after is None:
                continue
            if not after:
                raise SystemExit(f"{wheel.version}: {name} captures before the layer")
            # a loop that refuses repeated or out-of-range ids (ValueError) instead of
            # capturing each layer once and never reaching the others
            strict = "raise ValueError" in ast.unparse(fn) and "capture_layer_ids" in ast.unparse(
                fn
            )
            site = "after-strict" if strict else "after"
            if out.get(m.group(1), site) != site:
                raise SystemExit(f"{wheel.version}: {m.group(1)} captures in two ways")
            out[m.group(1)] = site
    return out


def derive(path: Path) -> dict[str, Any] | None:
    wheel = Wheel(path)
    if CONFIG not in wheel.names:
        return None
    return {
        "draft": _draft_side(wheel),
        "fc": _fc(wheel),
        "order": "ascending-unique",
        "models": _models(wheel),
    }


def tables(releases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "releases": list(releases),
        "rows": rows(releases, {"models"}),
        "models": grouped(releases, "models", as_row=lambda site: {"site": site}),
    }


SCAN = Scan("mlx-vlm", "mlx_vlm-{version}-*.whl", OUT, derive, tables)


def main(argv: list[str] | None = None) -> int:
    return release_scan.main(SCAN, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
