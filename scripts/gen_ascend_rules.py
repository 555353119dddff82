"""Derive vllm-ascend's EAGLE-3 rules from its released sdists; write
engines/ascend_rules.json.

    python scripts/gen_ascend_rules.py SDIST_DIR [--out FILE] [--check] [--download]

``--download`` fetches every vllm-ascend release's sdist the index lists (through the index's
JSON API: ``pip download`` of an sdist prepares its metadata, which fails for vllm-ascend's
setuptools_scm and CANN build requirements). Each ``vllm_ascend-X.tar.gz`` is read with
tarfile and ast (nothing is imported or built):

- whether it has EAGLE-3 (``NPUModelRunner.load_model`` in ``worker/model_runner_v1.py``
  calls ``set_aux_hidden_state_layers``), and where the layers it sets come from: the target
  model's own ``get_eagle3_aux_hidden_state_layers()`` /
  ``get_eagle3_default_aux_hidden_state_layers()`` (no config read: vLLM's default
  ``(2, L//2, L-3)`` whatever the draft says), or vLLM's ``_get_eagle3_aux_layers_from_config``
  (the draft config's keys, as the paired vLLM release's V1 runner reads them);
- the vLLM release it runs on (its ``vllm_version_is("X")`` checks; vllm-ascend X.Y.Z pairs
  with vLLM X.Y.Z);
- how its worker picks the V2 runner;
- the architectures it gives an EAGLE-3 capture of its own (``patch/``: ``X.set_aux_hidden_
  state_layers = ...``) and where that capture sits, and the architectures it replaces with
  its own model classes (``models/__init__.py``'s ``register_model``).

- per method, the proposer class ``spec_decode/__init__.py``'s ``get_spec_decode_method``
  builds (``proposers``: vLLM's DFlash, MTP, ... run through vllm-ascend's own proposers);
  for DFlash (``dflash``): whether ``NPUModelRunner`` subclasses vLLM's ``GPUModelRunner`` and
  calls its ``__init__`` (which sets ``use_aux_hidden_state_outputs`` for ``dflash``) while
  its own ``_set_up_drafter`` sets that flag for ``eagle3`` / ``extract_hidden_states`` only
  (``aux``: ``vllm``, the paired vLLM release's setting stands), and the DFlash classes a
  patch replaces a method of (``patches``); whether any file names DFlash2 / DSpark; the
  model classes whose ``get_mtp_target_hidden_states`` the runner lets replace the state an
  MTP drafter is fed (``mtp_override``; None where the runner does not ask).

A structure the script does not recognise makes it exit 1. ``--check`` compares with the
committed file and exits 1 on any difference.
"""

from __future__ import annotations

import ast
import collections
import json
import re
import sys
import tarfile
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import release_scan
from release_scan import Scan, rows

OUT = Path(__file__).resolve().parents[1] / "pytest_eagle_contract/engines/ascend_rules.json"
RUNNER = "vllm_ascend/worker/model_runner_v1.py"
WORKER = "vllm_ascend/worker/worker.py"
MODELS = "vllm_ascend/models/__init__.py"
INDEX = "https://pypi.org/pypi/vllm-ascend/json"
MAX_MEMBER = 4 << 20  # bytes read of one source file


class Sdist:
    """The ``.py`` files of one sdist, by their path under the top folder."""

    def __init__(self, path: Path) -> None:
        self.version = path.name.removeprefix("vllm_ascend-").removesuffix(".tar.gz")
        self.files: dict[str, str] = {}
        with tarfile.open(path) as tar:
            for member in tar:
                name = member.name.partition("/")[2]
                if (
                    member.isfile()
                    and name.startswith("vllm_ascend/")
                    and name.endswith(".py")
                    and member.size <= MAX_MEMBER
                ):
                    handle = tar.extractfile(member)
                    if handle is not None:
                        self.files[name] = handle.read().decode("utf-8", "replace")

    def tree(self, name: str) -> ast.Module:
        return ast.parse(self.files[name])


