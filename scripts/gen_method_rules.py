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


def _appends_hc_mean(fn: ast.AST) -> bool:
    """A layer loop that appends ``h.mean(axis=2)`` (the mean over the hyper-connection
    copies of layer i's output) under a ``... in capture_set`` test: DeepSeek-V4's capture."""
    for loop in ast.walk(fn):
        if isinstance(loop, ast.For):
            for stmt in loop.body:
                if (
                    isinstance(stmt, ast.If)
                    and "capture_set" in ast.unparse(stmt.test)
                    and re.fullmatch(
                        r"\w+\.append\(h\.mean\(axis=2\)\)", ast.unparse(stmt.body[0]).strip()
                    )
                ):
                    return True
    return False


DRAFTERS = MLX + "speculative/drafters/"
QWEN3_DFLASH = DRAFTERS + "qwen3_dflash/config.py"


def _default_taps(text: str) -> list[int]:
    """qwen3_dflash's ``DFlashConfig.target_layer_ids`` default (its default_factory lambda)."""
    for node in ast.walk(ast.parse(text)):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "target_layer_ids"
            and isinstance(node.value, ast.Call)
        ):
            for kw in node.value.keywords:
                if kw.arg == "default_factory" and isinstance(kw.value, ast.Lambda):
                    return list(ast.literal_eval(kw.value.body))
    raise SystemExit(f"{QWEN3_DFLASH}: no target_layer_ids default read")


def _dflash_drafters(z: zipfile.ZipFile, names: set[str], path: Path) -> dict[str, Any]:
    """Per ``<model_type>_dflash`` drafter folder: the keys its config reads its taps from,
    what it does without them, the checks it makes (read from the config code, each pattern
    asserted; a drafter whose code is of another shape stops the generator)."""
    qwen = z.read(QWEN3_DFLASH).decode()
    if not (
        re.search(r'if "target_layer_ids" in dflash_cfg:\s+flat\["target_layer_ids"\]', qwen)
        and 'dflash_cfg = flat.pop("dflash_config", None) or {}' in qwen
    ):
        raise SystemExit(f"{path.name}: {QWEN3_DFLASH}: the tap keys are not read as expected")
    out: dict[str, Any] = {
        "qwen3": {
            "file": QWEN3_DFLASH,
            "keys": ["dflash_config.target_layer_ids", "target_layer_ids"],
            "default": _default_taps(qwen),
        }
    }
    folders = sorted(
        {n[len(DRAFTERS) :].split("/")[0] for n in names if n.startswith(DRAFTERS)}
        - {"qwen3_dflash"}
    )
    for folder in folders:
        if not folder.endswith("_dflash"):
            continue
        model_type = folder[: -len("_dflash")]
        init = z.read(f"{DRAFTERS}{folder}/__init__.py").decode()
        config = f"{DRAFTERS}{folder}/config.py"
        if (
            "from ..qwen3_dflash.config import DFlashConfig" in init
            and re.search(r"class \w+\(DFlashConfig\):", init)
            and "return super().from_dict(flat)" in init
            and "target_layer_ids" not in init
        ):  # a subclass of qwen3_dflash's config that leaves the taps alone
            out[model_type] = {**out["qwen3"], "file": f"{DRAFTERS}{folder}/__init__.py"}
            out[model_type]["as"] = "qwen3"
            continue
        text = z.read(config).decode() if config in names else ""
        laguna = (
            'raise ValueError("Laguna DFlash config requires a dflash_config object.")' in text
            and re.search(r'_REQUIRED_DFLASH_FIELDS = \{[^}]*"target_layer_ids"', text)
            and "len(self.target_layer_ids) != self.num_hidden_layers" in text
            and "not _is_strictly_increasing_ints(self.target_layer_ids)" in text
            and "layer_id < 0 or layer_id >= self.num_target_layers" in text
            and "target_model_layer_count != config.num_target_layers" in text
        )
        if not laguna:
            out[model_type] = {"file": config, "keys": None}  # read, not of a known shape
            continue
        out[model_type] = {
            "file": config,
            "keys": ["dflash_config.target_layer_ids"],
            "default": None,
            "increasing": True,
            "count": "num_hidden_layers",
            "target_layers": "num_target_layers",
        }
    return out


