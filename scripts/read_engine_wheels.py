"""What the onnxruntime-genai, lmdeploy and optimum-intel wheels hold for the hidden-state
drafting methods, re-read from the wheels (zipfile and ast; nothing is imported or run).

docs/layers.md ("Methods per engine and release") states these findings; ``--rules`` turns
the onnxruntime-genai and lmdeploy ones into engines/method_engines_rules.json, the rules
``resolve --method`` answers by for those two engines.
``tests/release/test_engine_wheel_reads.py`` runs this on the folder
EAGLE_CONTRACT_ENGINE_WHEELS names (``pip download --no-deps`` of onnxruntime-genai 0.14.1
0.15.2 0.16.0 0.17.1 0.18.0, lmdeploy 0.16.0 0.17.0 0.18.0, optimum-intel 2.0.0 2.1.0 2.2.0)
and holds the result to what the docs say.

    python scripts/read_engine_wheels.py DIR    # prints the findings as JSON
    python scripts/read_engine_wheels.py --rules DIR    # method_engines_rules.json
    python scripts/read_engine_wheels.py --eagle3-rules DIR    # lmdeploy_rules.json (EAGLE-3)
"""

from __future__ import annotations

import ast
import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

PROJECTS = {
    "onnxruntime_genai": "onnxruntime-genai",
    "lmdeploy": "lmdeploy",
    "optimum_intel": "optimum-intel",
}


def _text(z: zipfile.ZipFile, name: str) -> str | None:
    try:
        return z.read(name).decode("utf-8")
    except KeyError:
        return None


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _added_to_ids(fn: ast.FunctionDef, source: str) -> int | None:
    """The constant k of a ``[x + k for x in <source>]`` in ``fn``, or None."""
    for node in ast.walk(fn):
        if not (isinstance(node, ast.ListComp) and len(node.generators) == 1):
            continue
        gen = node.generators[0]
        elt = node.elt
        if (
            isinstance(gen.iter, ast.Name)
            and gen.iter.id == source
            and isinstance(gen.target, ast.Name)
            and isinstance(elt, ast.BinOp)
            and isinstance(elt.op, ast.Add)
            and isinstance(elt.left, ast.Name)
            and elt.left.id == gen.target.id
            and isinstance(elt.right, ast.Constant)
            and isinstance(elt.right.value, int)
        ):
            return elt.right.value
    return None


def onnxruntime_genai(z: zipfile.ZipFile) -> dict[str, Any]:
    base = "onnxruntime_genai/models/builders/"
    names = set(z.namelist())
    out: dict[str, Any] = {
        "dflash": False,  # no plain DFlash builder in any release read
        "dflash2": base + "dflash2.py" in names,
        "dspark": base + "dspark.py" in names,
        "eagle3": any(n.startswith(base) and "eagle" in n.lower() for n in names),
    }
    qwen = _text(z, base + "qwen.py") or ""
    builder = _text(z, "onnxruntime_genai/models/builder.py") or ""
    b = _text(z, base + "base.py") or ""
    out["mtp"] = "mtp_num_hidden_layers" in qwen
    # aux_hidden_state_layers entry i: the residual entering layer i (SkipLayerNorm output 3)
    out["aux_entry_is_input_of_layer"] = (
        bool(re.search(r"location == \"input\" and layer_id in self\.aux_hidden_state_layers", b))
        and "self.aux_hidden_state_taps[layer_id] = (output_3" in b
    )
    out["aux_range"] = "1 <= i < self.num_layers" in b
    fn = _function(ast.parse(qwen), "require_specforge_aux_taps") if qwen else None
    out["aux_is_target_layer_ids_plus"] = _added_to_ids(fn, "target_layer_ids") if fn else None
    out["targets"] = sorted(
        set(
            re.findall(
                r'config\.architectures\[0\] == "(\w+)":\n\s+onnx_model = Qwen35(?:MoE)?Model',
                builder,
            )
        )
    )
    # the MTP head's hidden_states: the last layer norm's output 0
    out["mtp_state_final_norm"] = (
        'decoder_options["include_hidden_states"] = True' in qwen
        and 'output_0 = self.output_names["hidden_states"]' in b
    )
    return out


