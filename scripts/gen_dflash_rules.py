"""Derive SGLang's DFlash tap rules from its release wheels; write engines/dflash_rules.json.

    python scripts/gen_dflash_rules.py WHEEL_DIR [--out FILE] [--check]

WHEEL_DIR holds ``sglang-X-*.whl`` and ``vllm-X-*.whl`` (``pip download --no-deps``). Each
wheel is read
with zipfile and ast (sglang is never imported). Per release with
``sglang/srt/speculative/dflash_utils.py`` (none before 0.5.11):

- ``keys``: the draft config.json keys the tap list is read from, in order: the release's
  ``parse_dflash_draft_config`` reads ``dflash_cfg.get("target_layer_ids", _cfg_get(config,
  "target_layer_ids"))``, i.e. ``dflash_config.target_layer_ids``, else a top-level
  ``target_layer_ids``;
- ``fallback``: what the release's own ``build_target_layer_ids(L, n)`` returns when the list
  is absent (n: the draft's ``num_hidden_layers``, L: the target's), found by *running* that
  function on probe sizes and matching the results against the formulas ``FORMULAS`` knows;
- ``bounds``: whether ``resolve_target_layer_ids`` refuses an id outside ``[0, L)``;
- ``archs``: per registered architecture whose class has ``set_dflash_layers_to_capture``,
  what the release's own method does to the ids (run on stub objects, as
  ``gen_sglang_rules.py`` runs ``set_eagle3_layers_to_capture``): ``plus1`` (capture index
  id + 1, the state entering layer id + 1), ``same`` (the ids as they are), or ``unfollowed``
  (the method stores them where the stubs do not follow).

Per vLLM release (the keys each runner reads and what it adds are ``vllm_rules.json``'s,
``gen_vllm_rules.py``), what only a DFlash launch depends on:

- ``v2_runs_dflash``: whether ``VllmConfig._get_v2_model_runner_unsupported_features`` lets
  the V2 runner run speculative method ``dflash`` (an allow-list to 0.29.x, a deny-list from
  0.30.0; where it does not, a DFlash launch starts V1); None where the release has no such
  function (the runner is fixed);
- ``fc``: how ``models/qwen3_dflash.py`` sizes the DFlash fc: ``dflash_config`` (the length
  of ``dflash_config.target_layer_ids`` / ``layer_ids``, else ``num_hidden_layers``), ``read``
  (the length of the ids the runner read, else ``num_hidden_layers``), or None (no DFlash
  model file).

Consecutive releases with equal facts become one row. ``--check`` compares with the existing
file and exits 1 on any difference; an unknown fallback formula or capture rule exits 1 too.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent)]

import sglang_wheel as sw  # noqa: E402
from release_scan import compile_alone, fold, version_key, write_or_check  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "pytest_eagle_contract/engines/dflash_rules.json"
UTILS = "sglang/srt/speculative/dflash_utils.py"
DFLASH_METHOD = "set_dflash_layers_to_capture"
PROBES = [(L, n) for L in (4, 5, 8, 28, 32, 36, 48, 61, 64, 94) for n in (1, 2, 3, 4, 5, 6, 8)]
PROBE_IDS = [0, 5, 9]


def zlab(num_layers: int, n: int) -> list[int]:
    """The z-lab DFlash helper as SGLang mirrors it (this generator's reference)."""
    if n == 1:
        return [num_layers // 2]
    span = num_layers - 3 - 1
    return [round(1 + i * span / (n - 1)) for i in range(n)]


FORMULAS = {"zlab": zlab}


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _fallback(tree: ast.Module) -> str:
    fn = _function(tree, "build_target_layer_ids")
    if fn is None:
        raise SystemExit("build_target_layer_ids not found")
    run = compile_alone(fn, "<sglang>")
    got = {}
    for L, n in PROBES:
        try:
            got[(L, n)] = list(run(L, n))
        except ValueError:
            got[(L, n)] = None
    for name, formula in FORMULAS.items():
        if all(v is None or v == formula(L, n) for (L, n), v in got.items()):
            return name
    raise SystemExit(f"unknown fallback formula: {got}")


def _keys(tree: ast.Module) -> list[str]:
    """``dflash_cfg.get("target_layer_ids", _cfg_get(config, "target_layer_ids"))`` in the
    parser: the nested key first, the top-level one as its default."""
    fn = _function(tree, "parse_dflash_draft_config")
    if fn is None:
        raise SystemExit("parse_dflash_draft_config not found")
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == "target_layer_ids"
        ):
            keys = ["dflash_config.target_layer_ids"]
            default = node.args[1] if len(node.args) > 1 else None
            if (
                isinstance(default, ast.Call)
                and len(default.args) > 1
                and isinstance(default.args[1], ast.Constant)
                and default.args[1].value == "target_layer_ids"
            ):
                keys.append("target_layer_ids")
            return keys
    raise SystemExit("no target_layer_ids read in parse_dflash_draft_config")


def _bounds(tree: ast.Module) -> str:
    fn = _function(tree, "resolve_target_layer_ids")
    text = ast.unparse(fn) if fn else ""
    if re.search(r"val < 0 or val >= target_num_layers", text):
        return "0<=id<L"
    raise SystemExit("resolve_target_layer_ids's bounds not understood")


def _stub(wheel: sw.Wheel, ref: sw.ClassRef | None, num_layers: int, depth: int = 0) -> Any:
    """``sglang_wheel.stub``, its method also bound under the DFlash name: a wrapper's
    ``self.model.set_dflash_layers_to_capture(...)`` reaches its inner model's method."""
    obj = _STUB(wheel, ref, num_layers, depth)
    if hasattr(obj, "set_eagle3_layers_to_capture"):
        obj.set_dflash_layers_to_capture = obj.set_eagle3_layers_to_capture
    return obj


_STUB = sw.stub


def _archs(path: Path) -> dict[str, str]:
    sw.METHOD = DFLASH_METHOD  # the same stub machinery, run on the DFlash method
    sw.stub = _stub
    wheel = sw.Wheel(path)
    out: dict[str, str] = {}
    for arch, ref in sorted(wheel.architectures().items()):
        got, _ = sw.run(wheel, ref, list(PROBE_IDS))
        if got == [i + 1 for i in PROBE_IDS]:
            out[arch] = "plus1"
        elif got == PROBE_IDS:
            out[arch] = "same"
        else:
            out[arch] = "unfollowed"
    return out


def derive(path: Path) -> dict[str, Any] | None:
    with zipfile.ZipFile(path) as z:
        if UTILS not in z.namelist():
            return None
        tree = ast.parse(z.read(UTILS).decode())
    return {
        "keys": _keys(tree),
        "fallback": _fallback(tree),
        "bounds": _bounds(tree),
        "archs": _archs(path),
    }


def _version(path: Path) -> str:
    found = re.match(r"(?:sglang|vllm)-(.+?)-(?:\d+-)?(py3|cp3)", path.name)
    assert found, path.name
    return found.group(1)


def _v2_dflash(text: str) -> bool | None:
    """Whether ``_get_v2_model_runner_unsupported_features`` lets V2 run a DFlash launch: the
    branch appending "speculative method '...'" tests ``speculative_config.method`` against
    an allow-list (``not in``, to 0.29.x) or a deny-list (``in``, from 0.30.0)."""
    tree = ast.parse(text)
    fn = _function(tree, "_get_v2_model_runner_unsupported_features")
    if fn is None:
        return None
    for node in ast.walk(fn):
        if not isinstance(node, ast.If) or "speculative method" not in ast.unparse(node.body[0]):
            continue
        test = node.test
        if (
            isinstance(test, ast.Compare)
            and ast.unparse(test.left) == "speculative_config.method"
            and isinstance(test.comparators[0], ast.Tuple)
        ):
            listed = "dflash" in [ast.literal_eval(e) for e in test.comparators[0].elts]
            if isinstance(test.ops[0], ast.NotIn):
                return listed
            if isinstance(test.ops[0], ast.In):
                return not listed
    raise SystemExit("the V2 runner's speculative method test not understood")


def _fc(text: str | None) -> str | None:
    if text is None:
        return None
    if re.search(r"len\(aux_layers\) if aux_layers else config\.num_hidden_layers", text):
        return "read"
    if re.search(r'len\(drafter_config\["target_layer_ids"\]\)', text):
        return "dflash_config"
    raise SystemExit("the DFlash fc width rule not understood")


def derive_vllm(path: Path) -> dict[str, Any]:
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        config = z.read("vllm/config/vllm.py").decode() if "vllm/config/vllm.py" in names else ""
        model = "vllm/model_executor/models/qwen3_dflash.py"
        dflash = z.read(model).decode() if model in names else None
    return {"v2_runs_dflash": _v2_dflash(config) if config else None, "fc": _fc(dflash)}


def table(folder: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"generator": "scripts/gen_dflash_rules.py"}
    for project, derive_one in (("sglang", derive), ("vllm", derive_vllm)):
        wheels = sorted(folder.glob(f"{project}-*.whl"), key=lambda p: version_key(_version(p)))
        facts = []
        for path in wheels:
            fact = derive_one(path)
            print(project, _version(path), "no DFlash" if fact is None else "read", file=sys.stderr)
            facts.append((_version(path), fact))
        out[project] = {"releases": [v for v, _ in facts], "rows": fold(facts)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("wheels", type=Path)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    return write_or_check(table(args.wheels), args.out, args.check, f"the files in {args.wheels}")


if __name__ == "__main__":
    raise SystemExit(main())
