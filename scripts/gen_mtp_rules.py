"""Derive which target state each engine feeds an MTP head, and which one each trainer trains
it on; write engines/mtp_rules.json.

    python scripts/gen_mtp_rules.py WHEEL_DIR [--out FILE] [--check]

WHEEL_DIR holds (``pip download --no-deps``; scripts/download_method_wheels.py fetches them)
``sglang-X-*.whl``, ``vllm-X-*.whl``, ``lmdeploy-X-*.whl``, ``mlx_vlm-X-*.whl`` and the
trainers' ``speculators``, ``nvidia_modelopt``, ``megatron_core`` and ``specforge`` wheels.
Nothing is imported: files are read with zipfile and ast / regular expressions. An MTP
(NextN) head reads one target state, the one its engine hands the draft worker; per release:

SGLang (``layers/logits_processor.py``): the state stored for the draft worker is the
``hidden_states`` the target model passes to its logits processor, unless the model also
passes ``hidden_states_before_norm=`` (then that one is preferred: "when
hidden_states_before_norm is provided, we always prefer to return it"). ``prefers_before_norm``
records that sentence's presence.

vLLM (``v1/worker/gpu/model_runner.py`` and ``v1/worker/gpu_model_runner.py``): without aux
states (MTP asks for none) the drafter gets the ``hidden_states`` the target's ``forward``
returns, unless the target class defines ``get_mtp_target_hidden_states`` (V1: the runner's
``getattr(self.get_model(), "get_mtp_target_hidden_states", ...)``, ``hook_v1``; V2 from 0.32.0:
``spec_decode/utils.get_drafter_hidden_states``, ``hook_v2``). Every class of the wheel that
defines it (DeepSeek-V4, V4.1, Qwen4-exp under ``vllm/models/``) is ``own``.

Per target architecture (SGLang: a model file's ``EntryClass``; vLLM: ``models/registry.py``;
lmdeploy: ``pytorch/models/module_map.py``):
``final_norm`` where the file's model ends on ``hidden_states ... = self.norm(hidden_states``
(SGLang 0.5.21 ``residual_batch.norm(hidden_states, forward_batch, self.norm)``, from 0.5.22
``residual_batch.final_norm(...)``, both returning the normalized tensor:
the state returned to the logits processor is the final norm's output) and has no own
hook; ``own`` where it has one (SGLang ``hidden_states_before_norm=``, vLLM
``get_mtp_target_hidden_states``, lmdeploy a ``get_logits`` that applies the norm: not
followed, refused); absent (not read) otherwise. MTP draft architectures (files ``*_mtp.py`` /
``*_nextn.py``) and the norms their head applies to the two inputs (``self.hnorm(`` /
``self.enorm(`` / ``self.pre_fc_norm_hidden(`` ...) are listed per release.

lmdeploy and mlx-vlm: see ``derive_lmdeploy`` and ``derive_mlx`` (mlx-vlm keyed by model
folder). Trainers (``trainers``: ``derive_speculators``, ``derive_modelopt``,
``derive_megatron``, ``derive_specforge``): the state speculators, ModelOpt's Megatron
EAGLE-MTP and Megatron-core's own MTP block train the head on; SpecForge's MTP code.

Targets and drafts are written as spans ``[since, until (excl.) or null, value]`` per name
(``compact``), the other facts as ``release_scan.fold`` rows: the same facts as one row per
release.

llama.cpp's MTP state (``t_h_nextn``) is read by ``gen_llamacpp_rules.py`` (its ``archs``
rows); mlx-lm is not read (docs/mtp.md).

``--check`` compares with the existing file and exits 1 on any difference.
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

from release_scan import fold, spans, version_key, write_or_check  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "pytest_eagle_contract/engines/mtp_rules.json"
NORM_END = re.compile(
    r"hidden_states(?:, _)? = (?:self\.norm\(\s*hidden_states|"
    r"residual_batch\.(?:final_)?norm\(\s*hidden_states,\s*forward_batch,\s*self\.norm\b)"
)
HEAD_NORMS = re.compile(
    r"self\.(hnorm|enorm|pre_fc_norm_hidden|pre_fc_norm_embedding|hidden_layernorm|"
    r"embed_layernorm|hidden_norm|embed_norm)\("
)
SGLANG_PREFERS = "when hidden_states_before_norm is provided, we always"


def _entries(text: str) -> list[str]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets
        ):
            value = node.value
            values = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
            return [v.id for v in values if isinstance(v, ast.Name)]
    return []


def _is_mtp(name: str) -> bool:
    stem = name.rsplit("/", 1)[-1].removesuffix(".py")
    return stem.endswith(("_mtp", "_nextn"))


def _kind(text: str, hook: str) -> str | None:
    if hook in text:
        return "own"
    if NORM_END.search(text):
        return "final_norm"
    return None


def _norms(text: str) -> list[str]:
    return sorted(set(HEAD_NORMS.findall(text)))


def _class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == name), None)


def _passes_through(forward: ast.FunctionDef, delegate: re.Pattern[str]) -> bool:
    """Every assignment to ``hidden_states`` in ``forward`` is the delegate's call (its whole
    value) or ``hidden_states, aux = hidden_states`` (the capture unpacked), and at least one
    is the delegate's: the wrapper hands on what its language model returns, unchanged."""
    calls = 0
    for node in ast.walk(forward):
        if not isinstance(node, ast.Assign):
            continue
        names = [
            n.id
            for t in node.targets
            for n in (t.elts if isinstance(t, ast.Tuple) else [t])
            if isinstance(n, ast.Name)
        ]
        if "hidden_states" not in names:
            continue
        value = ast.unparse(node.value)
        if isinstance(node.value, ast.Call) and delegate.fullmatch(ast.unparse(node.value.func)):
            calls += 1
        elif not (value == "hidden_states" and isinstance(node.targets[0], ast.Tuple)):
            return False
    return calls > 0


