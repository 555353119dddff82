"""Derive vLLM's EAGLE-3 rules from its released wheels; write engines/vllm_rules.json.

    python scripts/gen_vllm_rules.py WHEEL_DIR [--out FILE] [--check] [--download]

``--download`` only fetches every release from 0.8.4 (the last without EAGLE-3) on that
the index lists (``pip index versions vllm``, ``pip download --no-deps``), keeping wheels
already there: about 400 MB each.

Reads every ``vllm-X-*.whl`` in WHEEL_DIR with zipfile and ast (vllm is never imported):

- which model runners set the target's aux layers (``v1``: v1/worker/gpu_model_runner.py,
  ``v2``: v1/worker/gpu/model_runner.py), and the draft config.json keys each reads, in
  order: found by *running* the release's own reader (``*aux_layers_from_config``) on stub
  configs holding each spelling it names, top level and under ``eagle_config``;
- the runner a default EAGLE-3 launch starts, per architecture (``vllm_runner.py``: the only
  one that feeds aux states, ``VLLM_USE_V2_MODEL_RUNNER``'s fixed default, or the release's own
  ``VllmConfig.use_v2_model_runner`` run on stub configs), and what makes it start the other;
- the default ids, by running the release's ``get_eagle3_*aux_hidden_state_layers``;
- per served architecture (registry classes that support EAGLE-3), the capture rule of its
  layer loop: ``plus`` (id k captures residual:k+plus), what id 0 does (``embed``: the
  embedding output; ``crash``: ``hidden_states + residual`` with residual None) and the
  largest id the loop reaches;
- the draft fc width (``hidden_size * N`` in llama_eagle3.py).

``--check`` compares with the existing file and exits 1 on any difference.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import release_scan
from release_scan import Scan, compile_alone, grouped, rows, version_key
from vllm_capture import MODELS, Release, archs, functions, imported_modules, registry
from vllm_runner import choice, flags

OUT = Path(__file__).resolve().parents[1] / "pytest_eagle_contract/engines/vllm_rules.json"
RUNNERS = {"v1": "vllm/v1/worker/gpu_model_runner.py", "v2": "vllm/v1/worker/gpu/model_runner.py"}
_PROBE_IDS = (1, 2, 3)


class _Stub:
    """Stands in for anything the reader touches besides the config (logger, types)."""

    def __getattr__(self, name: str) -> _Stub:
        return self

    def __call__(self, *args: object, **kwargs: object) -> _Stub:
        return self


def _compile(fn: ast.FunctionDef) -> Callable[..., Any]:
    """One function of a release, annotations stripped, run with stubs for its globals."""
    return compile_alone(fn, "<vllm>", _Stub)


def _reader(release: Release, runner_file: str) -> ast.FunctionDef | None:
    """The function that reads the aux ids from the draft config, in the runner or a module
    it imports."""
    tree = release.tree(runner_file)
    assert tree is not None
    for name in [runner_file, *imported_modules(tree, "")]:
        sub = release.tree(name)
        for fn in functions(sub) if sub else ():
            if fn.name.endswith("aux_layers_from_config"):
                return fn
    return None


def _call_reader(fn: ast.FunctionDef, config: dict[str, Any]) -> Any:
    hf_config = types.SimpleNamespace(**config)
    spec = types.SimpleNamespace(draft_model_config=types.SimpleNamespace(hf_config=hf_config))
    arg = types.SimpleNamespace(speculative_config=spec) if fn.args.args[0].arg == "self" else spec
    return _compile(fn)(arg)


def _strings(fn: ast.FunctionDef) -> set[str]:
    return {
        n.value if isinstance(n, ast.Constant) else n.attr
        for n in ast.walk(fn)
        if (isinstance(n, ast.Constant) and isinstance(n.value, str))
        or isinstance(n, ast.Attribute)
    }


def _keys(fn: ast.FunctionDef) -> list[tuple[str, int]]:
    """The dotted keys the reader takes ids from, in the order it prefers them, each with
    what it adds to the ids (DFlash's ``target_layer_ids`` get +1)."""
    names = _strings(fn)
    spellings = sorted(s for s in names if s.endswith("layer_ids"))
    containers = sorted(s for s in names if s.endswith("_config") and s != "hf_config")
    candidates = [*spellings, *(f"{c}.{s}" for c in containers for s in spellings)]
    read = [k for k in candidates if _read_by(fn, [k])]
    order: list[tuple[str, int]] = []
    while read:
        n, shift = _read_by(fn, read) or (0, 0)
        order.append((read.pop(n), shift))
    return order


def _config(keys: list[str]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for n, key in enumerate(keys):
        outer, _, inner = key.rpartition(".")
        (config.setdefault(outer, {}) if outer else config)[inner] = [
            i + 10 * n for i in _PROBE_IDS
        ]
    return config


def _read_by(fn: ast.FunctionDef, keys: list[str]) -> tuple[int, int] | None:
    """Which of ``keys`` (each holding its own ids) the reader returned, and the shift it
    applied, or None."""
    got = _call_reader(fn, _config(keys))
    if not got:
        return None
    n, shift = divmod(got[0] - _PROBE_IDS[0], 10)
    assert list(got) == [i + 10 * n + shift for i in _PROBE_IDS], got
    return n, shift


def _default_ids(release: Release) -> str:
    for name in (MODELS + "interfaces.py", MODELS + "llama.py"):
        tree = release.tree(name)
        for fn in functions(tree) if tree else ():
            if fn.name in {
                "get_eagle3_default_aux_hidden_state_layers",
                "get_eagle3_aux_hidden_state_layers",
            } and any(isinstance(n, ast.Return) and n.value for n in ast.walk(fn)):
                got = {L: tuple(_compile(fn)(_layers_stub(L))) for L in (32, 61)}
                if all(got[L] == (2, L // 2, L - 3) for L in got):
                    return "2,L//2,L-3"
                return repr(got)
    raise SystemExit("no default-ids function found")


def _layers_stub(num_layers: int) -> types.SimpleNamespace:
    model = types.SimpleNamespace(layers=[None] * num_layers)
    return types.SimpleNamespace(
        model=model, config=types.SimpleNamespace(num_hidden_layers=num_layers)
    )


def _fc(release: Release) -> dict[str, Any]:
    """How many aux states the draft's fc takes: ``from`` (config keys, the first present
    wins; ``len:K`` is the length of the ids under K), else ``default``."""
    text = release.text(MODELS + "llama_eagle3.py") or ""
    if "num_aux_hidden_states" not in text:
        widths = set(re.findall(r"hidden_size \* (\d+)", text))
        if len(widths) != 1:
            raise SystemExit(f"fc width not found in llama_eagle3.py: {widths}")
        return {"from": [], "default": int(widths.pop())}
    outer = re.search(r'getattr\(self\.config, "(\w+_config)"', text)
    inner = re.search(r'\.get\("(\w+layer_ids)"\)', text)
    default = re.search(r"if layer_ids else (\d+)", text)
    if not (outer and inner and default):
        raise SystemExit("fc width rule not understood in llama_eagle3.py")
    keys = ["num_aux_hidden_states", f"len:{outer.group(1)}.{inner.group(1)}"]
    return {"from": keys, "default": int(default.group(1))}


def runner_keys(release: Release) -> dict[str, list[tuple[str, int]]]:
    out = {}
    for name, path in RUNNERS.items():
        text = release.text(path)
        if text is None or not re.search(r"set_(eagle3_)?aux_hidden_state_layers\(", text):
            continue
        fn = _reader(release, path)
        out[name] = [] if fn is None else _keys(fn)
    return out


def derive(wheel: Path) -> dict[str, Any] | None:
    """One release's rules, or None when it has no EAGLE-3."""
    read = _derive_cached(wheel)
    if read is None:
        return None
    release = Release(wheel)
    served, runners = read["archs"], read["runners"]
    known = registry(release)
    arch_flags = {
        a: flags(release, *known[a], rule.get("file")) for a, rule in served.items() if a in known
    }
    picked = choice(release, list(runners), arch_flags)
    return {**read, "default_runner": picked["default"], "runner_choice": picked}


def _read(wheel: Path) -> dict[str, Any] | None:
    """The slow part of ``derive`` (every model file's layer loop): keys, defaults, fc, archs."""
    release = Release(wheel)
    if MODELS + "llama_eagle3.py" not in release.names:
        return None
    return {
        "runners": runner_keys(release),
        "default_ids": _default_ids(release),
        "fc": _fc(release),
        "archs": archs(release),
    }


def _derive_cached(wheel: Path) -> dict[str, Any] | None:
    """``_read``, kept beside the wheel (``.read-<hash>.json``) keyed by the wheel's size and
    the code it runs, so a re-check reads only new wheels."""
    key = hashlib.sha256(f"{wheel.stat().st_size}\0{_readers()}".encode()).hexdigest()[:16]
    cache = wheel.with_name(f".{wheel.name}.read-{key}.json")
    if cache.is_file():
        cached: dict[str, Any] | None = json.loads(cache.read_text("utf-8"))
        return cached
    text = json.dumps(_read(wheel))  # as read back: lists, not tuples, fresh or cached alike
    cache.write_text(text, "utf-8")
    rules: dict[str, Any] | None = json.loads(text)
    return rules


def _readers() -> str:
    """The code ``_read`` runs: vllm_capture.py, this module's reading part and
    ``release_scan.compile_alone``."""
    here = Path(__file__).parent
    own = (here / "gen_vllm_rules.py").read_text("utf-8")
    part = own[own.index("class _Stub") : own.index("def derive(")]
    shared = inspect.getsource(compile_alone)
    return part + shared + (here / "vllm_capture.py").read_text("utf-8")


def tables(releases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per-release rules folded into rows over release ranges (``until`` exclusive)."""
    archs = grouped(releases, "archs", sort_keys=True, by_release=False)
    archs.sort(key=lambda r: (r.get("file") or r["wrapper"], version_key(r["since"])))
    return {"releases": list(releases), "rows": rows(releases, {"archs"}), "archs": archs}


SCAN = Scan("vllm", "vllm-{version}-*.whl", OUT, derive, tables, first=(0, 8, 4), jobs=2)


def main(argv: list[str] | None = None) -> int:
    return release_scan.main(SCAN, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