def _dspark_drafters(z: zipfile.ZipFile, names: set[str], path: Path) -> dict[str, Any]:
    """The DSpark drafters beside the generic one: Gemma-4's (routed by architectures
    ``Gemma4DSparkModel``) and DeepSeek-V4's (split from a DeepSeek-V4 target checkpoint)."""
    out: dict[str, Any] = {}
    gemma = DRAFTERS + "gemma4_dspark/config.py"
    if gemma in names:
        text = z.read(gemma).decode()
        if not (
            'nested = flat.pop("dflash_config", None)' in text
            and "source: Mapping[str, Any] = nested if isinstance(nested, Mapping) else flat"
            in text
            and "not _is_strictly_increasing_ints(self.target_layer_ids)" in text
            and "layer_id < 0 or layer_id >= self.num_target_layers" in text
        ):
            raise SystemExit(f"{path.name}: {gemma}: the tap keys are not read as expected")
        out["gemma4"] = {
            "file": gemma,
            "keys": ["dflash_config.target_layer_ids", "target_layer_ids"],
            "increasing": True,
            "routed_by": "architectures Gemma4DSparkModel",
        }
    dsv4 = DRAFTERS + "deepseek_v4_dspark/config.py"
    if dsv4 in names:
        text = z.read(dsv4).decode()
        if not re.search(
            r'self\.target_layer_ids = list\(\s*getattr\(text, "dspark_target_layer_ids"', text
        ):
            raise SystemExit(f"{path.name}: {dsv4}: the tap keys are not read as expected")
        out["deepseek_v4"] = {
            "file": dsv4,
            "keys": ["target_layer_ids", "text_config.dspark_target_layer_ids"],
            "routed_by": "a DeepSeek-V4 checkpoint naming dspark_target_layer_ids (split)",
        }
    return out


def derive_mlx(path: Path) -> dict[str, Any] | None:
    """mlx-vlm: the DFlash / DFlash2 / DSpark drafters' tap keys, how ``utils`` routes a
    draft to them, and each target model folder's capture (``after``: layer i's output;
    ``hc_mean``: the mean over the hyper-connection copies of layer i's output; ``unread``:
    captured otherwise)."""
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        d2 = MLX + "speculative/drafters/dflash2/config.py"
        ds = MLX + "speculative/drafters/dspark/config.py"
        if QWEN3_DFLASH not in names:
            return None
        utils = z.read(MLX + "utils.py").decode()
        facts: dict[str, Any] = {}
        if '"DFlash2DraftModel" in architectures' in utils:
            facts["routing"] = "architectures"  # DFlash2 / Gemma4DSpark / DSpark tested first
        elif re.search(
            r'is_dflash = config\.get\("dflash_config", None\) is not None\s+if is_dflash:'
            r'\s+model_type \+= "_dflash"',
            utils,
        ):
            facts["routing"] = "dflash_config"  # any dflash_config: <model_type>_dflash
        else:
            raise SystemExit(f"{path.name}: utils does not route a DFlash draft as read")
        # the architectures utils tests before the dflash_config route, in its order
        facts["routes"] = [
            a
            for a in ("DFlash2DraftModel", "Gemma4DSparkModel")
            if f'"{a}" in architectures' in utils
        ]
        facts["dflash"] = _dflash_drafters(z, names, path)
        facts["dspark_drafters"] = _dspark_drafters(z, names, path)
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
                tree = ast.parse(text)
                models[parts[2]] = (
                    "after"
                    if _appends_layer_output(tree)
                    else "hc_mean"
                    if _appends_hc_mean(tree)
                    else "unread"
                )
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