SGLANG_ROUTINE = re.compile(r"general_mm_embed_routine|self\.language_model")


def _sglang_wrapper(text: str, cls_name: str) -> str | None:
    """The model file (``sglang/srt/models/M.py``) whose class a multimodal wrapper's
    ``self.language_model`` is, where the wrapper's forward hands that model's output
    (through ``general_mm_embed_routine(language_model=self.language_model)`` or a direct
    call) unchanged to ``self.logits_processor(input_ids, hidden_states, ...)``; else None."""
    tree = ast.parse(text)
    cls = _class(tree, cls_name)
    init = _method(cls, "__init__") if cls else None
    forward = _method(cls, "forward") if cls else None
    if cls is None or init is None or forward is None:
        return None
    lm = None
    for node in ast.walk(init):
        if (
            isinstance(node, ast.Assign)
            and ast.unparse(node.targets[0]) == "self.language_model"
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
        ):
            lm = node.value.func.id
    if lm is None:
        return None
    body = ast.unparse(forward)
    if "hidden_states_before_norm" in body or not re.search(
        r"self\.logits_processor\(input_ids, hidden_states\b", body
    ):
        return None
    if "general_mm_embed_routine(" in body and "language_model=self.language_model" not in body:
        return None
    if not _passes_through(forward, SGLANG_ROUTINE):
        return None
    for node in tree.body:
        if (
            isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("sglang.srt.models.")
            and any(a.name == lm and a.asname is None for a in node.names)
        ):
            return "sglang/srt/models/" + node.module.rsplit(".", 1)[-1] + ".py"
    return None


def derive_sglang(path: Path) -> dict[str, Any]:
    targets: dict[str, str] = {}
    drafts: dict[str, list[str]] = {}
    wrappers: dict[str, str] = {}  # arch -> the file its language model is defined in
    through: dict[str, str] = {}  # the wrappers read: their inner model's file
    with zipfile.ZipFile(path) as z:
        lp = z.read("sglang/srt/layers/logits_processor.py").decode(errors="replace")
        names = set(z.namelist())
        for name in sorted(names):
            if not (name.startswith("sglang/srt/models/") and name.endswith(".py")):
                continue
            text = z.read(name).decode(errors="replace")
            archs = _entries(text)
            if _is_mtp(name):
                for a in archs:
                    drafts[a] = _norms(text)
                continue
            kind = _kind(text, "hidden_states_before_norm=")
            if kind is not None:
                for a in archs:
                    targets[a] = kind
            elif archs:
                for a in archs:
                    inner = _sglang_wrapper(text, a)
                    if inner is not None and inner in names:
                        wrappers[a] = inner
        for arch, inner in wrappers.items():
            text = z.read(inner).decode(errors="replace")
            if _kind(text, "hidden_states_before_norm=") == "final_norm":
                targets[arch] = "final_norm"
                through[arch] = inner
    return {
        "file": "sglang/srt/layers/logits_processor.py",
        "prefers_before_norm": SGLANG_PREFERS in " ".join(lp.replace("#", " ").split()),
        "drafts": drafts,
        "targets": dict(sorted(targets.items())),
        "wrappers": dict(sorted(through.items())),
    }


