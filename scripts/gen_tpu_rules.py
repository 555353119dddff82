"""Derive vLLM tpu-inference's EAGLE-3 rules from its released wheels; write
engines/tpu_rules.json.

    python scripts/gen_tpu_rules.py WHEEL_DIR [--out FILE] [--check] [--download]

``--download`` fetches every tpu-inference wheel (pure Python, about 2 MB each). Each
``tpu_inference-X-*.whl`` is read with zipfile and ast (jax and vllm are never imported):

- the model path a default launch takes per architecture (``models/common/model_loader.py``:
  ``MODEL_IMPL_TYPE=auto`` resolves to the JAX path, ``flax_nnx``, for architectures in
  ``_MODEL_REGISTRY`` unless they are in ``_VLLM_PREFERRED_ARCHITECTURES``; the others run
  vLLM's own model code through torchax);
- per JAX model class with EAGLE-3: its ``get_eagle3_aux_hidden_state_layers``, compiled alone
  and *run* on stub models (which ids, whether it reads any config at all), and where its
  ``__call__`` loop captures (before layer i: ``residual:i``);
- per release, what decides every other case: the JAX registry (``jax``: an architecture in
  it, not preferred, runs its JAX model, which without EAGLE-3 returns no aux states; one not
  in it falls back to vLLM's code after resolving to ``flax_nnx``), the EAGLE-3 draft classes
  in it (``drafts``: a draft resolves to ``flax_nnx``), whether
  ``spec_decode/jax/eagle3.py`` asserts aux states at the first request (``asserts``: "EAGLE3
  requires auxiliary hidden states from the target model."), whether ``DRAFT_MODEL_IMPL_TYPE``
  exists (``envs.py``) and ``Eagle3Proposer.load_model`` raises ValueError when the draft's
  and the target's resolved implementations differ (``impl_check``), and how the vLLM-path
  wrapper (``models/vllm/vllm_model_wrapper.py``) feeds aux states (``vllm_aux``: ``none``,
  its step returns ``[]``; ``v2_helper``: it calls vLLM's
  ``v1/worker/gpu/spec_decode/eagle/eagle3_utils.set_eagle3_aux_hidden_state_layers`` on the
  target, the V2 model runner's reader).

Per release, its DFlash path (``dflash``; None before any DFlash code), read the same way:
whether ``runner/tpu_runner.py`` builds ``DFlashProposer`` for method ``dflash``
(``runner``), the draft classes the JAX registry maps to ``models/jax/dflash.py``
(``drafts``), how many states that draft's ``fc`` takes (``fc``: the
``dflash_config.target_layer_ids`` list's length, else ``num_target_layers``, else
``num_hidden_layers``), whether ``DFlashProposer.load_model`` raises ValueError when the draft's
and the target's implementations differ (``impl_check``) and ``prepare_inputs`` asserts aux
states (``asserts``), whether the vLLM-path wrapper returns aux states for DFlash
(``vllm_aux``: ``none`` where it returns them for ``eagle3`` only), and per JAX target class
with ``get_dflash_aux_hidden_state_layers`` (``targets``): that function *run* on stub configs
(which key it reads, its fallback without one) and where its ``__call__`` loop appends the
states (after layer i: ``residual:i+1``). ``dflash2`` / ``dspark``: whether any file of the
wheel names them; ``mtp``: whether the speculative-decoding manager feeds an MTP draft the
target step's ``hidden_states`` output; ``mtp_targets`` (where it does): per architecture of
the JAX registry, what its model returns as that output, followed through the
``self.<attr>(...)`` calls of the ``__call__`` methods (``final_norm`` where one ends on
``x = self.norm(x)`` and returns it; ``unread`` otherwise).

A structure the script does not recognise makes it exit 1. ``--check`` compares with the
committed file and exits 1 on any difference.
"""

from __future__ import annotations

import ast
import re
import sys
import types
from pathlib import Path
from typing import Any

import release_scan
from release_scan import Scan, Wheel, compile_alone, grouped, rows

OUT = Path(__file__).resolve().parents[1] / "pytest_eagle_contract/engines/tpu_rules.json"
LOADER = "tpu_inference/models/common/model_loader.py"


