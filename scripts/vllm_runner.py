"""Which model runner a vLLM release starts for an EAGLE-3 target, read from the release wheel
(zipfile and ast; vllm is never imported). Used by gen_vllm_rules.py.

Three shapes occur across the releases:

- ``only``: one runner exists that feeds EAGLE-3 aux states (before the V2 runner sets aux
  layers; from 0.34.0 the V1 runner is removed and ``VLLM_USE_V2_MODEL_RUNNER=0`` is an error);
- ``env``: ``VLLM_USE_V2_MODEL_RUNNER`` with a fixed default in ``envs.py``;
- ``auto``: the variable defaults to unset and ``VllmConfig.use_v2_model_runner`` decides. The
  release's own property (and the methods and module-level lists it calls) is compiled and
  *run* on stub configs: an EAGLE-3 speculative config, CUDA with Triton, tensor parallel 1,
  each served architecture with its MoE and hybrid flags. What flips it back to V1 (the
  features V2 does not support) is read from the strings the release appends to its list.
"""

from __future__ import annotations

import ast
import builtins
import copy
import re
from collections.abc import Callable
from typing import Any

from vllm_capture import MODELS, Release, _bases, functions, inherits

ENV = "VLLM_USE_V2_MODEL_RUNNER"
CONFIG = "vllm/config/vllm.py"


class _Ns:
    """A config object: the attributes given; any other reads as None."""

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return None


class _Stub:
    """Stands in for a module, a logger or an enum: every attribute and call is itself."""

    def __getattr__(self, name: str) -> _Stub:
        return self

    def __call__(self, *args: object, **kwargs: object) -> _Stub:
        return self


class _Platform:
    """CUDA: not ROCm, not unspecified."""

    def __getattr__(self, name: str) -> Callable[..., bool]:
        return lambda *a, **k: name in {"is_cuda", "is_cuda_alike"}


class _NoImports(ast.NodeTransformer):
    """In-function imports become ``pass``: the names come from the stub globals."""

    def visit_Import(self, node: ast.Import) -> ast.Pass:
        return ast.Pass()

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.Pass:
        return ast.Pass()


def _compile(fn: ast.FunctionDef, scope: dict[str, Any]) -> Callable[..., Any]:
    fn = _NoImports().visit(copy.deepcopy(fn))
    fn.decorator_list, fn.returns = [], None
    for arg in [*fn.args.args, *fn.args.kwonlyargs]:
        arg.annotation = None
    module = ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[]))
    exec(compile(module, "<vllm>", "exec"), scope)
    function: Callable[..., Any] = scope.pop(fn.name)
    return function


def _config_class(release: Release) -> ast.ClassDef | None:
    tree = release.tree(CONFIG)
    for node in tree.body if tree else ():
        if isinstance(node, ast.ClassDef) and node.name == "VllmConfig":
            return node
    return None


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _env_default(release: Release) -> str | None:
    """``"v1"``/``"v2"``: the variable's fixed default; ``"unset"``; None: no such variable."""
    text = release.text("vllm/envs.py") or ""
    m = re.search(
        rf'"{ENV}":\s*lambda:[^\n]*\n?[^\n]*os\.getenv\(\s*"{ENV}",\s*("(\d)"|None)', text
    )
    if m is None:
        return None
    if m.group(2) is None:
        return "unset"
    return "v2" if m.group(2) == "1" else "v1"


def _scope(release: Release, cls: ast.ClassDef) -> dict[str, Any]:
    """Module globals for the compiled methods: stubs, the lists and helper functions the
    module defines, and the environment of a default launch (the variable unset)."""
    tree = release.tree(CONFIG)
    assert tree is not None
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - set(dir(builtins))
    scope: dict[str, Any] = {name: _Stub() for name in names}
    scope.update(
        envs=_Ns(**{ENV: None}),
        HAS_TRITON=True,
        current_platform=_Platform(),
        entry_points=lambda **kw: [],
        frozenset=frozenset,
    )
    for node in tree.body:  # module-level constant sets (allow lists), as literals
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", "") in {"frozenset", "set"}
            and len(node.value.args) == 1
        ):
            scope[node.targets[0].id] = frozenset(ast.literal_eval(node.value.args[0]))
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef) and "runner" in fn.name:
            scope[fn.name] = _compile(fn, scope)
    return scope