REGISTRY = re.compile(r'"(\w+)": \(\s*"(\w+)",\s*"(\w+)"', re.S)


def _hook_classes(text: str, method: str) -> list[str]:
    """The classes of ``text`` that define ``method``."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    return [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and any(isinstance(f, ast.FunctionDef) and f.name == method for f in node.body)
    ]


VLLM_HOOK = "get_mtp_target_hidden_states"


VLLM_DELEGATE = re.compile(r"self\.language_model(?:\.model)?")


def _vllm_wrapper(text: str, cls_name: str) -> str | None:
    """The architecture a multimodal wrapper builds its ``self.language_model`` as
    (``init_vllm_registered_model(..., architectures=["X"])``), where the wrapper's forward
    returns that model's (or its ``.model``'s) output unchanged; else None."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    cls = _class(tree, cls_name)
    forward = _method(cls, "forward") if cls else None
    if cls is None or forward is None or _method(cls, VLLM_HOOK) is not None:
        return None
    arch = None
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.AnnAssign | ast.Assign)
            and ast.unparse(node.target if isinstance(node, ast.AnnAssign) else node.targets[0])
            == "self.language_model"
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func) == "init_vllm_registered_model"
        ):
            for kw in node.value.keywords:
                if kw.arg == "architectures" and isinstance(kw.value, ast.List):
                    values = [e.value for e in kw.value.elts if isinstance(e, ast.Constant)]
                    arch = values[0] if len(values) == 1 else None
    if arch is None or not _passes_through(forward, VLLM_DELEGATE):
        return None
    returns = [n for n in ast.walk(forward) if isinstance(n, ast.Return)]
    if not returns or any(
        ast.unparse(r.value or ast.Constant(None)) != "hidden_states" for r in returns
    ):
        return None
    return str(arch)


SPEC_CONFIG = "vllm/config/speculative.py"


def _draft_types(text: str) -> dict[str, str]:
    """``SpeculativeConfig``'s MTP draft conversion: target ``architectures[0]`` / ``model_type``
    -> the draft ``model_type`` it sets (``hf_config.model_type = "X_mtp"`` under an ``if`` that
    compares them), e.g. ``Step3p5ForCausalLM`` -> ``step3p5_mtp``."""
    out: dict[str, str] = {}
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.If):
            continue
        sets = [
            a.value.value
            for a in node.body
            if isinstance(a, ast.Assign)
            and ast.unparse(a.targets[0]) == "hf_config.model_type"
            and isinstance(a.value, ast.Constant)
        ]
        if not sets:
            continue
        for c in ast.walk(node.test):
            if not isinstance(c, ast.Compare):
                continue
            left = ast.unparse(c.left)
            if "architectures" not in left and not left.endswith("model_type"):
                continue
            for comp in c.comparators:
                elts = comp.elts if isinstance(comp, ast.Tuple | ast.List) else [comp]
                for e in elts:
                    if isinstance(e, ast.Constant) and isinstance(e.value, str):
                        out.setdefault(e.value, str(sets[0]))
    return dict(sorted(out.items()))


