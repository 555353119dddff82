"""Derive how each mlx-vlm release picks the drafter kind a draft runs as, and when it drops
the drafter; write engines/mlx_drafters_rules.json.

    python scripts/gen_mlx_drafters.py WHEEL_DIR [--out FILE] [--check] [--download]

The wheels are gen_mlx_rules.py's (``--download`` fetches every mlx-vlm release, about 2 MB
each). Each ``mlx_vlm-X-*.whl`` is read with zipfile and ast; mlx is never imported. From
``mlx_vlm/speculative/drafters/__init__.py``:

- ``DRAFTER_KIND_BY_MODEL_TYPE`` (the draft config's ``model_type``, else its
  ``speculators_model_type`` -> the kind it requires) and ``DEFAULT_DRAFTER_KIND`` (the kind
  of a draft whose type the table does not name, when no ``--draft-kind`` is given);
- what else ``resolve_drafter_kind`` reads: a model type whose name holds ``mtp``
  (``mtp-name``) and a config declaring ``num_nextn_predict_layers`` (``nextn``); a
  ``--draft-kind`` the required kind contradicts is overridden (``Overriding``);
- what ``validate_drafter_compatibility`` refuses: a kind other than the required one (by the
  table and, where it reads it, the ``mtp`` name) and, for kind ``mtp``, a draft whose
  ``backbone_hidden_size`` / ``target_hidden_size`` / ``hidden_size`` is not the target's;
- whether the server and the generate command catch that refusal and decode without the
  drafter (``falling back to autoregressive generation``) instead of stopping.

A structure the script does not recognise makes it exit 1. ``--check`` compares with the
committed file and exits 1 on any difference.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import release_scan
from release_scan import Scan, Wheel, grouped, rows

OUT = Path(__file__).resolve().parents[1] / "pytest_eagle_contract/engines/mlx_drafters_rules.json"
DRAFTERS = "mlx_vlm/speculative/drafters/__init__.py"
FALLBACK = "falling back to autoregressive generation"


def _assigned(tree: ast.Module, name: str) -> Any:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise SystemExit(f"no {name} assigned")


def _function(tree: ast.Module, name: str) -> str:
    """The source of ``name`` and of every module function it calls, however deep."""
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    if name not in defs:
        raise SystemExit(f"no function {name}")
    seen, todo = [name], [name]
    while todo:
        for c in ast.walk(defs[todo.pop()]):
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name):
                if c.func.id in defs and c.func.id not in seen:
                    seen.append(c.func.id)
                    todo.append(c.func.id)
    return "\n".join(ast.unparse(defs[n]) for n in seen)


def _known(text: str) -> Any:
    try:
        return sorted(_assigned(ast.parse(text), "KNOWN_DRAFTER_KINDS"))
    except SystemExit:
        return []


def _signals(source: str) -> list[str]:
    out = []
    if "'mtp' in str(model_type).lower()" in source:
        out.append("mtp-name")
    if "num_nextn_predict_layers" in source:
        out.append("nextn")
    return out


def derive(path: Path) -> dict[str, Any] | None:
    wheel = Wheel(path)
    text = wheel.text(DRAFTERS)
    if text is None or "'eagle3'" not in str(_known(text)):
        return None  # 0.5.x: no EAGLE-3 drafter kind (and no EAGLE-3 drafter: gen_mlx_rules)
    tree = ast.parse(text)
    resolve = _function(tree, "resolve_drafter_kind")
    validate = _function(tree, "validate_drafter_compatibility")
    if "return expected" not in resolve:
        raise SystemExit(f"{wheel.version}: resolve_drafter_kind does not override the kind")
    if "backbone_hidden_size" not in validate or "draft_kind != 'mtp'" not in validate:
        raise SystemExit(f"{wheel.version}: validate_drafter_compatibility reads no MTP width")
    callers = sorted(
        n
        for n in wheel.names
        if n.endswith(".py")
        and n != DRAFTERS
        and "validate_drafter_compatibility(" in (wheel.text(n) or "")
    )
    dropping = [n for n in callers if FALLBACK in (wheel.text(n) or "")]
    return {
        "default_kind": _assigned(tree, "DEFAULT_DRAFTER_KIND"),
        "resolve_reads": ["model_type", *_signals(resolve)],
        "validate_reads": ["model_type", *_signals(validate)],
        "drops_drafter_in": dropping,
        "kinds": _assigned(tree, "DRAFTER_KIND_BY_MODEL_TYPE"),
    }


def tables(releases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "releases": list(releases),
        "rows": rows(releases, {"kinds"}),
        "kinds": grouped(releases, "kinds", as_row=lambda kind: {"kind": kind}),
    }


SCAN = Scan("mlx-vlm", "mlx_vlm-{version}-*.whl", OUT, derive, tables)


def main(argv: list[str] | None = None) -> int:
    return release_scan.main(SCAN, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
