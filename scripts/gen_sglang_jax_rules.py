"""Derive sglang-jax's EAGLE-3 rules from its source; write engines/sglang_jax_rules.json.

    python scripts/gen_sglang_jax_rules.py REPO [--out FILE] [--check]

REPO is a git clone of sgl-project/sglang-jax (``git clone https://github.com/sgl-project/
sglang-jax``). The index's two releases (0.0.1, 0.0.1.post1) carry no EAGLE-3 code, so the
rules come from the repository: every tag (``v0.0.3rc*``) and the commit REPO's HEAD is at,
each read with ``git show`` and ast (nothing imported or run):

- where the target's model runner reads the ids (``model_executor/model_runner.py``: the
  ``eagle_config`` of ``self.model_config.hf_config``, the config of the model that runner
  loads, for the target worker the *target's* config.json, not the draft's);
- per model file with ``set_eagle3_layers_to_capture``: its architectures (``EntryClass``), the
  default capture list, what it adds to the ids, and what its layer loop appends before
  layer i (``hidden_states + residual``: layer 0 fails, residual None; with ``if residual is
  not None else hidden_states``: the embedding).

A structure the script does not recognise makes it exit 1. ``--check`` compares with the
committed file and exits 1 on any difference.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Any

import source_scan
from source_scan import Source, git

OUT = Path(__file__).resolve().parents[1] / "pytest_eagle_contract/engines/sglang_jax_rules.json"
PKG = "python/sgl_jax/srt/"
RUNNER = PKG + "model_executor/model_runner.py"
TARGET_READ = 'eagle_config = getattr(self.model_config.hf_config, "eagle_config", None)'


def _entry_classes(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "EntryClass":
            value = node.value
            names = value.elts if isinstance(value, ast.List) else [value]
            return [n.id for n in names if isinstance(n, ast.Name)]
    return []


def _model_file(text: str, name: str) -> dict[str, Any]:
    tree = ast.parse(text)
    fn = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef) and n.name == "set_eagle3_layers_to_capture"
    )
    body = ast.unparse(fn)
    default = re.search(
        r"layers_to_capture = \[\s*2,\s*num_layers // 2,\s*num_layers - 3,?\s*\]", body
    )
    plus = re.search(r"layers_to_capture = \[val \+ (\d+) for val in layer_ids\]", body)
    if default is None or plus is None:
        raise SystemExit(f"{name}: set_eagle3_layers_to_capture in an unknown form")
    if "aux_hidden_states.append(hidden_states + residual if residual is not None else " in (
        ast.unparse(tree)
    ):
        id0 = "embed"
    elif "aux_hidden_states.append(hidden_states + residual)" in ast.unparse(tree):
        id0 = "crash"
    else:
        raise SystemExit(f"{name}: its layer loop captures in an unknown way")
    if "if layer_id in self.layers_to_capture:" not in text:
        raise SystemExit(f"{name}: no capture before each layer")
    return {
        "archs": _entry_classes(tree),
        "file": name.removeprefix("python/"),
        "default": "2,L//2,L-3",
        "plus": int(plus.group(1)),
        "index0": id0,
    }


def derive(repo: Path, ref: str) -> dict[str, Any] | None:
    runner = git(repo, "show", f"{ref}:{RUNNER}", check=False)
    if "set_eagle3_layers_to_capture" not in runner:
        return None
    if TARGET_READ not in runner or "not self.is_draft_worker" not in runner:
        raise SystemExit(f"{ref}: the model runner reads the ids in an unknown way")
    files = git(repo, "grep", "-l", "def set_eagle3_layers_to_capture", ref, "--", PKG + "models")
    models = []
    for line in sorted(files.split()):
        name = line.partition(":")[2]
        models.append(_model_file(git(repo, "show", f"{ref}:{name}"), name))
    return {
        "reads": "target_config.eagle_config.eagle_aux_hidden_state_layer_ids",
        "models": models,
    }


SOURCE = Source(repo="sgl-project/sglang-jax", out=OUT, derive=derive)


def main(argv: list[str] | None = None) -> int:
    return source_scan.main(SOURCE, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