def derive_vllm(path: Path) -> dict[str, Any]:
    targets: dict[str, str] = {}
    through: dict[str, str] = {}  # multimodal wrappers: the architecture of their language model
    drafts: dict[str, list[str]] = {}
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        registry = z.read("vllm/model_executor/models/registry.py").decode()
        spec = z.read(SPEC_CONFIG).decode() if SPEC_CONFIG in names else ""
        v2 = "vllm/v1/worker/gpu/model_runner.py"
        v1 = "vllm/v1/worker/gpu_model_runner.py"
        runner2 = z.read(v2).decode() if v2 in names else ""
        runner1 = z.read(v1).decode() if v1 in names else ""
        own: set[str] = set()
        for name in sorted(names):
            if name.startswith("vllm/") and name.endswith(".py"):
                text = z.read(name).decode(errors="replace")
                if f"def {VLLM_HOOK}" in text:
                    own.update(_hook_classes(text, VLLM_HOOK))
        texts: dict[str, str] = {}
        for arch, module, cls in REGISTRY.findall(registry):
            file = f"vllm/model_executor/models/{module}.py"
            if cls in own:
                targets[arch] = "own"
                continue
            if file not in names:
                continue
            if file not in texts:
                texts[file] = z.read(file).decode(errors="replace")
            text = texts[file]
            if _is_mtp(file):
                drafts[arch] = _norms(text)
                continue
            kind = _kind(text, f"def {VLLM_HOOK}")
            if kind is not None:
                targets[arch] = kind
        for arch, module, cls in REGISTRY.findall(registry):
            file = f"vllm/model_executor/models/{module}.py"
            if arch in targets or file not in names or _is_mtp(file):
                continue
            inner = _vllm_wrapper(texts.get(file) or z.read(file).decode(errors="replace"), cls)
            if inner is not None and targets.get(inner) == "final_norm":
                targets[arch] = "final_norm"
                through[arch] = inner
        for cls in own:
            targets.setdefault(cls, "own")
    return {
        "file": "vllm/v1/worker/gpu/model_runner.py, vllm/v1/worker/gpu_model_runner.py",
        "hook_v1": f'"{VLLM_HOOK}"' in runner1,
        "hook_v2": "get_drafter_hidden_states(self.model" in runner2,
        "drafts": dict(sorted(drafts.items())),
        "targets": dict(sorted(targets.items())),
        "wrappers": dict(sorted(through.items())),
        "draft_types": _draft_types(spec) if spec else {},
    }


LMDEPLOY_MAP = re.compile(r"'(\w+)':\s*f'\{LMDEPLOY_PYTORCH_MODEL_PATH\}\.(\w+)\.(\w+)'")
LMDEPLOY_PROPOSER = re.compile(r"@SPEC_PROPOSERS\.register_module\(name='(\w+)'\)")


def _method_body(text: str, names: tuple[str, ...]) -> dict[str, str]:
    """The source of each method named in ``names`` that a class of ``text`` defines."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and f.name in names:
                    out.setdefault(f.name, ast.get_source_segment(text, f) or "")
    return out


MODEL_CLASS = ("Model", "ForCausalLM", "ForConditionalGeneration")


def _inherits(text: str, cls: str) -> str | None:
    """The sibling module whose model ``cls`` extends without a ``forward`` of its own
    (lmdeploy's ``qwen3_5_moe.py`` over ``qwen3_5.py``), or None."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    if cls not in classes or any(
        name.endswith(MODEL_CLASS)
        and any(isinstance(f, ast.FunctionDef) and f.name == "forward" for f in node.body)
        for name, node in classes.items()
    ):
        return None
    bases = {b.id for b in classes[cls].bases if isinstance(b, ast.Name)}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            if bases & {a.name for a in node.names}:
                return node.module
    return None


