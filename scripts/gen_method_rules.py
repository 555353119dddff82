"""Derive the DFlash2 and DSpark tap rules from release wheels; write engines/method_rules.json.

    python scripts/gen_method_rules.py WHEEL_DIR [--out FILE] [--check]

WHEEL_DIR holds ``sglang-X-*.whl``, ``vllm-X-*.whl``, ``mlx_vlm-X-*.whl`` and
``llama_cpp_python-X.tar.gz`` (``pip download --no-deps``; the sdist vendors llama.cpp).
Nothing is imported: files are read with zipfile / tarfile and ast, and single functions are
run on probe configs (``release_scan.compile_alone``). What DFlash itself does per release is
``gen_dflash_rules.py``'s (``dflash_rules.json``); this table holds only what the two
DFlash-family methods add on top. Per SGLang release:

- ``dflash2``: the registered draft architectures (``EntryClass`` of ``models/dflash.py``) whose
  class derives from ``DFlash2DraftModel``, each a subclass of ``DFlashDraftModel`` (so the
  DFLASH worker and its tap rules serve them); ``[]`` where the release has none;
- ``dflash2_muse_plus1``: whether the runner adds 1 to a DFlash2 draft's ids on a Muse target
  (``_MUSE_LAYER_OUTPUT_DRAFT_ARCHITECTURES``);
- ``dspark``: None before ``parse_dspark_draft_config`` exists; else ``keys`` (its top-level
  ``dspark_target_layer_ids`` read first, then the DFlash parser's keys, as its code reads
  them), ``markov`` (whether the runner refuses a draft whose ``markov_rank`` is 0: it tests
  ``require_markov()``), and ``hooks``: the target architectures whose class has its own
  ``set_dspark_layers_to_capture`` (the runner calls it instead of the DFlash hook; those are
  not followed here).

Per vLLM release: ``dflash2`` (the model registry maps ``DFlash2DraftModel``), ``dspark`` (a
DSpark model registered and the V2 runner's ``get_eagle3_aux_layers_from_config`` reads
``dspark_target_layer_ids``: what that function, run on probe configs, adds to the DSpark ids
per ``model_type``, and to a top-level ``target_layer_ids``).

Per llama-cpp-python sdist: the HF draft architectures its vendored converter registers for
DFlash2 and DSpark, and what each writes into the GGUF's ``dflash.target_layers`` (read from
the converter's own arithmetic on probe configs where it is a plain function, else from its
text: ``plus1``, the ids + 1).

Per mlx-vlm wheel: the DFlash2 and generic DSpark drafters' tap keys (``drafters/*/config.py``:
both require a ``dflash_config`` object and copy its ``target_layer_ids``), how ``utils.py``
routes a draft to them, and per target model folder whether ``language.py``'s layer loop
appends layer i's output for capture id i (``after``) or something else (``unread``).

``--check`` compares with the existing file and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tarfile
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent)]

import sglang_wheel as sw  # noqa: E402
from release_scan import compile_alone, fold, version_key, write_or_check  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "pytest_eagle_contract/engines/method_rules.json"
DFLASH_MODELS = "sglang/srt/models/dflash.py"
DSPARK_HOOK = "set_dspark_layers_to_capture"
PROBE = [0, 5, 9]


def _classes(tree: ast.Module) -> dict[str, list[str]]:
    return {
        n.name: [b.id for b in n.bases if isinstance(b, ast.Name)]
        for n in tree.body
        if isinstance(n, ast.ClassDef)
    }


def _derives(classes: dict[str, list[str]], name: str, base: str) -> bool:
    seen: set[str] = set()
    todo = [name]
    while todo:
        cur = todo.pop()
        if cur == base:
            return True
        if cur in seen:
            continue
        seen.add(cur)
        todo += classes.get(cur, [])
    return False


def _entries(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets
        ):
            values = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else []
            return [v.id for v in values if isinstance(v, ast.Name)]
    return []


def _find(z: zipfile.ZipFile, pattern: str) -> list[tuple[str, str]]:
    """(name, text) of every .py file of the wheel whose text holds ``pattern``."""
    out = []
    for name in z.namelist():
        if name.endswith(".py") and name.startswith(("sglang/srt/", "vllm/")):
            text = z.read(name).decode(errors="replace")
            if pattern in text:
                out.append((name, text))
    return out


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _sglang_dspark(z: zipfile.ZipFile, path: Path) -> dict[str, Any] | None:
    found = _find(z, "def parse_dspark_draft_config")
    if not found:
        return None
    name, text = found[0]
    fn = _function(ast.parse(text), "parse_dspark_draft_config")
    assert fn is not None
    body = ast.unparse(fn)
    if not re.search(r"_cfg_get\(draft_hf_config, 'dspark_target_layer_ids'", body):
        raise SystemExit(f"{path.name}: {name}: dspark_target_layer_ids not read as expected")
    if "base.target_layer_ids" not in body:
        raise SystemExit(f"{path.name}: {name}: no fall back to the DFlash parser's ids")
    runner = "".join(t for _, t in _find(z, "parse_dspark_draft_config(") if "is_dspark" in t)
    sw.METHOD = DSPARK_HOOK
    hooks = sorted(sw.Wheel(path).architectures())
    return {
        "file": name,
        "keys": ["dspark_target_layer_ids", "dflash_config.target_layer_ids", "target_layer_ids"],
        "markov": "require_markov()" in runner,
        "hooks": hooks,
    }


def derive_sglang(path: Path) -> dict[str, Any] | None:
    with zipfile.ZipFile(path) as z:
        if DFLASH_MODELS not in z.namelist():
            return None
        tree = ast.parse(z.read(DFLASH_MODELS).decode())
        classes = _classes(tree)
        dflash2 = sorted(
            e
            for e in _entries(tree)
            if _derives(classes, e, "DFlash2DraftModel")
            and _derives(classes, e, "DFlashDraftModel")
        )
        muse = False
        for _, text in _find(z, "_MUSE_LAYER_OUTPUT_DRAFT_ARCHITECTURES ="):
            for node in ast.walk(ast.parse(text)):
                if (
                    isinstance(node, ast.Assign)
                    and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id == "_MUSE_LAYER_OUTPUT_DRAFT_ARCHITECTURES"
                ):
                    muse = "'DFlash2DraftModel'" in ast.unparse(node.value)
        dspark = _sglang_dspark(z, path)
    return {"dflash2": dflash2, "dflash2_muse_plus1": muse, "dspark": dspark}


VLLM_READER = "get_eagle3_aux_layers_from_config"
MODEL_TYPES = ["qwen3", "deepseek_v4", "deepseek_v41"]


def _run_reader(fn: ast.FunctionDef, **hf: Any) -> list[int] | None:
    run = compile_alone(fn, "<vllm>")
    spec = SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=SimpleNamespace(**hf)))
    got = run(spec)
    return None if got is None else list(got)


def _shift(got: list[int] | None) -> int | None:
    if got is None:
        return None
    diffs = {g - p for g, p in zip(got, PROBE, strict=True)}
    if len(diffs) != 1:
        raise SystemExit(f"vLLM reader: not a constant shift: {got}")
    return diffs.pop()


def derive_vllm(path: Path) -> dict[str, Any]:
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        registry = z.read("vllm/model_executor/models/registry.py").decode()
        reader = None
        for name, text in _find(z, f"def {VLLM_READER}"):
            if "/gpu/" in name:  # the V2 runner's reader
                reader = (name, _function(ast.parse(text), VLLM_READER))
    dflash2 = '"DFlash2DraftModel"' in registry
    dspark_archs = sorted(set(re.findall(r'"(\w*DSpark\w*)":', registry)))
    out: dict[str, Any] = {
        "dflash2": dflash2,
        "dflash2_speculator": any("spec_decode/dflash2/" in n for n in names),
        "dspark_archs": dspark_archs,
        "dspark": None,
    }
    if reader is None or reader[1] is None:
        return out
    fn = reader[1]
    if "dspark_target_layer_ids" not in ast.unparse(fn):
        return out
    out["dspark"] = {
        "file": reader[0],
        "dspark_target_layer_ids": {
            t: _shift(_run_reader(fn, model_type=t, dspark_target_layer_ids=list(PROBE)))
            for t in MODEL_TYPES
        },
        "target_layer_ids": _shift(_run_reader(fn, model_type="qwen3", target_layer_ids=PROBE)),
    }
    return out


LLAMA = "vendor/llama.cpp/conversion/"


def _registered(text: str) -> dict[str, str]:
    """HF architecture -> converter class, from ``@ModelBase.register(...)`` decorators."""
    out = {}
    tree = ast.parse(text)
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        for dec in node.decorator_list:
            if (
                isinstance(dec, ast.Call)
                and ast.unparse(dec.func).endswith("register")
                and all(isinstance(a, ast.Constant) for a in dec.args)
            ):
                for a in dec.args:
                    out[a.value] = node.name
            elif isinstance(dec, ast.Call) and ast.unparse(dec.func).endswith("register"):
                for a in dec.args:  # register(*NAMES): a module-level tuple
                    if isinstance(a, ast.Starred) and isinstance(a.value, ast.Name):
                        for other in tree.body:
                            if (
                                isinstance(other, ast.Assign)
                                and isinstance(other.targets[0], ast.Name)
                                and other.targets[0].id == a.value.id
                            ):
                                for v in ast.literal_eval(other.value):
                                    out[v] = node.name
    return out


def derive_llamacpp(path: Path) -> dict[str, Any]:
    with tarfile.open(path) as tar:
        texts = {}
        for member in tar.getmembers():
            rel = member.name.split("/", 1)[-1]
            if rel.startswith(LLAMA) and rel.endswith(".py"):
                f = tar.extractfile(member)
                if f is not None:
                    texts[rel[len(LLAMA) :]] = f.read().decode(errors="replace")
    classes: dict[str, list[str]] = {}
    archs: dict[str, str] = {}
    for text in texts.values():
        classes.update(_classes(ast.parse(text)))
        archs.update(_registered(text))
    qwen = texts.get("qwen.py", "")
    if not re.search(r"extract_layer_ids = \[i \+ 1 for i in target_layer_ids\]", qwen):
        raise SystemExit("llama.cpp DFlashModel: target_layer_ids + 1 not found")
    aux = bool(re.search(r'"target_layer_ids": \[i - 1 for i in self\.hparams\["aux', qwen))
    deepseek = texts.get("deepseek.py", "")
    dsv4 = bool(
        re.search(r'add_target_layers\(\[layer \+ 1 for layer in self\.hparams\["dspark_', deepseek)
    )
    dflash2 = sorted(
        a for a, c in archs.items() if "DFlash2" in a and _derives(classes, c, "DFlashModel")
    )
    dspark: dict[str, str] = {}
    for arch, cls in sorted(archs.items()):
        if "DSpark" not in arch:
            continue
        if _derives(classes, cls, "DFlashModel"):
            dspark[arch] = "dflash+1" + ("|aux" if cls == "DSparkModel" and aux else "")
        elif cls == "DeepseekV4DSparkModel" and dsv4:
            dspark[arch] = "dspark+1"
        else:
            dspark[arch] = "unread"
    return {"dflash2": dflash2, "dspark": dspark}


MLX = "mlx_vlm/"


def _appends_layer_output(fn: ast.AST) -> bool:
    """A loop over the layers whose body assigns ``X = layer(...)`` (or ``X, ... =``) and
    later, in the same body, appends X to the sink under an ``... in capture_set`` test: the
    state captured for id i is layer i's output."""
    for loop in ast.walk(fn):
        if not isinstance(loop, ast.For):
            continue
        out: str | None = None
        for stmt in loop.body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
                target = stmt.targets[0]
                name = target.elts[0] if isinstance(target, ast.Tuple) else target
                callee = ast.unparse(stmt.value.func)
                if isinstance(name, ast.Name) and callee.split(".")[-1] in ("layer", "block"):
                    out = name.id
            elif (
                out
                and isinstance(stmt, ast.If)
                and "capture_set" in ast.unparse(stmt.test)
                and re.fullmatch(rf"\w+\.append\({out}\)", ast.unparse(stmt.body[0]).strip())
            ):
                return True
    return False