def _literal_set(tree: ast.Module, name: str) -> set[str]:
    for node in ast.walk(tree):
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign):
            target = node.targets[0]
        if getattr(target, "id", "") == name and isinstance(node, ast.Assign | ast.AnnAssign):
            value = node.value
            if isinstance(value, ast.Call) and value.args:
                value = value.args[0]
            return {e.value for e in getattr(value, "elts", []) if isinstance(e, ast.Constant)}
    return set()


def _registry(tree: ast.Module) -> dict[str, tuple[str, str]]:
    """architecture -> (module path, class) from ``_MODEL_REGISTRY[...] = Class`` and the
    imports in the same function."""
    imports: dict[str, str] = {}
    out: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("tpu_inference")
        ):
            for alias in node.names:
                imports[alias.asname or alias.name] = (
                    node.module.replace(".", "/") + ".py",
                    alias.name,
                )  # type: ignore[assignment]
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Subscript)
            and getattr(node.targets[0].value, "id", "") == "_MODEL_REGISTRY"
            and isinstance(node.targets[0].slice, ast.Constant)
            and isinstance(node.value, ast.Name)
            and node.value.id in imports
        ):
            out[node.targets[0].slice.value] = imports[node.value.id]  # type: ignore[assignment]
    return out


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _run_default(fn: ast.FunctionDef) -> str:
    """Run the release's own default-ids method on stub models; ``reads``: whether it takes
    anything but ``self`` (a config it could read the draft's ids from)."""
    if [a.arg for a in fn.args.args] != ["self"]:
        raise SystemExit(f"{fn.name} takes {[a.arg for a in fn.args.args]}: not understood")
    default_ids = compile_alone(fn, "<tpu>")
    got = {
        n: tuple(default_ids(types.SimpleNamespace(layers=[None] * n, num_layers=n)))
        for n in (32, 61)
    }
    if all(got[n] == (2, n // 2, n - 3) for n in got):
        return "2,L//2,L-3"
    raise SystemExit(f"default ids {got} not understood")


def _capture_site(cls: ast.ClassDef) -> str:
    """Where the ``__call__`` layer loop appends the EAGLE-3 states: ``input`` (before layer
    i runs: the residual stream entering it) or ``output``."""
    call = _method(cls, "__call__")
    for loop in (n for n in ast.walk(call) if isinstance(n, ast.For)) if call else ():
        texts = [ast.unparse(stmt) for stmt in loop.body]
        appends = [k for k, t in enumerate(texts) if "aux_hidden_states.append" in t]
        eagle = [k for k in appends if "eagle3" in texts[k]] or appends
        called = [k for k, t in enumerate(texts) if re.search(r"=\s*layer\(", t)]
        if len(eagle) == 1 and len(called) == 1:
            return "input" if eagle[0] < called[0] else "output"
    raise SystemExit(f"{cls.name}: EAGLE-3 capture loop not understood")


def derive(path: Path) -> dict[str, Any] | None:
    wheel = Wheel(path)
    loader = wheel.tree(LOADER)
    if loader is None:
        return None
    preferred = _literal_set(loader, "_VLLM_PREFERRED_ARCHITECTURES")
    archs: dict[str, Any] = {}
    for arch, (module, name) in sorted(_registry(loader).items()):
        tree = wheel.tree(module)
        cls = next(
            (
                n
                for n in (tree.body if tree else [])
                if isinstance(n, ast.ClassDef) and n.name == name
            ),
            None,
        )
        holder = None
        for c in ast.walk(tree) if tree else ():
            if isinstance(c, ast.ClassDef) and _method(c, "get_eagle3_aux_hidden_state_layers"):
                holder = c
        if cls is None or holder is None:
            continue
        fn = _method(holder, "get_eagle3_aux_hidden_state_layers")
        assert fn is not None
        archs[arch] = {
            "path": "vllm" if arch in preferred else "jax",
            "file": module.removeprefix("tpu_inference/"),
            "default": _run_default(fn),
            "reads_ids": False,
            "capture": _capture_site(holder),
        }
    if not archs:
        return None
    registry = sorted(_registry(loader))
    return {
        "archs": archs,
        "preferred": sorted(preferred),
        "jax": [a for a in registry if not a.startswith("Eagle3")],
        "drafts": [a for a in registry if a.startswith("Eagle3")],
        **_paths(wheel),
        "dflash": _dflash(wheel, loader),
        "dflash2": _names(wheel, "dflash2"),
        "dspark": _names(wheel, "dspark"),
        "mtp": _mtp(wheel),
        "mtp_targets": _mtp_targets(wheel, loader) if _mtp(wheel) else None,
    }


_RUNNER = "tpu_inference/runner/tpu_runner.py"
_DRAFTER = "tpu_inference/spec_decode/jax/dflash.py"
_DRAFT_MODEL = "tpu_inference/models/jax/dflash.py"
_WRAPPER = "tpu_inference/models/vllm/vllm_model_wrapper.py"
_MANAGER = "tpu_inference/runner/speculative_decoding_manager.py"
_DFLASH_IMPL = "Draft model implementation must match target model."


def _names(wheel: Wheel, word: str) -> bool:
    """Whether any Python file of the wheel names ``word`` (any case)."""
    pattern = re.compile(word, re.I)
    return any(n.endswith(".py") and pattern.search(n + (wheel.text(n) or "")) for n in wheel.names)


def _mtp(wheel: Wheel) -> bool:
    """Whether the manager feeds an MTP draft ``(hidden_states, )``, the target's output."""
    text = wheel.text(_MANAGER) or ""
    return bool(
        re.search(
            r'method == "mtp":\s*\n\s*aux_hidden_states_for_drafter = \(hidden_states, \)', text
        )
    )


def _imports(tree: ast.Module, module: str) -> dict[str, tuple[str, str]]:
    """name -> (file, class) for the names ``module`` defines or imports from tpu_inference."""
    out = {n.name: (module, n.name) for n in tree.body if isinstance(n, ast.ClassDef)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tpu_inference"):
            for alias in node.names:
                out[alias.asname or alias.name] = (
                    str(node.module).replace(".", "/") + ".py",
                    alias.name,
                )
    return out


def _class(wheel: Wheel, where: tuple[str, str]) -> tuple[ast.ClassDef, ast.Module] | None:
    tree = wheel.tree(where[0])
    for node in tree.body if tree else ():
        if isinstance(node, ast.ClassDef) and node.name == where[1]:
            return node, tree
    return None


def _attribute_class(
    wheel: Wheel, cls: ast.ClassDef, tree: ast.Module, module: str, attr: str
) -> tuple[str, str] | None:
    """The class ``__init__`` builds ``self.<attr>`` as (``self.<attr> = Cls(...)``)."""
    init = _method(cls, "__init__")
    names = _imports(tree, module)
    for node in ast.walk(init) if init else ():
        if (
            isinstance(node, ast.Assign)
            and ast.unparse(node.targets[0]) == f"self.{attr}"
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id in names
        ):
            return names[node.value.func.id]
    return None


_DELEGATE = re.compile(r"self\.((?:\w+\.)*\w+)")


def _mtp_state(wheel: Wheel, where: tuple[str, str], depth: int = 0) -> str:
    """What the registered class's ``__call__`` returns as its hidden states (the second item
    of its return): ``final_norm`` where, followed through the ``self.<attr>(...)`` call that
    gives it (each attribute's class from ``__init__``), a ``__call__`` ends on
    ``x = self.norm(x)`` and returns ``x`` unchanged; ``unread`` otherwise."""
    found = _class(wheel, where)
    if found is None or depth > 3:
        return "unread"
    cls = found[0]
    call = _method(cls, "__call__")
    if call is None:
        return "unread"
    returns = [n for n in ast.walk(call) if isinstance(n, ast.Return) and n.value is not None]
    if len(returns) != 1 or not isinstance(returns[0].value, ast.Tuple):
        return "unread"
    value = returns[0].value.elts[1] if len(returns[0].value.elts) > 1 else None
    if not isinstance(value, ast.Name):
        return "unread"
    out = value.id
    assigns = [
        n
        for n in call.body
        if isinstance(n, ast.Assign)
        and out
        in [
            e.id
            for t in n.targets
            for e in (t.elts if isinstance(t, ast.Tuple) else [t])
            if isinstance(e, ast.Name)
        ]
    ]
    if not assigns:
        return "unread"
    last = assigns[-1]
    text = ast.unparse(last.value)
    if re.fullmatch(rf"self\.norm\({out}\)", text):
        return "final_norm"
    delegate = _DELEGATE.match(text)
    if not (
        isinstance(last.value, ast.Call) and delegate and text.startswith(delegate.group(0) + "(")
    ):
        return "unread"
    # later statements may only wrap the state for the next pipeline stage
    for stmt in call.body[call.body.index(last) + 1 :]:
        if isinstance(stmt, ast.If) and "is_last_rank" in ast.unparse(stmt.test):
            continue
        if out in ast.unparse(stmt) and not isinstance(stmt, ast.Return):
            return "unread"
    attrs = delegate.group(1).split(".")
    module, (cur_cls, cur_tree) = where[0], found
    target: tuple[str, str] | None = None
    for attr in attrs:
        target = _attribute_class(wheel, cur_cls, cur_tree, module, attr)
        if target is None:
            return "unread"
        nxt = _class(wheel, target)
        if nxt is None:
            return "unread"
        module, (cur_cls, cur_tree) = target[0], nxt
    return _mtp_state(wheel, target, depth + 1) if target else "unread"


def _mtp_targets(wheel: Wheel, loader: ast.Module) -> dict[str, str]:
    """Per architecture of the JAX registry (drafts left out): the state its model hands an
    MTP draft on the JAX path (``_mtp_state``)."""
    return {
        arch: _mtp_state(wheel, where)
        for arch, where in sorted(_registry(loader).items())
        if not arch.startswith(("Eagle3", "DFlash")) and "MTP" not in arch
    }


def _stub_config(num_layers: int, draft: dict[str, Any]) -> types.SimpleNamespace:
    draft_hf = types.SimpleNamespace(**draft)
    return types.SimpleNamespace(
        speculative_config=types.SimpleNamespace(
            method="dflash", draft_model_config=types.SimpleNamespace(hf_config=draft_hf)
        ),
        model_config=types.SimpleNamespace(
            hf_config=types.SimpleNamespace(num_hidden_layers=num_layers)
        ),
    )


def _run_dflash_ids(fn: ast.FunctionDef, name: str) -> dict[str, str]:
    """Run the release's ``get_dflash_aux_hidden_state_layers`` on stub configs: the key it
    reads and its fallback without one."""
    if [a.arg for a in fn.args.args] != ["self", "vllm_config"]:
        raise SystemExit(f"{name}: {fn.name} takes {[a.arg for a in fn.args.args]}")
    ids = compile_alone(fn, "<tpu-dflash>")
    L = 36
    listed = list(ids(None, _stub_config(L, {"dflash_config": {"target_layer_ids": [7, 3]}})))
    top = list(ids(None, _stub_config(L, {"target_layer_ids": [7, 3], "num_target_layers": 4})))
    last_n = list(ids(None, _stub_config(L, {"num_target_layers": 4})))
    every = list(ids(None, _stub_config(L, {})))
    if listed != [7, 3]:
        raise SystemExit(f"{name}: dflash_config.target_layer_ids read as {listed}")
    if top != last_n or last_n != list(range(L - 4, L)) or every != list(range(L)):
        raise SystemExit(f"{name}: fallback {top}, {last_n}, {every} not understood")
    return {"keys": "dflash_config.target_layer_ids", "fallback": "range(L-n,L)"}


def _dflash_capture(cls: ast.ClassDef, name: str) -> str:
    """Where the ``__call__`` loop appends the DFlash states: ``output`` (after layer i)."""
    call = _method(cls, "__call__")
    for loop in (n for n in ast.walk(call) if isinstance(n, ast.For)) if call else ():
        texts = [ast.unparse(stmt) for stmt in loop.body]
        appends = [k for k, t in enumerate(texts) if "aux_hidden_states.append" in t]
        mine = [k for k in appends if "dflash" in texts[k]]
        if not mine:
            mine = [k for k in appends if "eagle3" not in texts[k]]
        called = [k for k, t in enumerate(texts) if re.search(r"=\s*layer\(", t)]
        if len(mine) == 1 and len(called) == 1:
            return "input" if mine[0] < called[0] else "output"
    raise SystemExit(f"{name}: {cls.name}'s DFlash capture loop not understood")


def _dflash(wheel: Wheel, loader: ast.Module) -> dict[str, Any] | None:
    name = f"tpu-inference {wheel.version}"
    model = wheel.text(_DRAFT_MODEL)
    if model is None:
        return None
    runner = bool(
        re.search(
            r'method == "dflash":\s*\n\s*self\.drafter = DFlashProposer\(',
            wheel.text(_RUNNER) or "",
        )
    )
    drafts = sorted(a for a, (m, _) in _registry(loader).items() if m == _DRAFT_MODEL)
    fc = re.search(
        r'target_layer_ids = dflash_config\.get\("target_layer_ids", None\)\s*\n'
        r'\s*num_target_layers = getattr\(hf_config, "num_target_layers", None\)\s*\n'
        r"\s*if target_layer_ids is not None:\s*\n"
        r"\s*num_context_features = len\(target_layer_ids\)\s*\n"
        r"\s*elif num_target_layers is not None:\s*\n"
        r"\s*num_context_features = num_target_layers\s*\n"
        r"\s*else:\s*\n\s*num_context_features = hf_config\.num_hidden_layers",
        model,
    )
    drafter = wheel.text(_DRAFTER) or ""
    wrapper = wheel.text(_WRAPPER) or ""
    targets: dict[str, Any] = {}
    for arch, (module, _) in sorted(_registry(loader).items()):
        tree = wheel.tree(module)
        for c in ast.walk(tree) if tree else ():
            fn = (
                _method(c, "get_dflash_aux_hidden_state_layers")
                if isinstance(c, ast.ClassDef)
                else None
            )
            if fn is not None and isinstance(c, ast.ClassDef):
                targets[arch] = {
                    "file": module.removeprefix("tpu_inference/"),
                    **_run_dflash_ids(fn, f"{name} {module}"),
                    "capture": _dflash_capture(c, f"{name} {module}"),
                }
    if runner and (fc is None or not drafts or not targets):
        raise SystemExit(f"{name}: a DFlash runner path without a draft, fc or target read")
    eagle3_only = re.search(
        r'method == "eagle3":\s*\n\s*output, aux_hidden_states = jax_view', wrapper
    )
    if runner and ('"dflash"' in wrapper or not eagle3_only):
        raise SystemExit(f"{name}: how the vLLM-path wrapper feeds DFlash is not understood")
    return {
        "runner": runner,
        "drafts": drafts,
        "fc": "list,num_target_layers,num_hidden_layers" if fc else None,
        "impl_check": _DFLASH_IMPL in drafter,
        "asserts": "assert aux_hidden_states is not None and len(aux_hidden_states) > 0" in drafter,
        "vllm_aux": "none",
        "targets": targets,
    }


_ASSERTS = "EAGLE3 requires auxiliary hidden states from the target model."
_IMPL = "The implementation of the draft model must be the same as the target model."
_HELPER = "vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils"


def _paths(wheel: Wheel) -> dict[str, Any]:
    """What the drafter asserts, the draft/target implementation check, and how the vLLM-path
    wrapper feeds aux states (the module docstring)."""
    name = f"tpu-inference {wheel.version}"
    drafter = wheel.text("tpu_inference/spec_decode/jax/eagle3.py") or ""
    envs = wheel.text("tpu_inference/envs.py") or ""
    wrapper = wheel.text("tpu_inference/models/vllm/vllm_model_wrapper.py") or ""
    asserts = bool(
        re.search(rf"assert aux_hidden_states[^\n]*\n?[^\n]*{re.escape(_ASSERTS)}", drafter)
    )
    check = bool(re.search(rf"raise ValueError\(\s*\"{re.escape(_IMPL)}\"", drafter))
    draft_env = "DRAFT_MODEL_IMPL_TYPE" in envs
    if check != draft_env:
        raise SystemExit(f"{name}: the implementation check and DRAFT_MODEL_IMPL_TYPE disagree")
    if _HELPER in wrapper and re.search(
        r"not self\.is_draft_model:\s*\n\s*set_eagle3_aux_hidden_state_layers\(", wrapper
    ):
        aux = "v2_helper"
    elif "aux_hidden_state" not in wrapper and re.search(
        r"return new_kv_caches, \w+, \[\]", wrapper
    ):
        aux = "none"
    else:
        raise SystemExit(f"{name}: how the vLLM-path wrapper feeds aux states is not understood")
    if not asserts:
        raise SystemExit(f"{name}: the drafter's aux-states assertion not found")
    return {"asserts": asserts, "impl_check": check, "vllm_aux": aux}


def tables(releases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "releases": list(releases),
        "rows": rows(releases, {"archs"}),
        "archs": grouped(releases, "archs"),
    }


SCAN = Scan("tpu-inference", "tpu_inference-{version}-*.whl", OUT, derive, tables)


def main(argv: list[str] | None = None) -> int:
    return release_scan.main(SCAN, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
