"""Derive the DFlash / DSpark / MTP rules of engines read from source; write
engines/source_method_rules.json.

    python scripts/gen_source_method_rules.py --sglang-jax REPO --atom REPO --ollama REPO
        --mistralrs REPO --openvino REPO [--optimum-intel WHEEL] [--out FILE] [--check]

Each REPO is a git clone (sgl-project/sglang-jax, ROCm/ATOM, ollama/ollama,
EricLBuehler/mistral.rs, openvinotoolkit/openvino.genai); WHEEL is optimum-intel 2.2.0's
wheel (read with zipfile; without it the committed optimum-intel block is kept). Every tag read
(sglang-jax and ATOM: all tags; ollama: the release tags from v0.23.0, no ``-rc``; mistral.rs:
v0.8.0 on; openvino.genai: the 2026.x.y.z release tags) and the
commit REPO's HEAD is at are read with ``git show``, ``git grep`` and ast; nothing is checked
out, built, imported or run. Per ref and method, the facts below are recognised by the
structure of the code; a file whose structure is not recognised leaves that method out for
that ref (the table says "none"), so a changed file never turns into a made-up rule.

- sglang-jax DFlash (``model_executor/model_runner.py`` calls ``parse_dflash_draft_config``
  of the *draft's* config for the target worker; ``speculative/dflash_util.py`` reads
  ``dflash_config.target_layer_ids``, else the top-level ``target_layer_ids``): per model file
  with ``set_eagle3_layers_to_capture``, whether it has its own
  ``set_dflash_layers_to_capture`` (a missing list raises ValueError) or falls back to the
  EAGLE-3 setter (a missing list: the EAGLE-3 default capture ``2, L//2, L-3``), what it adds
  to each id, and what index 0 captures.
- sglang-jax MTP (``--speculative-algorithm NEXTN``): the targets whose model returns the
  final norm's output to the logits processor with no aux states (its ``hidden_states``, what
  the draft worker gets): ``final_norm``.
- ATOM DSpark (``spec_decode/drafter.py`` ``AuxCaptureSpec`` hooks, ``dspark_proposer.py``,
  ``config.py``): ids from ``dspark_target_layer_ids`` (an inline DeepSeek-V4 draft) or the
  top-level ``target_layer_ids`` (a standalone ``*DSparkModel`` draft), strictly increasing,
  each in ``{-1} U [0, L)``; -1 = the embedding output, k = layer k's output.
- ATOM MTP (``model_runner.py`` hands the target model's output to ``drafter.propose``): the
  targets (``support_model_arch_dict``) whose model file's model type ``_MTP_TYPE_MAP`` maps
  to an MTP drafter, and whether that model's forward ends on the final norm
  (``final_norm``) or on the unreduced hyper-connection stack (DeepSeek-V4: refused).
- ollama DFlash (``x/models/dflash/dflash.go``, the MLX runner): ids from
  ``dflash_config.target_layer_ids`` only, ascending and non-negative, below the target's
  layer count and the draft's ``num_target_layers``; the targets with
  ``SetAuxHiddenLayers`` append layer i's output (``residual:i+1``).
- ollama MTP (``x/mlxrunner/mtp.go``): the runner hands the drafter the target's
  ``auxHidden`` output; the targets whose ``Forward`` returns ``out, out`` with ``out`` the
  final norm's output: ``final_norm``.

- mistral.rs DFlash / DFlash2 (``mistralrs-core/src/speculative/dflash.rs``): ids from
  ``dflash_config.target_layer_ids`` (usize), else the fallback over the draft's
  ``num_target_layers`` (``[T/2]`` for one draft layer, else the rounded spacing over
  ``[1, T-3]``), an id >= L refused at load; DFlash2 = an architecture naming ``DFlash2``,
  needing ``selector_rank`` and ``conv_group_size``; the targets whose model folder has
  ``attach_dflash`` and whose ``text.rs`` pushes ``xs`` after the layer's residual add for
  the listed layers (the architectures the multimodal loader maps to that model).
- mistral.rs MTP: the model folders (Gemma-4, Qwen3.5) with an ``mtp.rs`` head reading
  ``target_hidden`` whose ``text.rs`` stores the final norm's output: ``final_norm``.
- openvino.genai DFlash (``speculative_decoding/dflash_model_transforms.cpp``): the draft
  IR's rt_info ``dflash.target_layer_ids`` (asserted present and non-empty); the target IR's
  ``hidden_states_decoder_layers`` annotation (each id looked up; a duplicate output
  refused), else the EAGLE-3 finder (``layers.k/``'s residual Add after the MLP), both in the
  list's order. MTP: ``stateful/gemma4_mtp_strategy.cpp`` feeds the target IR's
  ``mtp_last_hidden_state`` output (its state is the exporter's: not read).
- optimum-intel 2.2.0 (the exporter of the IRs above): it copies
  ``dflash_config.target_layer_ids`` into the draft IR (refusing a draft without it) and
  annotates, for the model types it lists, layer k < L - 1 as the value entering block
  k + 1 and layer L - 1 as lm_head's input.

TensorRT-LLM (PyTorch backend and AutoDeploy) cannot be cloned here (a 2.5 GB repository);
its facts, read file by file through a code index from stored versions of its main branch, are
the ``TRTLLM`` block below, written into the table as they are, each with its file and commit.
No release of it is checked. ``--check`` re-reads the snapshot commits the committed table
names and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path
from typing import Any

from release_scan import Facts, write_or_check
from source_scan import git

OUT = Path(__file__).resolve().parents[1] / (
    "pytest_eagle_contract/engines/source_method_rules.json"
)

# --- sglang-jax -------------------------------------------------------------------------
SGLJ = "python/sgl_jax/srt/"


def _entry_classes(text: str) -> list[str]:
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "EntryClass":
            value = node.value
            names = value.elts if isinstance(value, ast.List) else [value]
            return [n.id for n in names if isinstance(n, ast.Name)]
    return []


def _function(text: str, name: str) -> str | None:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.unparse(node)
    return None


def _sglj_dflash(repo: Path, ref: str) -> Facts | None:
    runner = git(repo, "show", f"{ref}:{SGLJ}model_executor/model_runner.py", check=False)
    util = git(repo, "show", f"{ref}:{SGLJ}speculative/dflash_util.py", check=False)
    if 'speculative_algorithm == "DFLASH" and not self.is_draft_worker' not in runner:
        return None
    needed = (
        "parse_dflash_draft_config(",
        "self.server_args.speculative_draft_model_path",
        "dflash_layer_ids = None",
        'hasattr(self.model, "set_dflash_layers_to_capture")',
        "self.model.set_eagle3_layers_to_capture(dflash_layer_ids)",
    )
    get = _function(util, "_cfg_get") or ""
    if not all(
        n in runner for n in needed
    ) or "if key in dflash and dflash[key] is not None" not in (get.replace("'", '"')):
        return None
    if '_cfg_get(dflash, hf_config, "target_layer_ids", None)' not in util:
        return None
    if 'raise ValueError("DFLASH target_layer_ids must be non-empty when set.")' not in util:
        return None
    models = []
    files = git(repo, "grep", "-l", "def set_eagle3_layers_to_capture", ref, "--", SGLJ + "models")
    for line in sorted(files.split()):
        name = line.partition(":")[2]
        text = git(repo, "show", f"{ref}:{name}")
        eagle = _function(text, "set_eagle3_layers_to_capture") or ""
        own = _function(text, "set_dflash_layers_to_capture")
        plus = re.search(r"layers_to_capture = \[val \+ (\d+) for val in layer_ids\]", own or eagle)
        default = re.search(r"\[\s*2,\s*num_layers // 2,\s*num_layers - 3,?\s*\]", eagle)
        if plus is None or default is None or "if layer_id in self.layers_to_capture:" not in text:
            return None
        if own is not None and "raise ValueError" not in own:
            return None
        flat = ast.unparse(ast.parse(text))
        if "aux_hidden_states.append(hidden_states + residual if residual is not None else " in (
            flat
        ):
            index0 = "embed"
        elif "aux_hidden_states.append(hidden_states + residual)" in flat:
            index0 = "crash"
        else:
            return None
        models.append(
            {
                "archs": _entry_classes(text),
                "file": name.removeprefix("python/"),
                "setter": "set_dflash_layers_to_capture" if own else "set_eagle3_layers_to_capture",
                "plus": int(plus.group(1)),
                "missing": "refused" if own else "eagle3-default",
                "index0": index0,
            }
        )
    return {
        "file": (SGLJ + "model_executor/model_runner.py").removeprefix("python/"),
        "keys": ["dflash_config.target_layer_ids", "target_layer_ids"],
        "models": models,
    }


SGLJ_MTP_TARGETS = (  # (target model file, the file of the model class it runs)
    ("models/mimo.py", "models/qwen2.py"),
    ("models/mimo_v2_flash.py", "models/mimo_v2_flash.py"),
    ("models/mimo_v2_pro.py", "models/mimo_v2_flash.py"),
)


def _sglj_mtp(repo: Path, ref: str) -> Facts | None:
    args = git(repo, "show", f"{ref}:{SGLJ}server_args.py", check=False)
    if '"NEXTN"' not in args:
        return None
    targets = []
    for target, base in SGLJ_MTP_TARGETS:
        text = git(repo, "show", f"{ref}:{SGLJ}{target}", check=False)
        model = git(repo, "show", f"{ref}:{SGLJ}{base}", check=False)
        if not text:
            continue
        ends = re.search(r"hidden_states = self\.norm\(hidden_states\)\n", model)
        hands = re.search(
            r"self\.logits_processor\(\s*hidden_states, self\.lm_head, logits_metadata\s*\)", model
        )
        if ends is None or hands is None or "aux_hidden_states=aux" in model:
            return None
        targets.append({"archs": _entry_classes(text), "file": "sgl_jax/srt/" + target})
    drafts = []
    for name in ("models/mimo_mtp.py", "models/mimo_v2_nextn.py"):
        text = git(repo, "show", f"{ref}:{SGLJ}{name}", check=False)
        if "forward_batch.spec_info.hidden_states" in text:
            drafts += _entry_classes(text)
    if not targets:
        return None
    return {"state": "final_norm", "targets": targets, "drafts": drafts}


def sglang_jax(repo: Path, ref: str) -> Facts:
    return {"dflash": _sglj_dflash(repo, ref), "mtp": _sglj_mtp(repo, ref)}


# --- ATOM -------------------------------------------------------------------------------
ATOM_MTP_FILES = {  # model file -> its model class and the model types it serves
    "deepseek_v2": ("DeepseekV2Model", ("deepseek_v3", "deepseek_v32", "glm_moe_dsa")),
    "deepseek_v4": ("DeepseekV4Model", ("deepseek_v4",)),
    "qwen3_next": ("Qwen3NextModel", ("qwen3_next",)),
    "qwen3_5": ("Qwen3NextModel", ("qwen3_5", "qwen3_5_moe")),
    "mimo_v2": ("MiMoV2Model", ("mimo_v2", "mimo_v2_flash")),
}


def _dict_literal(text: str, name: str) -> dict[str, Any] | None:
    for node in ast.walk(ast.parse(text)):
        target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and getattr(target, "id", "") == name:
            try:
                value = ast.literal_eval(node.value)  # type: ignore[arg-type]
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def _class_forward(text: str, cls: str) -> str | None:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    return ast.unparse(item)
    return None


def _atom_dspark(repo: Path, ref: str) -> Facts | None:
    drafter = git(repo, "show", f"{ref}:atom/spec_decode/drafter.py", check=False)
    proposer = git(repo, "show", f"{ref}:atom/spec_decode/dspark_proposer.py", check=False)
    config = git(repo, "show", f"{ref}:atom/config.py", check=False)
    if not proposer:
        return None
    needed = (
        (drafter, "if not (lid == -1 or 0 <= lid < n_layers):"),
        (drafter, "if prev is not None and lid <= prev:"),
        (drafter, "if lid == -1\n                else (layers[lid], spec.extract)"),
        (proposer, 'getattr(draft_cfg, "dspark_target_layer_ids", ())'),
        (proposer, '"DSpark requires dspark_target_layer_ids on the draft config."'),
        (proposer, "output.hidden_states[layer_id + 1]"),
        (config, 'arch.endswith("DSparkModel")'),
        (config, 'target_layer_ids = getattr(hf_config, "target_layer_ids", None)'),
        (config, "hf_config.dspark_target_layer_ids = [int(i) for i in target_layer_ids]"),
        (config, 'if getattr(hf_config, "dspark_block_size", None):'),
    )
    if not all(what in text for text, what in needed):
        return None
    return {
        "file": "atom/spec_decode/drafter.py",
        "keys": {"inline": "dspark_target_layer_ids", "standalone": "target_layer_ids"},
        "standalone_archs_end": "DSparkModel",
        "plus": 1,
        "minus1": "embed",
        "increasing": True,
        "missing": "refused",
        "hc_mean": "DeepseekV4",
    }


def _atom_mtp(repo: Path, ref: str) -> Facts | None:
    runner = git(repo, "show", f"{ref}:atom/model_engine/model_runner.py", check=False)
    config = git(repo, "show", f"{ref}:atom/config.py", check=False)
    if "target_hidden_states=hidden_states" not in runner:
        return None
    if "hidden_states = model_output" not in runner:
        return None
    mtp_map: dict[str, Any] | None = None
    for node in ast.walk(ast.parse(config)):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "_MTP_TYPE_MAP":
            mtp_map = ast.literal_eval(node.value)  # type: ignore[arg-type]
    archs = _dict_literal(runner, "support_model_arch_dict")
    if not mtp_map or not archs:
        return None
    targets = []
    for module, (cls, types) in ATOM_MTP_FILES.items():
        if not any(t in mtp_map for t in types):
            continue
        text = git(repo, "show", f"{ref}:atom/models/{module}.py", check=False)
        if not text:
            continue
        source = text
        if module == "qwen3_5":  # its Qwen3_5Model subclasses Qwen3NextModel's forward
            if "class Qwen3_5Model(Qwen3NextModel):" not in text or _class_forward(
                text, "Qwen3_5Model"
            ):
                continue
            source = git(repo, "show", f"{ref}:atom/models/qwen3_next.py")
        forward = _class_forward(source, cls) or ""
        if "pre-hc_head residual stream" in forward or "BEFORE hc_head" in forward:
            state = "hc-stack"
        elif re.search(r"hidden_states, _ = self\.norm\(hidden_states, residual\)", forward):
            state = "final_norm"
        else:
            continue
        served = sorted(
            a for a, path in archs.items() if str(path).startswith(f"atom.models.{module}.")
        )
        if served:
            targets.append({"archs": served, "file": f"atom/models/{module}.py", "state": state})
    return {"targets": targets} if targets else None


def atom(repo: Path, ref: str) -> Facts:
    return {"dspark": _atom_dspark(repo, ref), "mtp": _atom_mtp(repo, ref)}


# --- ollama -----------------------------------------------------------------------------
def _go_registers(text: str) -> list[str]:
    return re.findall(r'base\.Register\("([^"]+)"', text)


def _ollama_dflash(repo: Path, ref: str) -> Facts | None:
    text = git(repo, "show", f"{ref}:x/models/dflash/dflash.go", check=False)
    if not text:
        return None
    needed = (
        r"TargetLayerIDs:\s+raw\.DFlashConfig\.TargetLayerIDs,",
        r'"dflash config missing target_layer_ids"',
        r"id < 0 \|\| \(i > 0 && id <= cfg\.TargetLayerIDs\[i-1\]\)",
        r"target\.SetAuxHiddenLayers\(cfg\.TargetLayerIDs\)",
        r"last >= target\.NumLayers\(\)",
        r'"dflash draft trained for %d target layers, target has %d"',
    )
    if not all(re.search(n, text) for n in needed):
        return None
    if re.search(r"^\t\tTargetLayerIDs\s", text, re.M):
        return None  # a top-level target_layer_ids field: not the form read
    targets = []
    files = git(repo, "grep", "-l", "func (m \\*Model) SetAuxHiddenLayers", ref, "--", "x/models")
    for line in sorted(files.split()):
        name = line.partition(":")[2]
        body = git(repo, "show", f"{ref}:{name}")
        if not re.search(
            r"h = layer\.Forward\([^\n]*\)\n\t+if slices\.Contains\(m\.auxHiddenLayers, i\) \{\n"
            r"\t+features = append\(features, h\)",
            body,
        ):
            return None
        targets.append({"archs": _go_registers(body), "file": name})
    return {
        "file": "x/models/dflash/dflash.go",
        "keys": ["dflash_config.target_layer_ids"],
        "plus": 1,
        "increasing": True,
        "missing": "refused",
        "depth_check": True,
        "targets": targets,
    }


def _ollama_mtp(repo: Path, ref: str) -> Facts | None:
    if not git(repo, "show", f"{ref}:x/mlxrunner/mtp.go", check=False):
        return None
    spec = git(repo, "show", f"{ref}:x/mlxrunner/speculate.go", check=False)
    if not re.search(r"s\.drafter\.committed\(\n\t+[^\n]+\n\t+auxHiddenSeq\.Slice\(", spec):
        return None
    targets = []
    files = git(repo, "grep", "-l", "loadMTPHead", ref, "--", "x/models")
    for line in sorted(files.split()):
        name = line.partition(":")[2]
        if name.endswith("_test.go"):
            continue
        body = git(repo, "show", f"{ref}:{name}")
        forward = re.search(
            r"func \(m \*Model\) Forward\(b \*batch\.Batch, caches \[\]cache\.Cache\) "
            r"\(hidden, auxHidden \*mlx\.Array\) \{\n(.*?)\n\}\n",
            body,
            re.S,
        )
        if forward is None:
            continue
        if re.search(r"out := m\.Norm\.Forward\(h, [^)]*\)\n\treturn out, out$", forward.group(1)):
            targets.append({"archs": _go_registers(body), "file": name, "state": "final_norm"})
    return {"targets": targets} if targets else None


def ollama(repo: Path, ref: str) -> Facts:
    return {"dflash": _ollama_dflash(repo, ref), "mtp": _ollama_mtp(repo, ref)}


def _ollama_tags(tag: str) -> bool:
    m = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", tag)
    return m is not None and (int(m.group(1)), int(m.group(2))) >= (0, 23)


# --- mistral.rs -------------------------------------------------------------------------
MRS = "mistralrs-core/src/"
MRS_TARGETS = {  # model folder (vision_models/) -> the loader variant whose archs it serves
    "qwen3_5": "Qwen3_5",
    "gemma4": "Gemma4",
}


def _flat(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _rs_archs(repo: Path, ref: str, variant: str) -> list[str]:
    """The architectures the multimodal loader maps to ``Self::variant`` (its match arms on
    ``architectures``; the lower-case model-type arms left out)."""
    text = git(repo, "show", f"{ref}:{MRS}pipeline/loaders/multimodal_loaders.rs", check=False)
    archs: list[str] = []
    for m in re.finditer(r'((?:"\w+"\s*\|\s*)*"\w+")\s*=>\s*Ok\(Self::' + variant + r"\)", text):
        archs += [n for n in re.findall(r'"(\w+)"', m.group(1)) if n[:1].isupper()]
    return sorted(set(archs))


def _mrs_dflash(repo: Path, ref: str) -> Facts | None:
    text = _flat(git(repo, "show", f"{ref}:{MRS}speculative/dflash.rs", check=False))
    if not text:
        return None
    needed = (
        "pub target_layer_ids: Option<Vec<usize>>,",
        "if let Some(ids) = &self.dflash_config.target_layer_ids { return Ok(ids.clone()); }",
        'bail!("DFlash config has neither target_layer_ids nor num_target_layers");',
        "let n = self.num_hidden_layers;",
        "if n == 1 { return Ok(vec![num_target_layers / 2]); }",
        "let (start, end) = (1, num_target_layers - 3);",
        ".map(|i| start + (i * (end - start) + (n - 1) / 2) / (n - 1))",
        "if *max >= target_num_layers {",
        '"DFlash taps target layer {max} but the target has {target_num_layers} layers"',
        '.any(|a| a.contains("DFlash") || a.contains("Dflash"))',
    )
    if not all(_flat(n) in text for n in needed):
        return None
    v2 = all(
        _flat(n) in text
        for n in (
            'fn is_v2(&self) -> bool { self.architectures.iter().any(|a| a.contains("DFlash2")) }',
            '"DFlash2 config has no selector_rank"',
            '"DFlash2 config has no conv_group_size"',
        )
    )
    targets = []
    files = git(repo, "grep", "-l", "fn attach_dflash", ref, "--", MRS + "vision_models")
    for line in sorted(files.split()):
        name = line.partition(":")[2]
        folder = name.removeprefix(MRS + "vision_models/").partition("/")[0]
        spec = _flat(git(repo, "show", f"{ref}:{name}"))
        model = git(repo, "show", f"{ref}:{MRS}vision_models/{folder}/text.rs", check=False)
        if folder not in MRS_TARGETS:
            return None
        if _flat(".set_dflash_tap_layers(drafter.target_layer_ids.clone());") not in spec:
            return None
        if (
            _flat("if capture.taps.len() != drafter.target_layer_ids.len() { return Ok(None); }")
            not in spec
        ):
            return None
        # the tap: xs after the layer's residual add (fused with the next layer's norm or
        # not), pushed in the layer loop when the layer index is in the list
        fused = re.search(
            r"let \(hidden, normed\) = layer_output\.add_and_norm\(next_norm\)\?;\s*xs = hidden;",
            model,
        ) and re.search(r"xs = layer_output\.add\(\)\?;", model)
        plain = (
            re.search(r"xs = layer\.forward_attention\(", model)
            and re.search(r"xs = layer\.forward_linear\w*\(", model)
            and len(re.findall(r"ffn_out \+ residual\n    \}", model)) >= 2
        )
        if not (fused or plain):
            return None
        if not re.search(
            r"if capture_taps && tap_layers\.contains\(&i\) \{\s*taps_all\.push\(xs\.to_device\(",
            model,
        ):
            return None
        targets.append(
            {
                "archs": _rs_archs(repo, ref, MRS_TARGETS[folder]),
                "file": f"{MRS}vision_models/{folder}/text.rs",
            }
        )
    if not targets:
        return None
    return {
        "file": MRS + "speculative/dflash.rs",
        "keys": ["dflash_config.target_layer_ids"],
        "fallback": "num_target_layers",  # n = 1: [T // 2]; else round-half-up over [1, T - 3]
        "plus": 1,
        "order": "layer",
        "repeated": "no-draft",  # taps fewer than ids: the proposer returns no draft
        "v2": {"arch_contains": "DFlash2", "needs": ["selector_rank", "conv_group_size"]}
        if v2
        else None,
        "targets": targets,
    }


def _mrs_mtp(repo: Path, ref: str) -> Facts | None:
    targets = []
    files = git(repo, "ls-tree", "-r", "--name-only", ref, "--", MRS + "vision_models")
    for name in sorted(files.split()):
        if not name.endswith("/mtp.rs"):
            continue
        folder = name.removeprefix(MRS + "vision_models/").partition("/")[0]
        if folder not in MRS_TARGETS:
            continue
        model = git(repo, "show", f"{ref}:{MRS}vision_models/{folder}/text.rs", check=False)
        head = git(repo, "show", f"{ref}:{name}")
        if "target_hidden" not in head:
            continue
        # the state stored for the MTP head: the final norm's output (fused into the last
        # layer's add or applied after the loop), before lm_head
        if folder == "qwen3_5":
            ok = (
                re.search(
                    r"_ => xs\.to_device\(&self\.device\)\?\.apply\(&self\.norm\)\?,\s*\};", model
                )
                or re.search(r"let xs = xs\.apply\(&self\.norm\)\?;\s*let store_spec", model)
            ) and re.search(r"SpecCapture \{\s*hidden: xs\.clone\(\),", model)
            spec = git(repo, "show", f"{ref}:{MRS}vision_models/{folder}/speculative.rs")
            ok = ok and "capture.hidden" in spec
        else:
            ok = re.search(
                r"xs\.to_device\(&self\.device\)\?\.apply\(&self\.norm\)\?\s*\};", model
            ) and re.search(
                r"last_spec_hidden\.lock\(\) \{\s*\*hidden = Some\(xs\.clone\(\)\);", model
            )
            hands = git(repo, "show", f"{ref}:{MRS}vision_models/{folder}/mod.rs", check=False)
            ok = ok and "self.language_model.last_spec_hidden()" in hands
        if ok:
            targets.append(
                {
                    "archs": _rs_archs(repo, ref, MRS_TARGETS[folder]),
                    "file": f"{MRS}vision_models/{folder}/text.rs",
                    "head": name,
                    "state": "final_norm",
                }
            )
    return {"targets": targets} if targets else None


def mistralrs(repo: Path, ref: str) -> Facts:
    return {"dflash": _mrs_dflash(repo, ref), "mtp": _mrs_mtp(repo, ref)}


def _mistralrs_tags(tag: str) -> bool:
    m = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", tag)
    return m is not None and (int(m.group(1)), int(m.group(2))) >= (0, 8)


# --- OpenVINO GenAI ---------------------------------------------------------------------
OVG = "src/cpp/src/"


def _ov_dflash(repo: Path, ref: str) -> Facts | None:
    text = git(
        repo, "show", f"{ref}:{OVG}speculative_decoding/dflash_model_transforms.cpp", check=False
    )
    eagle = git(
        repo, "show", f"{ref}:{OVG}speculative_decoding/eagle3_model_transforms.cpp", check=False
    )
    if not text:
        return None
    flat, eflat = _flat(text), _flat(eagle)
    needed = (
        'get_rt_info_value<std::string>(model, {"dflash", "target_layer_ids"})',
        'properties["dflash_target_layer_ids"] = parse_layer_ids(*target_layer_ids);',
        '"DFlash draft model is missing dflash_target_layer_ids RT info."',
        '"DFlash target_layer_ids cannot be empty."',
        'DFLASH_HIDDEN_STATES_RT_INFO_KEY = "hidden_states_decoder_layers"',
        "const auto key = std::to_string(layer_id); const auto& locator = layers.at(key);",
        '"Duplicate producer/output locator for requested decoder layers: "',
        '"Malformed hidden-state annotation metadata: "',
        "outputs = eagle3::find_decoder_layer_hidden_state_outputs(model, target_layer_ids);",
        "outputs.size() == target_layer_ids.size()",
    )
    if not all(_flat(n) in flat for n in needed):
        return None
    fallback = (
        'patterns.emplace_back("layers." + std::to_string(idx) + "/");',
        "ov::is_type<ov::op::v1::Multiply>(matmul_input)",
        "ordered_outputs.push_back(residual_outputs[idx]);",
    )
    if not all(_flat(n) in eflat for n in fallback):
        return None
    return {
        "file": OVG + "speculative_decoding/dflash_model_transforms.cpp",
        "key": "dflash.target_layer_ids",  # the draft IR's rt_info
        "annotation": "hidden_states_decoder_layers",  # the target IR's rt_info
        "fallback": "eagle3",  # find_decoder_layer_hidden_state_outputs: layer k's residual add
        "plus": 1,
        "order": "list",
        "missing": "refused",
    }


def _ov_mtp(repo: Path, ref: str) -> Facts | None:
    name = f"{OVG}speculative_decoding/stateful/gemma4_mtp_strategy.cpp"
    text = git(repo, "show", f"{ref}:{name}", check=False)
    if not text:
        return None
    if 'output.hidden_states = m_request.get_tensor("mtp_last_hidden_state");' not in text:
        return None
    return {
        "targets": [
            {
                "file": name,
                "model": "Gemma-4",
                "output": "mtp_last_hidden_state",
            }
        ]
    }


def openvino(repo: Path, ref: str) -> Facts:
    return {"dflash": _ov_dflash(repo, ref), "mtp": _ov_mtp(repo, ref)}


def _openvino_tags(tag: str) -> bool:
    return re.fullmatch(r"\d{4}\.\d+\.\d+\.\d+", tag) is not None and tag >= "2026"


# optimum-intel (a wheel: zipfile, nothing imported): what it writes into the IRs that
# openvino.genai reads for DFlash
OI_FILES = {
    "convert": "optimum/exporters/openvino/convert.py",
    "annotations": "optimum/exporters/openvino/utils_annotations.py",
    "configs": "optimum/exporters/openvino/model_configs.py",
}


def optimum_intel(wheel: Path) -> Facts:
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        text = {k: z.read(v).decode("utf-8") for k, v in OI_FILES.items()}
    version = re.search(r"optimum_intel-([^-]+)-", wheel.name)
    needed = (
        (
            "convert",
            'model.set_rt_info(",".join(map(str, dflash_config["target_layer_ids"])), '
            '["dflash", "target_layer_ids"])',
        ),
        ("configs", "DFlash export requires non-empty dflash_config['target_layer_ids']."),
        ("annotations", 'hidden_states_rt_info_key = "hidden_states_decoder_layers"'),
        ("annotations", "for layer_id in range(len(decoder_modules) - 1):"),
        ("annotations", "scope_prefix + decoder_modules[layer_id + 1],"),
        ("annotations", "locators[len(decoder_modules) - 1] = {"),
        (
            "annotations",
            "final_output = _lm_head_input(ops, scope_prefix + lm_head_module, hidden_size)",
        ),
    )
    for key, what in needed:
        if what not in text[key]:
            raise SystemExit(f"{wheel.name}: {OI_FILES[key]} lacks {what!r}")
    types = re.search(r"model_type\", None\) in \{([^}]*)\}", text["convert"])
    if types is None:
        raise SystemExit(f"{wheel.name}: no annotated model types in {OI_FILES['convert']}")
    return {
        "version": version.group(1) if version else wheel.name,
        "files": dict(OI_FILES),
        "draft_key": "dflash_config.target_layer_ids",
        "annotated_model_types": sorted(re.findall(r'"(\w+)"', types.group(1))),
        "layer": "layer k < L - 1: the output crossing from decoder block k into block k + 1 "
        "(residual:k+1); layer L - 1: the input of lm_head (final_norm)",
    }


# --- TensorRT-LLM (read through the code index; no clone) -------------------------------
TRTLLM: Facts = {
    "read": "stored versions of NVIDIA/TensorRT-LLM's main branch through a code index (no "
    "clone: 2.5 GB); no release checked",
    "files": {
        "llm_args": "tensorrt_llm/llmapi/llm_args.py@0004396720054fd8e205cbf616f21f0b57c6b412",
        "dflash": "tensorrt_llm/_torch/speculative/dflash.py"
        "@00679c66c3e38f6d2651ad0a5bef0f94d862e36c",
    },
    "trtllm": {
        "dflash": {
            "config": "DFlashDecodingConfig",
            "key": "speculative_config.target_layer_ids",
            "draft_key": "dflash_config.target_layer_ids",
            "plus": 1,
            "sorted": True,
            "capture": "DFlashSpecMetadata.maybe_capture_hidden_states: hidden_states + "
            "residual at the decoder layer's capture call, the call EAGLE-3 captures at "
            "(the output of layer t)",
        },
        "dspark": {
            "config": "DSparkDecodingConfig",
            "key": "speculative_config.target_layer_ids",
            "draft_key": "dspark_target_layer_ids",
            "plus": 1,
            "sorted": True,
            "capture": "a standalone DSpark draft is served by DFlashWorker (the config's "
            "draft_is_embedded_in_target docstring) with DFlashSpecMetadata, the DFlash capture",
            "embedded": "a draft embedded in a DeepSeek-V4 target (mtp.* weights) runs "
            "DSv4DSparkWorker with its own captured-context window: not read",
        },
        "pard": "PARDDecodingConfig: target-independent (its docstring: does not use the "
        "target model's hidden states)",
        "mtp": "MTPDecodingConfig: MTP_EAGLE_ONE_MODEL passes the target model's "
        "hidden_states to the MTP layer (num_capture_layers' comment); the models' forward "
        "hands spec_worker the tensor their logits come from through lm_head (final_norm "
        "wherever the model ends on its final norm), but which targets do, and which "
        "override it, was not traced",
        "dflash2": "no DFlash2 decoding config in llm_args.py (DFlash, DSpark, PARD, MTP, "
        "Eagle3, NGram, SA, DraftTarget, UserProvided, SaveState, AUTO)",
    },
    "trtllm-autodeploy": {
        "backend": "DFlashDecodingConfig, DSparkDecodingConfig and PARDDecodingConfig "
        "supports_backend: pytorch only (not _autodeploy)",
        "mtp": "MTPDecodingConfig supports _autodeploy; which state AutoDeploy feeds the MTP "
        "head was not found in auto_deploy/transform/library (no MTP transform there)",
    },
}


SOURCES = (  # (table key, --option, repo on GitHub, derive, which tags are releases)
    ("sglang-jax", "sglang_jax", "sgl-project/sglang-jax", sglang_jax, lambda t: True),
    ("atom", "atom", "ROCm/ATOM", atom, lambda t: True),
    ("ollama", "ollama", "ollama/ollama", ollama, _ollama_tags),
    ("mistralrs", "mistralrs", "EricLBuehler/mistral.rs", mistralrs, _mistralrs_tags),
    ("openvino", "openvino", "openvinotoolkit/openvino.genai", openvino, _openvino_tags),
)


def _fold(derive: Any, repo: Path, refs: list[str]) -> list[Facts]:
    rows: list[Facts] = []
    for ref in refs:
        facts = derive(repo, ref)
        print(ref, ", ".join(k for k, v in facts.items() if v) or "none", file=sys.stderr)
        if not any(facts.values()):
            continue
        if rows and {k: v for k, v in rows[-1].items() if k != "refs"} == facts:
            rows[-1]["refs"].append(ref)
        else:
            rows.append({"refs": [ref], **facts})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    for _, option, name, _, _ in SOURCES:
        parser.add_argument(
            f"--{option.replace('_', '-')}", type=Path, required=True, help=f"a git clone of {name}"
        )
    parser.add_argument(
        "--optimum-intel",
        type=Path,
        help="the optimum-intel wheel (pip download --no-deps optimum-intel==2.2.0); without it "
        "the committed optimum-intel block is kept",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    old = json.loads(args.out.read_text("utf-8")) if args.check or not args.optimum_intel else {}
    table: dict[str, Any] = {"trtllm": TRTLLM}
    count = 0
    for key, option, name, derive, is_release in SOURCES:
        repo = getattr(args, option)
        head = (
            old[key]["snapshot"]["commit"] if args.check else git(repo, "rev-parse", "HEAD").strip()
        )
        tags = [t for t in git(repo, "tag", "--sort=v:refname").split() if is_release(t)]
        refs = [*tags, head]
        count += len(refs)
        table[key] = {
            "snapshot": {
                "repo": name,
                "commit": head,
                "date": git(repo, "log", "-1", "--format=%cs", head).strip(),
            },
            "read": refs,
            "rows": _fold(derive, repo, refs),
        }
    if args.optimum_intel is not None:
        table["optimum-intel"] = optimum_intel(args.optimum_intel)
    elif "optimum-intel" in old:
        table["optimum-intel"] = old["optimum-intel"]
    else:
        raise SystemExit("--optimum-intel WHEEL: the table has no optimum-intel block yet")
    return write_or_check(table, args.out, args.check, f"{count} refs", "the source")


if __name__ == "__main__":
    sys.exit(main())