def lmdeploy(z: zipfile.ZipFile) -> dict[str, Any]:
    py = "lmdeploy/pytorch/"
    names = set(z.namelist())
    out: dict[str, Any] = {"dflash": py + "models/qwen3_dflash.py" in names}
    for method in ("dflash2", "dspark"):
        out[method] = any(method in n.lower() for n in names if n.startswith("lmdeploy/"))
    llama_cfg = _text(z, py + "configurations/llama.py") or ""
    llama = _text(z, py + "models/llama.py") or ""
    # EAGLE-3: the target's taps are fixed; captured before layer k runs (the input of layer k)
    out["eagle3_fixed_ids"] = (
        "hf_config.aux_hidden_state_layers = (2, num_layers // 2, num_layers - 3)" in llama_cfg
    )
    out["eagle3_captures_layer_input"] = bool(
        re.search(
            r"if idx in self\.aux_hidden_state_layers:\n\s+aux_hidden_states\.append\("
            r"hidden_states \+ residual\)\n\s+hidden_states, residual = decoder_layer\(",
            llama,
        )
    )
    out["eagle3_reads_draft_ids"] = any(
        "eagle_aux_hidden_state_layer_ids" in (_text(z, n) or "")
        for n in names
        if n.startswith(py + "configurations/") or n in (py + "models/llama.py",)
    )
    out.update(_lmdeploy_eagle3(z, names, llama_cfg))
    utils = _text(z, py + "spec_decode/dflash_utils.py")
    if utils is None:
        return out
    out["keys"] = re.findall(r"dflash_config\.get\('(\w+)'\)", utils)
    out["top_level_target_layer_ids"] = bool(
        re.search(
            r"getattr\(draft_hf_config, 'target_layer_ids'|draft_hf_config\.target_layer_ids", utils
        )
    )
    fn = _function(ast.parse(utils), "build_target_layer_ids")
    seg = (ast.get_source_segment(utils, fn) or "") if fn is not None else ""
    out["fallback"] = bool(
        re.search(r"return \(num_target_layers // 2,\)", seg)
        and re.search(r"start = 1\n\s+end = num_target_layers - 3", seg)
        and "int(round(start + i * span / (num_draft_layers - 1)))" in seg
    )
    captures = {}
    for model in ("qwen3", "qwen3_5", "llama"):
        src = _text(z, py + f"models/{model}.py") or ""
        captures[model] = (
            "_aux_hidden_state_layers_set" in src
            and "aux_hidden_states.append(hidden_states if residual is None else "
            "hidden_states + residual)"
            in src
        )
    out["captures_layer_output"] = captures
    out["increasing"] = "must be strictly increasing and duplicate-free" in utils
    out["nonempty"] = "target_layer_ids must not be empty" in utils
    out["depth_check"] = "if num_target_layers != target_num_layers:" in utils
    out["range_check"] = "if layer_id < 0 or layer_id >= num_target_layers:" in utils
    # the targets: MODULE_MAP entries whose model file captures a layer's output for id i
    module_map = _text(z, py + "models/module_map.py") or ""
    # (a model file whose text model subclasses a capturing one's inherits its forward)
    models = {
        n[len(py + "models/") : -3]: _text(z, n) or ""
        for n in names
        if n.startswith(py + "models/") and n.endswith(".py")
    }
    setting = {m for m, src in models.items() if "_aux_hidden_state_layers_set" in src}
    capturing = {
        m
        for m in setting
        if "aux_hidden_states.append(hidden_states if residual is None else "
        "hidden_states + residual)" in models[m]
    }
    capturing |= {m for m in setting if any(f"from .{c} import" in models[m] for c in capturing)}
    out["targets"] = sorted(
        arch
        for arch, module in re.findall(
            r"'(\w+)':\s*f'\{LMDEPLOY_PYTORCH_MODEL_PATH\}\.(\w+)\.\w+'", module_map
        )
        if module in capturing
    )
    return out


