"""Derive ROCm ATOM's EAGLE-3 rules from its source; write engines/atom_rules.json.

    python scripts/gen_atom_rules.py REPO [--out FILE] [--check]

REPO is a git clone of ROCm/ATOM (``git clone https://github.com/ROCm/ATOM``; it is not on the
package index). The rules come from every tag from the first with EAGLE-3 (``atom/config.py``
reading the draft's ``eagle_config``) and the commit REPO's HEAD is at, each read with
``git show`` and ast (nothing imported or run):

- ``atom/config.py``: the ids are the draft's ``eagle_config.eagle_aux_hidden_state_layer_ids``,
  taken only when ``eagle_config.use_aux_hidden_state`` is true (its default: false); a draft
  without ``eagle_config`` turns aux capture on with no ids (the target's default);
- the architectures (``support_model_arch_dict`` in ``model_engine/model_runner.py``) whose
  model class has ``set_aux_hidden_state_layers``, and the default its
  ``get_eagle3_aux_hidden_state_layers`` returns;
- where each of those model files captures (the residual stream entering layer i, the
  embedding at i = 0 where residual is None) and what a count mismatch meets (HEAD: a
  ``zip(strict=True)`` into the drafter's buffers; older tags: the concatenation into the fc).

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

OUT = Path(__file__).resolve().parents[1] / "pytest_eagle_contract/engines/atom_rules.json"
CONFIG = "atom/config.py"
RUNNER = "atom/model_engine/model_runner.py"
GATE = 'eagle_cfg.get("use_aux_hidden_state", False)'
IDS = '"eagle_aux_hidden_state_layer_ids", []'
CAPTURES = (
    re.compile(r"aux_hidden_states\.append\(\s*(\w+) if residual is None else \1 \+ residual\s*\)"),
    re.compile(r"aux_hidden_state = residual\.clone\(\) if capture_aux else None"),
)
DEFAULT = re.compile(r"return \(2, num_layers // 2, num_layers - 3\)")


def _arch_dict(text: str) -> dict[str, str]:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == (
            "support_model_arch_dict"
        ):
            return {k: v for k, v in ast.literal_eval(node.value).items()}
    raise SystemExit("no support_model_arch_dict")


def _method(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef | None:
    """``name`` as ``cls`` or a base class defined in the same file defines it."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    seen = set()
    while cls in classes and cls not in seen:
        seen.add(cls)
        node = classes[cls]
        for f in node.body:
            if isinstance(f, ast.FunctionDef) and f.name == name:
                return f
        cls = next((b.id for b in node.bases if isinstance(b, ast.Name) and b.id in classes), "")
    return None


def derive(repo: Path, ref: str) -> dict[str, Any] | None:
    config = git(repo, "show", f"{ref}:{CONFIG}")
    if "eagle_config" not in config:
        return None
    if GATE not in config or IDS not in config:
        raise SystemExit(f"{ref}: {CONFIG} reads the draft's eagle_config in an unknown way")
    archs: dict[str, str] = {}
    files: dict[str, str] = {}
    for arch, target in _arch_dict(git(repo, "show", f"{ref}:{RUNNER}")).items():
        module, _, cls = target.rpartition(".")
        path = module.replace(".", "/") + ".py"
        text = files.get(path)
        if text is None:
            text = files[path] = git(repo, "show", f"{ref}:{path}")
        tree = ast.parse(text)
        setter = _method(tree, cls, "set_aux_hidden_state_layers")
        if setter is None:
            continue
        delegates = "self.language_model." in ast.unparse(setter)
        if not DEFAULT.search(text) and not delegates:
            raise SystemExit(f"{ref}: {path} has an unknown EAGLE-3 default")
        if not any(p.search(text) for p in CAPTURES) and not delegates:
            raise SystemExit(f"{ref}: {path} captures in an unknown way")
        archs[arch] = path + (" (its language model's)" if delegates else "")
    found = git(
        repo, "grep", "-l", "combine_hidden_states(concat_aux)", ref, "--", "atom/spec_decode"
    )
    proposer = git(repo, "show", found.split()[0]) if found else ""
    if "torch.cat(aux_hidden_states, dim=-1)" not in proposer:
        raise SystemExit(f"{ref}: the drafter feeds the aux states in an unknown way")
    mismatch = "strict" if "zip(self._aux_buffers, aux_list, strict=True)" in proposer else "fc"
    return {
        "reads": "eagle_config.eagle_aux_hidden_state_layer_ids",
        "gate": "eagle_config.use_aux_hidden_state",
        "gate_default": False,
        "default": "2,L//2,L-3",
        "capture": "input",
        "id0": "embed",
        "mismatch": mismatch,
        "archs": dict(sorted(archs.items())),
    }


SOURCE = Source(repo="ROCm/ATOM", out=OUT, derive=derive)


def main(argv: list[str] | None = None) -> int:
    return source_scan.main(SOURCE, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