def _method(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    return None


def _called(fn: ast.AST) -> set[str]:
    return {
        n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
        for n in ast.walk(fn)
        if isinstance(n, ast.Call)
    }


def _aux_source(sdist: Sdist) -> tuple[str, str] | None:
    """("default" | "config", the method called) from ``NPUModelRunner.load_model``."""
    load = _method(sdist.tree(RUNNER), "NPUModelRunner", "load_model")
    if load is None:
        raise SystemExit(f"{sdist.version}: no NPUModelRunner.load_model in {RUNNER}")
    called = _called(load)
    if "set_aux_hidden_state_layers" not in called:
        return None
    if "_get_eagle3_aux_layers_from_config" in called:
        return "config", "_get_eagle3_aux_layers_from_config"
    for name in (
        "get_eagle3_default_aux_hidden_state_layers",
        "get_eagle3_aux_hidden_state_layers",
    ):
        if name in called:
            return "default", name
    raise SystemExit(f"{sdist.version}: load_model sets aux layers from an unknown source")


def _paired_vllm(sdist: Sdist) -> str:
    found = collections.Counter(
        m
        for text in sdist.files.values()
        for m in re.findall(r'vllm_version_is\("([^"]+)"\)', text)
    )
    base = re.sub(r"\.post\d+$", "", sdist.version)
    if found and found.most_common(1)[0][0] != base:
        raise SystemExit(f"{sdist.version}: checks vLLM {found.most_common(1)[0][0]}, not {base}")
    return base


def _v2(sdist: Sdist, vllm: str) -> str:
    text = sdist.files.get(WORKER, "")
    if "NPUModelRunnerV2" not in text:
        return "none"
    if f'vllm_version_is("{vllm}")' in text and "falling back to v1" in text:
        return "v1 only"  # the worker turns use_v2_model_runner off on this vLLM release
    if "VLLM_USE_V2_MODEL_RUNNER" in text:
        return "env"
    return "vllm"


_CAPTURE = re.compile(
    r"aux_hidden_states\.append\(\s*hidden_states \+ residual if residual is not None "
    r"else hidden_states\s*\)\s*\n\s*hidden_states, residual = layer\("
)


def _patched(sdist: Sdist) -> list[dict[str, Any]]:
    """Architectures a patch gives ``set_aux_hidden_state_layers``, and its capture."""
    out = []
    for name, text in sorted(sdist.files.items()):
        if not name.startswith("vllm_ascend/patch/"):
            continue
        for arch in re.findall(r"^(\w+ForCausalLM)\.set_aux_hidden_state_layers = ", text, re.M):
            if not _CAPTURE.search(text):
                raise SystemExit(f"{sdist.version}: {name} captures in an unknown way")
            default = re.search(r"return \(2, num_layers // 2, num_layers - 3\)", text)
            if default is None:
                raise SystemExit(f"{sdist.version}: {name} has an unknown default")
            # appended before layer i runs: residual:i; at i = 0 (residual None) the embedding
            out.append({"arch": arch, "file": name, "capture": "input", "id0": "embed"})
    return out


def _replaced(sdist: Sdist) -> dict[str, str]:
    if MODELS not in sdist.files:
        return {}
    out = {}
    for node in ast.walk(sdist.tree(MODELS)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "register_model":
            arch, target = (ast.literal_eval(a) for a in node.args[:2])
            out[arch] = target.partition(":")[0].replace(".", "/") + ".py"
    return dict(sorted(out.items()))


def derive(path: Path) -> dict[str, Any] | None:
    sdist = Sdist(path)
    if RUNNER not in sdist.files:
        return None
    source = _aux_source(sdist)
    if source is None:
        return None
    vllm = _paired_vllm(sdist)
    return {
        "vllm": vllm,
        "ids_from": source[0],
        "method": source[1],
        "v2": _v2(sdist, vllm),
        "patched": _patched(sdist),
        "replaced": _replaced(sdist),
        "proposers": _proposers(sdist),
        "dflash": _dflash(sdist),
        "dflash2": _names(sdist, "dflash2"),
        "dspark": _names(sdist, "dspark"),
        "mtp_override": _mtp_override(sdist),
        "mtp": _mtp(sdist),
    }


BASE_PROPOSER = "vllm_ascend/spec_decode/llm_base_proposer.py"


def _mtp(sdist: Sdist) -> dict[str, Any] | None:
    """How an MTP drafter is fed: ``feed`` ``hidden_states`` where the runner hands the
    proposer ``target_hidden_states = hidden_states[...]`` (the target forward's output, after
    the ``get_mtp_target_hidden_states`` override) unless aux states are on, and the base
    proposer combines states for ``eagle3`` / ``dflash`` only; ``routes``: the
    ``speculative_config`` tests of the mtp branch of ``get_spec_decode_method`` that pick
    another proposer. None where there is no mtp proposer or the code is of another shape."""
    if "mtp" not in _proposers(sdist):
        return None
    runner = sdist.files.get(RUNNER, "")
    base = sdist.files.get(BASE_PROPOSER, "")
    fed = re.search(
        r"if self\.use_aux_hidden_state_outputs:\s+target_hidden_states = torch\.cat\([^\n]*"
        r"\s+else:\s+target_hidden_states = hidden_states\[token_indices\]",
        runner,
    )
    combined_for = re.search(
        r'if self\.method in \("eagle3", "dflash"\):(?:(?!\n        \S).)*?'
        r"combine_hidden_states\(target_hidden_states\)",
        base,
        re.S,
    )
    if not fed or not combined_for:
        return None
    routes: dict[str, str] = {}
    fn = next(
        n
        for n in ast.walk(sdist.tree(SPEC))
        if isinstance(n, ast.FunctionDef) and n.name == "get_spec_decode_method"
    )
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and "mtp" in ast.unparse(node.test):
            for inner in ast.walk(node):
                if (
                    isinstance(inner, ast.If)
                    and inner is not node
                    and isinstance(inner.body[-1], ast.Return)
                    and isinstance(inner.body[-1].value, ast.Call)
                ):
                    test = re.search(r"speculative_config\.(\w+)\(\)", ast.unparse(inner.test))
                    if test:
                        routes[test.group(1)] = ast.unparse(inner.body[-1].value.func)
    return {"feed": "hidden_states", "routes": routes}


def _mtp_override(sdist: Sdist) -> list[str] | None:
    """Where the runner lets the target replace the state fed to an MTP drafter
    (``get_mtp_target_hidden_states``): the model classes defining it, None where the
    runner does not ask."""
    if "get_mtp_target_hidden_states" not in sdist.files.get(RUNNER, ""):
        return None
    return sorted(
        f"{name}:{node.name}"
        for name, text in sdist.files.items()
        if "def get_mtp_target_hidden_states" in text
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.ClassDef)
        and _method(ast.Module([node], []), node.name, "get_mtp_target_hidden_states")
    )


SPEC = "vllm_ascend/spec_decode/__init__.py"


def _names(sdist: Sdist, word: str) -> bool:
    pattern = re.compile(word, re.I)
    return any(pattern.search(name + text) for name, text in sdist.files.items())


def _proposers(sdist: Sdist) -> dict[str, str]:
    """method -> the proposer class ``get_spec_decode_method`` returns for it (the last
    ``return`` of its branch)."""
    if SPEC not in sdist.files:
        return {}
    fn = next(
        (
            n
            for n in ast.walk(sdist.tree(SPEC))
            if isinstance(n, ast.FunctionDef) and n.name == "get_spec_decode_method"
        ),
        None,
    )
    if fn is None:
        return {}
    out: dict[str, str] = {}
    for node in ast.walk(fn):
        if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
            continue
        test = node.test
        if getattr(test.left, "id", "") != "method":
            continue
        value = ast.literal_eval(test.comparators[0])
        methods = tuple(value) if isinstance(value, list | tuple) else (value,)
        returns = [n for n in node.body if isinstance(n, ast.Return)]
        if not returns or not isinstance(returns[-1].value, ast.Call):
            raise SystemExit(f"{sdist.version}: get_spec_decode_method's {methods} not understood")
        for m in methods:
            out[m] = ast.unparse(returns[-1].value.func)
    return dict(sorted(out.items()))


def _dflash(sdist: Sdist) -> dict[str, Any] | None:
    """How a DFlash launch gets its aux states (the docstring)."""
    if "dflash" not in _proposers(sdist):
        return None
    text = sdist.files[RUNNER]
    tree = sdist.tree(RUNNER)
    cls = next(
        (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "NPUModelRunner"),
        None,
    )
    bases = [ast.unparse(b) for b in cls.bases] if cls else []
    init = _method(tree, "NPUModelRunner", "__init__")
    setup = _method(tree, "NPUModelRunner", "_set_up_drafter")
    load = _method(tree, "NPUModelRunner", "load_model")
    if bases != ["GPUModelRunner"] or init is None or setup is None or load is None:
        raise SystemExit(f"{sdist.version}: NPUModelRunner's DFlash set-up not understood")
    calls_super = "super().__init__(vllm_config, device)" in ast.unparse(init)
    flags = re.findall(
        r"method == [\"'](\w+)[\"']:\s*\n(?:[^\n]*\n)?\s*self\.use_aux_hidden_state_outputs =",
        ast.unparse(setup),
    )
    load_text = ast.unparse(load)
    reads = "should_configure_aux_hidden_states = self.use_aux_hidden_state_outputs" in load_text
    if not calls_super or "dflash" in flags or not reads or "_set_up_drafter()" not in text:
        raise SystemExit(f"{sdist.version}: how a DFlash launch gets aux states not understood")
    patches = sorted(
        m.group(1)
        for name, body in sdist.files.items()
        if name.startswith("vllm_ascend/patch/")
        for m in re.finditer(r"^(\w*DFlash\w*\.\w+) = ", body, re.M)
    )
    return {"aux": "vllm", "own_flags": sorted(flags), "patches": patches}


def download(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(INDEX, timeout=120) as reply:
        data = json.load(reply)
    for version, files in data["releases"].items():
        if re.fullmatch(r"\d+(\.\d+)*(\.post\d+)?", version) is None:
            continue  # release candidates and dev releases are left out
        for f in files:
            target = folder / f["filename"]
            if f["filename"].endswith(".tar.gz") and not target.exists():
                urllib.request.urlretrieve(urllib.parse.urljoin(INDEX, f["url"]), target)


def tables(releases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "source": "vllm-ascend sdists (vllm_ascend/worker/model_runner_v1.py "
        "NPUModelRunner.load_model, worker/worker.py, patch/, models/__init__.py)",
        "releases": list(releases),
        "rows": rows(releases, set()),
    }


SCAN = Scan(
    project="vllm-ascend",
    pattern="vllm_ascend-{version}.tar.gz",
    out=OUT,
    derive=derive,
    tables=tables,
)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--download" in args:  # the sdists through the index's JSON API, not pip download
        download(Path(next(a for a in args if not a.startswith("-"))))
        return 0
    return release_scan.main(SCAN, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