def _lmdeploy_eagle3(z: zipfile.ZipFile, names: set[str], llama_cfg: str) -> dict[str, Any]:
    """lmdeploy's EAGLE-3 target paths: which configuration builders set the fixed
    ``aux_hidden_state_layers`` (for which architecture or model_type), how each model
    captures them, and what the drafters take of the draft's own ids."""
    py = "lmdeploy/pytorch/"
    out: dict[str, Any] = {}
    cond = re.search(r"return hf_config\.architectures\[0\] in \[([^\]]*)\]", llama_cfg)
    out["eagle3_llama_archs"] = re.findall(r"'(\w+)'", cond.group(1)) if cond else []
    eagle = _text(z, py + "models/llama_eagle3.py") or ""
    fc = re.search(r"self\.fc = build_\w+\(\s*target_hidden_size \* (\d+),", eagle)
    out["eagle3_llama_draft_fc"] = int(fc.group(1)) if fc else None
    kimi_cfg = _text(z, py + "configurations/kimi_k2.py") or ""
    out["eagle3_kimi_k2"] = bool(
        "return getattr(hf_config, 'model_type', None) == 'kimi_k2'" in kimi_cfg
        and re.search(
            r"hf_config\.aux_hidden_state_layers = \(2, cfg\.num_layers // 2,\s*"
            r"cfg\.num_layers - 3\)",
            kimi_cfg,
        )
    )
    low = re.search(
        r"if cfg\.num_layers < (\d+):\s*raise ValueError\(\s*'Kimi-K2 EAGLE3 target", kimi_cfg
    )
    out["eagle3_kimi_min_layers"] = int(low.group(1)) if low else None
    k25 = _text(z, py + "configurations/kimi_k25.py") or ""
    out["eagle3_kimi_k25_as_k2"] = (
        "return getattr(hf_config, 'model_type', None) == 'kimi_k25'" in k25
        and "KimiK2ModelConfigBuilder.build(text_config" in k25
    )
    lang = _text(z, py + "models/kimi_k2_language.py") or ""
    # the residual after the input norm's fused add: the state entering layer idx
    out["eagle3_kimi_captures_layer_input"] = bool(
        "capture_input_residual = idx in aux_hidden_state_layers" in lang
        and re.search(
            r"hidden_states, residual = self\.input_layernorm\(hidden_states, residual\)\n"
            r"\s+input_residual = \(residual\.clone\(\)",
            lang,
        )
        and re.search(
            r"aux_hidden_states_by_layer\[idx\]\s+for idx in aux_hidden_state_layers", lang
        )
    )
    k25_draft = _text(z, py + "models/kimi_k25_eagle3.py") or ""
    out["eagle3_kimi_draft_ids_counted_only"] = bool(
        "must contain exactly three unique" in k25_draft
        and re.search(r"if layer_ids is None:\s+return \(2, 30, 58\)", k25_draft)
        # set once, then only its length read (the fc's width)
        and k25_draft.count("self.aux_layer_ids") == 2
        and "len(self.aux_layer_ids)" in k25_draft
    )
    return out


def optimum_intel(z: zipfile.ZipFile) -> dict[str, Any]:
    ex = "optimum/exporters/openvino/"
    convert = _text(z, ex + "convert.py") or ""
    patcher = _text(z, ex + "model_patcher.py") or ""
    return {
        "dflash_export": "def _add_dflash_mode_to_rt_info" in convert,
        "rt_info_ids_as_is": 'model.set_rt_info(",".join(map(str, '
        'dflash_config["target_layer_ids"])), ["dflash", "target_layer_ids"])' in convert,
        "mtp_export": "_qwen3_5_mtp_module_forward" in patcher,
        "dflash2": "dflash2" in (convert + patcher).lower(),
        "dspark": "dspark" in (convert + patcher).lower(),
    }


READERS = {
    "onnxruntime_genai": onnxruntime_genai,
    "lmdeploy": lmdeploy,
    "optimum_intel": optimum_intel,
}


