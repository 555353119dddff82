"""The built-in TensorRT-LLM rules (engines/trtllm.py, shards/formats/trtllm.py) against each
covered release's own code, read out of its wheel (Python sources only, nothing imported or
run). Needs the wheels: ``tox -e trtllm-releases`` downloads them, or set
EAGLE_CONTRACT_TRTLLM_WHEELS=DIR. Never part of the default test run.
"""

from __future__ import annotations

import ast
import zipfile
from types import SimpleNamespace

import pytest
from release_helpers import one_wheel, wheel_folder

from pytest_eagle_contract.engines import trtllm
from pytest_eagle_contract.shards.formats import FORMATS

DIR = wheel_folder("EAGLE_CONTRACT_TRTLLM_WHEELS", "tensorrt-llm", "trtllm-releases")
PKG = "tensorrt_llm/"
EAGLE3 = PKG + "_torch/speculative/eagle3.py"
LLAMA = PKG + "_torch/models/modeling_llama.py"
SAVER = PKG + "_torch/speculative/save_hidden_state.py"
RELEASES = list(trtllm.RELEASES)


def _sources(release: str) -> dict[str, str]:
    with zipfile.ZipFile(one_wheel(DIR, "tensorrt_llm", release)) as z:
        return {
            name: z.read(name).decode(errors="replace")
            for name in z.namelist()
            if name.endswith(".py") and name.startswith((PKG + "_torch/", PKG + "llmapi/"))
        }


@pytest.fixture(scope="module", params=RELEASES)
def release(request: pytest.FixtureRequest) -> tuple[str, dict[str, str]]:
    return request.param, _sources(request.param)


def _defaults(text: str, num_layers: int) -> list[list[int]]:
    """Every 3-tuple in eagle3.py built from ``num_layers // 2``, evaluated at ``num_layers``."""
    names = {"num_layers": num_layers, "self": SimpleNamespace(num_layers=num_layers)}
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Tuple) and len(node.elts) == 3:
            code = ast.unparse(node)
            if "num_layers // 2" in code:
                found.append(list(eval(code, {}, names)))  # arithmetic on num_layers only
    return found


def test_default_ids(release):
    version, src = release
    for L in (32, 61):
        found = _defaults(src[EAGLE3], L)
        assert found, f"{version}: no default capture tuple in eagle3.py"
        assert all(d == trtllm.default_ids(L) for d in found), (version, L, found)


def test_ids_are_sorted(release):
    version, src = release
    tree = ast.parse(src[EAGLE3])
    posts = [
        f
        for c in ast.walk(tree)
        if isinstance(c, ast.ClassDef) and c.name == "Eagle3SpecMetadata"
        for f in c.body
        if isinstance(f, ast.FunctionDef) and f.name == "__post_init__"
    ]
    assert posts, f"{version}: no Eagle3SpecMetadata.__post_init__"
    calls = {ast.unparse(n.func) for n in ast.walk(posts[0]) if isinstance(n, ast.Call)}
    assert "sorted" in calls, version


def test_capture_is_the_layer_output(release):
    """The Llama decoder layer captures after its MLP, with its own index: id k = output of
    layer k = residual:k+1."""
    version, src = release
    ok = False
    for fn in ast.walk(ast.parse(src[LLAMA])):
        if not isinstance(fn, ast.FunctionDef):
            continue
        calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
        mlp = [c.lineno for c in calls if ast.unparse(c.func) == "self.mlp"]
        for c in calls:
            name = ast.unparse(c.func)
            if name.endswith("maybe_capture_hidden_states") and c.args:
                own = ast.unparse(c.args[0]) == "self.layer_idx"
                ok = ok or (own and any(line < c.lineno for line in mlp))
    assert ok, f"{version}: no capture after self.mlp in modeling_llama.py"


def test_draft_config_ids_are_never_read(release):
    version, src = release
    readers = [name for name, text in src.items() if "eagle_aux_hidden_state_layer_ids" in text]
    assert readers == [], f"{version} reads the draft config's ids in {readers}"


def test_saved_keys_and_file_name(release):
    version, src = release
    if SAVER not in src:
        pytest.skip(f"tensorrt-llm {version} has no hidden-state saver")
    tree = ast.parse(src[SAVER])
    keys = {
        k.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Dict) and any(getattr(k, "value", None) == "input_ids" for k in n.keys)
        for k in n.keys
        if isinstance(k, ast.Constant)
    }
    keys |= {
        n.slice.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Subscript)
        and isinstance(n.ctx, ast.Store)
        and isinstance(n.slice, ast.Constant)
        and isinstance(n.slice.value, str)
    }
    fmt = FORMATS["trtllm"]
    assert {"id", "input_ids", "hidden_state"} <= keys, (version, keys)
    assert keys <= fmt.required_keys | fmt.optional_keys, (version, keys)
    names = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)]
    assert any(n.endswith("_{self._iter}.pt'") for n in names), (version, names)