def derive_lmdeploy(path: Path) -> dict[str, Any]:
    """lmdeploy (PyTorch engine): with MTP no aux layers are set (``config.py`` sets
    ``target_layer_ids`` for DFlash only), so ``spec_decode/base.py``
    ``update_main_model_outputs`` hands the proposer the target's ``hidden_states`` output,
    what the model's ``forward`` returns. ``final_norm`` where the model file ends on
    ``self.norm(hidden_states, residual)`` and its ``get_logits`` applies no norm (EAGLE and
    DFlash draft modules of the map are left out; a model that extends a sibling module's
    without a ``forward`` of its own is read there); ``own``
    where ``get_logits`` applies the norm (the state handed over is before it, e.g.
    DeepSeek-V4's hyper-connection ``_hc_head``): not followed."""
    targets: dict[str, str] = {}
    drafts: dict[str, list[str]] = {}
    proposers: list[str] = []
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        base = z.read("lmdeploy/pytorch/spec_decode/base.py").decode(errors="replace")
        aux = False
        for name in sorted(names):
            if name.startswith("lmdeploy/pytorch/spec_decode/proposers/") and name.endswith(".py"):
                text = z.read(name).decode(errors="replace")
                mine = [p for p in LMDEPLOY_PROPOSER.findall(text) if "mtp" in p]
                proposers += mine
                aux = aux or bool(mine and "aux_hidden" in text)
        module_map = z.read("lmdeploy/pytorch/models/module_map.py").decode(errors="replace")
        texts: dict[str, str] = {}
        for arch, module, cls in LMDEPLOY_MAP.findall(module_map):
            file = f"lmdeploy/pytorch/models/{module}.py"
            if file not in names or re.search(r"eagle|dflash", module):
                continue  # a draft of another method
            if file not in texts:
                texts[file] = z.read(file).decode(errors="replace")
            text = texts[file]
            if _is_mtp(file):
                drafts[arch] = _norms(text)
                continue
            parent = _inherits(text, cls)
            if parent and not NORM_END.search(text):
                up = f"lmdeploy/pytorch/models/{parent}.py"
                text = z.read(up).decode(errors="replace") if up in names else text
            logits = _method_body(text, ("get_logits",)).get("get_logits", "")
            if "norm(" in logits:
                targets[arch] = "own"
            elif NORM_END.search(text):
                targets[arch] = "final_norm"
    return {
        "file": "lmdeploy/pytorch/spec_decode/base.py",
        "main_outputs": "def update_main_model_outputs" in base
        and "output['hidden_states'] = output.pop('aux_hidden_states')" in base,
        "mtp_proposers_ask_aux": aux,
        "proposers": sorted(set(proposers)),
        "drafts": dict(sorted(drafts.items())),
        "targets": dict(sorted(targets.items())),
    }


MLX_HOOKS = (
    "speculative_draft_hidden",
    "speculative_logits_from_hidden",
    "logits_from_hidden",
    "speculative_verify_hidden",
)
HYPER = re.compile(r"\bhc_|hyper_connection")


def _mlx_kind(bodies: dict[str, str]) -> str | None:
    """What mlx-vlm's MTP loop hands the drafter on one target (``speculative/mtp.py``:
    ``_mtp_draft_hidden`` = the target's ``speculative_draft_hidden`` of the verify hidden,
    else the verify hidden itself, the one ``speculative_logits_from_hidden`` projects)."""
    draft = bodies.get("speculative_draft_hidden")
    project = bodies.get("speculative_logits_from_hidden")
    if any(HYPER.search(b) for b in bodies.values()):
        return "streams"
    if project is not None and ".speculative_logits_from_hidden(" in project:
        return None  # hands it to another model's hook (a wrapper): read there
    if draft is not None and ".norm(hidden" in draft:
        return "final_norm"
    if project is None:
        return None
    if "norm(" in project:
        return "residual"
    # projected as it is: the verify hidden must be the target's own output, through its own
    # speculative_verify_hidden (without one, mtp.py runs lm.model(..., skip_final_norm=True))
    return "final_norm" if "speculative_verify_hidden" in bodies else None


def derive_mlx(path: Path) -> dict[str, Any]:
    """mlx-vlm: the MTP loop (``speculative/mtp.py``) hands the drafter
    ``_mtp_draft_hidden(lm, hidden)``: the target's ``speculative_draft_hidden`` of the verify
    hidden where it defines one, else the verify hidden, the same tensor the target's
    ``speculative_logits_from_hidden`` projects to logits. Per model folder: ``final_norm``
    where ``speculative_draft_hidden`` applies the model's norm (Gemma-4: the verify hidden is
    the last layer's output before it) or where ``speculative_logits_from_hidden`` projects
    without a norm the hidden the model's own ``speculative_verify_hidden`` returns (already
    the final norm's output); ``residual`` (the last
    layer's output, before the final norm) where ``speculative_logits_from_hidden`` applies
    the norm itself and no ``speculative_draft_hidden`` does; ``streams`` where these hooks
    handle hyper-connection streams (``hc_``): not followed. A model folder defining none of
    the hooks is not classified (its verify path, ``hidden_states[-1]`` of the model's
    output, is model-specific)."""
    targets: dict[str, str] = {}
    drafters: list[str] = []
    with zipfile.ZipFile(path) as z:
        names = sorted(z.namelist())
        mtp = z.read("mlx_vlm/speculative/mtp.py").decode(errors="replace")
        for name in names:
            parts = name.split("/")
            if name.startswith("mlx_vlm/speculative/drafters/") and len(parts) == 5:
                kind = parts[3]
                if kind.endswith(("_mtp", "_assistant")) and kind not in drafters:
                    drafters.append(kind)
        bodies: dict[str, dict[str, str]] = {}
        for name in names:
            parts = name.split("/")
            if name.startswith("mlx_vlm/models/") and len(parts) == 4 and name.endswith(".py"):
                text = z.read(name).decode(errors="replace")
                if any(f"def {h}" in text for h in MLX_HOOKS):
                    bodies.setdefault(parts[2], {}).update(_method_body(text, MLX_HOOKS))
        for folder, found in bodies.items():
            kind = _mlx_kind(found)
            if kind is not None:
                targets[folder] = kind
    return {
        "file": "mlx_vlm/speculative/mtp.py",
        "draft_hidden_hook": 'getattr(lm, "speculative_draft_hidden", None)' in mtp,
        "drafters": sorted(drafters),
        "targets": dict(sorted(targets.items())),
    }


