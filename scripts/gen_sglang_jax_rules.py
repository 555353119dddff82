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

import argparse
import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "pytest_eagle_contract/engines/sglang_jax_rules.json"
PKG = "python/sgl_jax/srt/"
RUNNER = PKG + "model_executor/model_runner.py"
TARGET_READ = 'eagle_config = getattr(self.model_config.hf_config, "eagle_config", None)'


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"git {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


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


def derive(repo: Path, ref: str) -> dict[str, Any]:
    runner = _git(repo, "show", f"{ref}:{RUNNER}")
    if "set_eagle3_layers_to_capture" not in runner:
        raise SystemExit(f"{ref}: the model runner sets no EAGLE-3 capture")
    if TARGET_READ not in runner or "not self.is_draft_worker" not in runner:
        raise SystemExit(f"{ref}: the model runner reads the ids in an unknown way")
    files = _git(repo, "grep", "-l", "def set_eagle3_layers_to_capture", ref, "--", PKG + "models")
    models = []
    for line in sorted(files.split()):
        name = line.partition(":")[2]
        models.append(_model_file(_git(repo, "show", f"{ref}:{name}"), name))
    return {
        "reads": "target_config.eagle_config.eagle_aux_hidden_state_layer_ids",
        "models": models,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("repo", type=Path, help="a git clone of sgl-project/sglang-jax")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    tags = _git(args.repo, "tag", "--sort=creatordate").split()
    if args.check:  # the snapshot the committed file was read from
        head = json.loads(args.out.read_text("utf-8"))["snapshot"]["commit"]
    else:
        head = _git(args.repo, "rev-parse", "HEAD").strip()
    refs = [*tags, head]
    facts = {ref: derive(args.repo, ref) for ref in refs}
    snapshot = {
        "repo": "sgl-project/sglang-jax",
        "commit": head,
        "date": _git(args.repo, "log", "-1", "--format=%cs", head).strip(),
    }
    same = all(facts[r] == facts[head] for r in refs)
    table = {
        "snapshot": snapshot,
        "refs": refs if same else {r: facts[r] for r in refs},
        **facts[head],
    }
    if not same:
        raise SystemExit("the tags and the snapshot differ: give each its own rows first")
    text = json.dumps(table, indent=1) + "\n"
    if args.check:
        if args.out.read_text("utf-8") != text:
            print(f"{args.out} differs from the source", file=sys.stderr)
            return 1
        print(f"{args.out} agrees with {len(refs)} refs", file=sys.stderr)
        return 0
    args.out.write_text(text, "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