def read(folder: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """{project: {release: findings}} for every wheel of the three projects in ``folder``."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for wheel in sorted(folder.glob("*.whl")):
        dist, release = wheel.name.split("-")[:2]
        if dist not in READERS:
            continue
        with zipfile.ZipFile(wheel) as z:
            out.setdefault(PROJECTS[dist], {})[release] = READERS[dist](z)
    return out


def _order(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", release))


def rules(found: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """method_engines_rules.json: per engine, every release read, with the methods it serves
    and the facts each rule needs (null: a release read that serves none of them)."""
    out: dict[str, Any] = {"generator": "scripts/read_engine_wheels.py --rules"}
    ortg: dict[str, Any] = {}
    ortg_found = found.get("onnxruntime-genai", {})
    for release, f in sorted(ortg_found.items(), key=lambda x: _order(x[0])):
        methods = [m for m in ("dflash2", "dspark", "mtp") if f[m]]
        ok = f["aux_entry_is_input_of_layer"] and f["aux_range"]
        ortg[release] = (
            {
                "methods": methods,
                "file": "onnxruntime_genai/models/builders/qwen.py",
                "key": "dflash_config.target_layer_ids",
                "plus": f["aux_is_target_layer_ids_plus"],
                "last_layer_refused": f["aux_range"],
                "targets": f["targets"],
                "mtp": "final_norm" if f["mtp_state_final_norm"] else None,
            }
            if methods and ok
            else None
        )
    lmd: dict[str, Any] = {}
    for release, f in sorted(found.get("lmdeploy", {}).items(), key=lambda x: _order(x[0])):
        lmd[release] = (
            {
                "methods": ["dflash"],
                "file": "lmdeploy/pytorch/spec_decode/dflash_utils.py",
                "keys": ["dflash_config." + k for k in f["keys"] if k == "target_layer_ids"],
                "plus": 1,
                "fallback": "zlab" if f["fallback"] else None,
                "increasing": f["increasing"],
                "nonempty": f["nonempty"],
                "depth_check": f["depth_check"],
                "range_check": f["range_check"],
                "targets": f["targets"],
            }
            if f["dflash"] and not f["top_level_target_layer_ids"]
            else None
        )
    out["onnxruntime-genai"] = {"package": "onnxruntime-genai", "releases": ortg}
    out["lmdeploy"] = {"package": "lmdeploy", "releases": lmd}
    return out


def eagle3_rules(found: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """lmdeploy_rules.json: lmdeploy's EAGLE-3 target paths per release read (null: a release
    whose taps are not fixed as read here, or that reads the draft's ids)."""
    out: dict[str, Any] = {"generator": "scripts/read_engine_wheels.py --eagle3-rules"}
    rows: dict[str, Any] = {}
    for release, f in sorted(found.get("lmdeploy", {}).items(), key=lambda x: _order(x[0])):
        targets: list[dict[str, Any]] = []
        if f["eagle3_fixed_ids"] and f["eagle3_captures_layer_input"]:
            targets.append(
                {
                    "names": f["eagle3_llama_archs"],
                    "by": "architectures[0]",
                    "config": "lmdeploy/pytorch/configurations/llama.py",
                    "model": "lmdeploy/pytorch/models/llama.py",
                    "min_layers": None,
                    "order": "layer",
                    "draft_fc": f["eagle3_llama_draft_fc"],
                }
            )
        if f["eagle3_kimi_k2"] and f["eagle3_kimi_captures_layer_input"]:
            names = ["kimi_k2"] + (["kimi_k25"] if f["eagle3_kimi_k25_as_k2"] else [])
            targets.append(
                {
                    "names": names,
                    "by": "model_type",
                    "config": "lmdeploy/pytorch/configurations/kimi_k2.py",
                    "model": "lmdeploy/pytorch/models/kimi_k2_language.py",
                    "min_layers": f["eagle3_kimi_min_layers"],
                    "order": "listed",
                    "draft_fc": 3 if f["eagle3_kimi_draft_ids_counted_only"] else None,
                }
            )
        reads = f["eagle3_reads_draft_ids"]
        rows[release] = (
            {"taps": [2, "L//2", "L-3"], "capture": "residual:i", "targets": targets}
            if targets and not reads
            else None
        )
    out["lmdeploy"] = {"package": "lmdeploy", "releases": rows}
    return out


if __name__ == "__main__":
    if sys.argv[1] == "--rules":
        print(json.dumps(rules(read(Path(sys.argv[2]))), indent=1, sort_keys=True))
    elif sys.argv[1] == "--eagle3-rules":
        print(json.dumps(eagle3_rules(read(Path(sys.argv[2]))), indent=1, sort_keys=True))
    else:
        print(json.dumps(read(Path(sys.argv[1])), indent=1, sort_keys=True))