def _read(z: zipfile.ZipFile, name: str) -> str:
    return z.read(name).decode(errors="replace") if name in z.namelist() else ""


def _mtp_code(z: zipfile.ZipFile, package: str) -> list[str]:
    """The package's Python files that name MTP or NextN."""
    return [
        n
        for n in sorted(z.namelist())
        if n.startswith(f"{package}/")
        and n.endswith(".py")
        and re.search(r"\bmtp\b|_mtp|mtp_|nextn|MTP", _read(z, n))
    ]


def derive_speculators(path: Path) -> dict[str, Any]:
    """speculators: ``--speculator-type mtp`` (``models/mtp/core.py``) captures
    ``target_layer_ids = [num_hidden_layers]`` through vLLM, and ``train/data.py`` keeps the
    last captured layer as ``verifier_last_hidden_states``: vLLM's aux id L, ``residual``."""
    with zipfile.ZipFile(path) as z:
        core = _read(z, "speculators/models/mtp/core.py")
        data = _read(z, "speculators/train/data.py")
        code = [] if core else _mtp_code(z, "speculators")
    last = "return [self.config.transformer_layer_config.num_hidden_layers]" in core
    return {
        "file": "speculators/models/mtp/core.py, speculators/train/data.py",
        "state": "residual" if last and "verifier_last_hidden_states" in data else None,
        "via": "vllm aux id num_hidden_layers",
        "shift": "input_ids[:, step + 1" in core,
        "mtp_code": code,
    }


def derive_modelopt(path: Path) -> dict[str, Any]:
    """nvidia-modelopt: ``EAGLE_MTP_DEFAULT_CFG`` (``speculative/config.py``) trains through
    Megatron (``plugins/megatron_eagle.py``): the base decoder's output, which
    ``output_layer`` projects as it is (so after the block's final layernorm), into the head's
    ``hnorm``; ``hf_mtp``: whether its Hugging Face plugins have an MTP mode."""
    with zipfile.ZipFile(path) as z:
        config = _read(z, "modelopt/torch/speculative/config.py")
        mcore = _read(z, "modelopt/torch/speculative/plugins/megatron_eagle.py")
        code = _mtp_code(z, "modelopt/torch/speculative")
        hf = "".join(
            _read(z, n)
            for n in z.namelist()
            if n.startswith("modelopt/torch/speculative/plugins/hf_")
            or n == "modelopt/torch/speculative/plugins/transformers.py"
        )
    decoder = re.search(
        r"hidden_states = self\.decoder\(.*?logits_sbh, _ = self\.output_layer\(hidden_states",
        mcore,
        re.S,
    )
    mtp = "EAGLE_MTP_DEFAULT_CFG" in config and "use_mtp_layernorm" in config
    return {
        "file": "modelopt/torch/speculative/config.py, plugins/megatron_eagle.py",
        "mtp_config": mtp,
        "state": "final_norm" if mtp and decoder and "self.hnorm(hidden_states)" in mcore else None,
        "via": "the Megatron decoder's output, projected by output_layer as it is",
        "hf_mtp": "use_mtp_layernorm" in hf,
        "mtp_code": [] if mtp else code,
    }