def _config_type(release: Release, cls: ast.ClassDef) -> type:
    scope = _scope(release, cls)
    attrs: dict[str, Any] = {}
    for fn in cls.body:
        if isinstance(fn, ast.FunctionDef):
            compiled = _compile(fn, scope)
            is_property = any(getattr(d, "id", "") == "property" for d in fn.decorator_list)
            attrs[fn.name] = property(compiled) if is_property else compiled
    attrs["__getattr__"] = lambda self, name: None  # a field the release has and we don't
    return type("VllmConfig", (), attrs)


def _launch(config_type: type, arch: str, moe: bool, hybrid: bool) -> Any:
    """A default EAGLE-3 launch of ``arch`` on one CUDA GPU."""
    draft = _Ns(architectures=["LlamaForCausalLMEagle3"], hf_config=_Ns(), is_moe=False)
    spec = _Ns(
        method="eagle3",
        num_speculative_tokens=3,
        parallel_drafting=False,
        draft_model_config=draft,
        use_heterogeneous_vocab=False,
        enable_adaptive_verification=False,
        is_xpress=lambda: False,
        use_dspark=lambda: False,
        use_eagle=lambda: True,
        uses_dynamic_speculative_decoding=lambda: False,
    )
    model = _Ns(
        architectures=[arch],
        runner_type="generate",
        is_moe=moe,
        is_hybrid=hybrid,
        is_attention_free=False,
        is_diffusion=False,
        use_mla=False,
        hf_config=_Ns(),
        enable_return_routed_experts=False,
    )
    parallel = _Ns(
        pipeline_parallel_size=1,
        tensor_parallel_size=1,
        prefill_context_parallel_size=1,
        decode_context_parallel_size=1,
        data_parallel_size=1,
        distributed_executor_backend="mp",
        use_ubatching=False,
        enable_dbo=False,
        enable_elastic_ep=False,
    )
    config = config_type()
    config.__dict__.update(
        model_config=model,
        speculative_config=spec,
        parallel_config=parallel,
        compilation_config=_Ns(mode="VLLM_COMPILE", pass_config=_Ns(enable_sp=False)),
        cache_config=_Ns(mamba_cache_mode="none"),
        scheduler_config=_Ns(async_scheduling=True),
        attention_config=_Ns(hisparse_config=None),
        lora_config=None,
    )
    return config


def _run(config_type: type, arch: str, moe: bool, hybrid: bool) -> Any:
    """The release's ``use_v2_model_runner`` on a default launch of ``arch``; a stub it
    cannot use (a new method or field it reads) stops the generator with what it was."""
    try:
        return config_type.use_v2_model_runner.fget(_launch(config_type, arch, moe, hybrid))  # type: ignore[attr-defined]
    except (TypeError, AttributeError) as exc:
        raise SystemExit(f"use_v2_model_runner needs a look: {type(exc).__name__}: {exc}") from exc


def _fallbacks(cls: ast.ClassDef) -> list[str]:
    """What the release says V2 does not support (each makes it start V1 instead)."""
    fn = _method(cls, "_get_v2_model_runner_unsupported_features")
    found: list[str] = []
    for node in ast.walk(fn) if fn else ():
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", "") == "append"
            and node.args
            and isinstance(node.args[0], ast.Constant | ast.JoinedStr)
        ):
            arg = node.args[0]
            text = arg.value if isinstance(arg, ast.Constant) else ast.unparse(arg)[2:-1]
            found.append(str(text))
    return found