def derive_mlx(path: Path) -> dict[str, Any] | None:
    """mlx-vlm: the DFlash2 / DSpark drafters' tap keys and each target model folder's
    capture (``after``: layer i's output; ``unread``: captured otherwise)."""
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        d2 = MLX + "speculative/drafters/dflash2/config.py"
        ds = MLX + "speculative/drafters/dspark/config.py"
        if d2 not in names and ds not in names:
            return None
        utils = z.read(MLX + "utils.py").decode()
        facts: dict[str, Any] = {}
        for method, name, title in (("dflash2", d2, "DFlash2"), ("dspark", ds, "DSpark")):
            if name not in names:
                facts[method] = None
                continue
            text = z.read(name).decode()
            required = f'raise TypeError("{title} requires a dflash_config object.")' in text
            if not required or '"target_layer_ids",' not in text:
                raise SystemExit(f"{path.name}: {name}: the tap keys are not read as expected")
            facts[method] = {
                "file": name,
                "keys": ["dflash_config.target_layer_ids", "target_layer_ids"],
                "increasing": "target_layer_ids must be unique, increasing indices" in text,
            }
        if facts.get("dflash2") and '"DFlash2DraftModel" in architectures' not in utils:
            raise SystemExit(f"{path.name}: utils.get_model_type does not route DFlash2")
        if facts.get("dspark"):
            routed = re.search(r'projector_type"\) == "dspark"', utils) and "markov_rank" in utils
            if not routed:
                raise SystemExit(f"{path.name}: utils.get_model_type does not route DSpark")
            facts["dspark"]["routed_by"] = (
                "dflash_config with projector_type dspark or markov_rank > 0"
            )
        models: dict[str, str] = {}
        for name in sorted(names):
            parts = name.split("/")
            if len(parts) == 4 and parts[1] == "models" and parts[3] == "language.py":
                text = z.read(name).decode(errors="replace")
                if "capture_set" not in text:
                    continue
                models[parts[2]] = "after" if _appends_layer_output(ast.parse(text)) else "unread"
        facts["models"] = models
    return facts


def _version(path: Path) -> str:
    found = re.match(
        r"(?:sglang|vllm|llama_cpp_python|mlx_vlm)-(.+?)(?:-(?:\d+-)?(?:py3|cp3)|\.tar)", path.name
    )
    assert found, path.name
    return found.group(1)


def table(folder: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"generator": "scripts/gen_method_rules.py"}
    for project, pattern, derive_one in (
        ("sglang", "sglang-*.whl", derive_sglang),
        ("vllm", "vllm-*.whl", derive_vllm),
        ("llama.cpp", "llama_cpp_python-*.tar.gz", derive_llamacpp),
        ("mlx", "mlx_vlm-*.whl", derive_mlx),
    ):
        files = sorted(folder.glob(pattern), key=lambda p: version_key(_version(p)))
        facts = []
        for path in files:
            fact = derive_one(path)
            print(project, _version(path), "read", file=sys.stderr)
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