def derive_megatron(path: Path) -> dict[str, Any]:
    """megatron-core: ``GPTModel`` hands ``self.mtp`` the decoder's output, which the
    ``TransformerBlock`` ends with ``final_layernorm``."""
    with zipfile.ZipFile(path) as z:
        block = _read(z, "megatron/core/transformer/transformer_block.py")
        gpt = _read(z, "megatron/core/models/gpt/gpt_model.py")
        code = _mtp_code(z, "megatron/core/models/gpt")
    norm = "hidden_states = self.final_layernorm(hidden_states)" in block
    fed = re.search(r"hidden_states = self\.mtp\(.*?hidden_states=hidden_states,", gpt, re.S)
    return {
        "file": "megatron/core/transformer/transformer_block.py, models/gpt/gpt_model.py",
        "state": "final_norm" if norm and fed else None,
        "via": "the TransformerBlock's output (final_layernorm applied) into the MTP block",
        "mtp_code": [] if norm and fed else code,
    }


def derive_specforge(path: Path) -> dict[str, Any]:
    """SpecForge: no MTP training where none of its files names MTP or NextN."""
    with zipfile.ZipFile(path) as z:
        return {"file": "specforge/", "state": None, "mtp_code": _mtp_code(z, "specforge")}


TRAINERS = (
    ("speculators", "speculators-*.whl", derive_speculators),
    ("nvidia-modelopt", "nvidia_modelopt-*.whl", derive_modelopt),
    ("megatron-core", "megatron_core-*.whl", derive_megatron),
    ("specforge", "specforge-*.whl", derive_specforge),
)


VERSION = re.compile(
    r"(?:sglang|vllm|lmdeploy|mlx_vlm|speculators|nvidia_modelopt|megatron_core|specforge)"
    r"-(.+?)-(?:\d+-)?(?:py3|cp3)"  # a build tag (vllm-0.23.0-2-cp38-...) is not the version
)


def _version(path: Path) -> str:
    found = VERSION.match(path.name)
    assert found, path.name
    return found.group(1)


def _files(folder: Path, pattern: str) -> list[Path]:
    return sorted(folder.glob(pattern), key=lambda p: version_key(_version(p)))


PER_KEY = ("targets", "drafts", "wrappers", "draft_types")


def compact(facts: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The releases, the rows of their scalar facts (``release_scan.fold``), and each
    target's and draft's entry as spans ``[since, until (excl.) or None, value]`` over the
    releases that list it: the same facts as one row per release, without repeating a
    hundred targets per row."""
    versions = [v for v, _ in facts]
    out: dict[str, Any] = {
        "releases": versions,
        "rows": fold([(v, {k: x for k, x in f.items() if k not in PER_KEY}) for v, f in facts]),
    }
    for key in PER_KEY:
        if not any(key in f for _, f in facts):
            continue
        names = sorted({n for _, f in facts for n in f.get(key, {})})
        out[key] = {
            n: [[a, b, x] for a, b, x in spans(versions, {v: f[key].get(n) for v, f in facts})]
            for n in names
        }
    return out


PROJECTS = (
    ("sglang", "sglang-*.whl", derive_sglang),
    ("vllm", "vllm-*.whl", derive_vllm),
    ("lmdeploy", "lmdeploy-*.whl", derive_lmdeploy),
    ("mlx", "mlx_vlm-*.whl", derive_mlx),
)


def table(folder: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"generator": "scripts/gen_mtp_rules.py"}
    for project, pattern, derive_one in PROJECTS:
        files = _files(folder, pattern)
        if not files:
            raise SystemExit(f"{folder}: no {pattern} (scripts/download_method_wheels.py)")
        facts = []
        for path in files:
            facts.append((_version(path), derive_one(path)))
            print(project, _version(path), "read", file=sys.stderr)
        out[project] = compact(facts)
    out["trainers"] = {}
    for project, pattern, derive_one in TRAINERS:
        files = _files(folder, pattern)
        if not files:
            raise SystemExit(f"{folder}: no {pattern} (scripts/download_method_wheels.py)")
        facts = [(_version(p), derive_one(p)) for p in files]
        out["trainers"][project] = compact(facts)
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