def _v2_only_names(release: Release) -> list[str]:
    """Module-level architecture sets in config/vllm.py that name runner defaults."""
    tree = release.tree(CONFIG)
    return sorted(
        n.targets[0].id
        for n in (tree.body if tree else ())
        if isinstance(n, ast.Assign)
        and isinstance(n.targets[0], ast.Name)
        and "RUNNER" in n.targets[0].id
        and "ARCH" in n.targets[0].id
    )


def choice(
    release: Release, runners: list[str], flags: dict[str, tuple[bool, bool]]
) -> dict[str, Any]:
    """How ``release`` picks the runner for an EAGLE-3 launch: the default per served
    architecture (``flags``: arch -> (moe, hybrid)), and what changes it."""
    if len(runners) == 1:
        only = runners[0]
        gone = "the V1 runner is removed" if only == "v2" else "only V1 sets aux layers"
        return {"how": "only", "default": only, "why": gone}
    env = _env_default(release)
    cls = _config_class(release)
    prop = _method(cls, "use_v2_model_runner") if cls else None
    if env in {"v1", "v2"} or (env is None and prop is None):
        default = env or "v1"
        set_to = "1" if default == "v2" else "0"
        return {"how": "env", "default": default, "why": f"{ENV} defaults to {set_to}"}
    if prop is None or cls is None or env != "unset":
        raise SystemExit(f"runner choice not understood: {ENV} {env}, property {prop}")
    config_type = _config_type(release, cls)
    picked: dict[str, str] = {}
    for arch, (moe, hybrid) in sorted(flags.items()):
        got = _run(config_type, arch, moe, hybrid)
        if type(got) is not bool:
            raise SystemExit(f"use_v2_model_runner gave {got!r} for {arch}")
        picked[arch] = "v2" if got else "v1"
    plain = _run(config_type, "X", False, False)
    default = "v2" if plain else "v1"
    # why an architecture differs: its MoE/hybrid flags where it falls back to V1, else the
    # release's architecture list (it starts V2 where the default is V1, or the reverse)
    odd = {
        a: (
            ("moe" if flags[a][0] else "") + ("+hybrid" if flags[a][1] else "") if r == "v1" else ""
        )
        or "listed"
        for a, r in picked.items()
        if r != default
    }
    return {
        "how": "auto",
        "default": default,
        "why": f"{ENV} unset: VllmConfig.use_v2_model_runner decides",
        "others": {a: f"{picked[a]}:{why.strip('+')}" for a, why in sorted(odd.items())},
        "lists": _v2_only_names(release),
        "fallbacks": _fallbacks(cls),
    }


def flags(release: Release, module: str, cls: str, capture_file: str | None) -> tuple[bool, bool]:
    """(moe, hybrid) of an architecture, from its code: MoE when its model file or the one
    whose layer loop serves it builds ``FusedMoE`` layers (vLLM itself counts the target
    config's experts); hybrid when its class is ``IsHybrid`` (vLLM's own flag)."""
    texts = [release.text(module) or ""]
    if capture_file:
        texts.append(release.text(MODELS + capture_file) or "")
    moe = "moe" in cls.lower() or any("FusedMoE" in t for t in texts)
    return moe, _hybrid(release, module, cls)


def _hybrid(release: Release, module: str, name: str) -> bool:
    """Whether the class is, or inherits from, a hybrid (``IsHybrid``, ``is_hybrid = True``)."""
    return inherits(release, module, name, _says_hybrid)


def _says_hybrid(cls: ast.ClassDef) -> bool:
    """Whether the class itself bases on ``IsHybrid`` or sets ``is_hybrid`` true."""
    if "IsHybrid" in _bases(cls):
        return True
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign | ast.Assign):
            target = stmt.target if isinstance(stmt, ast.AnnAssign) else stmt.targets[0]
            if getattr(target, "id", "") == "is_hybrid" and getattr(stmt.value, "value", 0):
                return True
    return False


__all__ = ["choice", "flags", "functions"]
