"""The built-in SGLang table against every release's own ``set_eagle3_layers_to_capture``.

Reads the methods out of the sglang release wheels (plain Python source) and runs each on
a stub object, as ``engines.sglang_native`` does with an installed sglang. Needs the wheels:
``tox -e sglang-releases`` downloads them, or set EAGLE_CONTRACT_SGLANG_WHEELS=DIR.
Never part of the default test run.
"""

from __future__ import annotations

import ast
import os
import textwrap
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import pytest

from pytest_eagle_contract.engines import sglang_table as table
from pytest_eagle_contract.engines.sglang import _apply_rule
from pytest_eagle_contract.errors import Unservable

WHEELS = os.environ.get("EAGLE_CONTRACT_SGLANG_WHEELS")
if not WHEELS:
    pytest.skip(
        "set EAGLE_CONTRACT_SGLANG_WHEELS to a folder of sglang wheels (tox -e sglang-releases)",
        allow_module_level=True,
    )
L = 61
METHOD = "set_eagle3_layers_to_capture"
ID_SETS = {
    "absent": None,
    "start-at-1": [1, 29, 57],
    "start-at-2": [2, 30, 58],
    "unsorted": [58, 2, 30],
    "include-L": [2, 30, 61],
    "zero": [0, 30, 60],
}
RELEASES = [r for r in table.RELEASES]


def _wheel(release: str) -> Path:
    (path,) = Path(WHEELS or ".").glob(f"sglang-{release}-*.whl")
    return path


def _method_source(release: str, method_in: str) -> str | None:
    file, cls = method_in.split(":")
    with zipfile.ZipFile(_wheel(release)) as z:
        try:
            text = z.read(f"sglang/srt/models/{file}").decode()
        except KeyError:
            return None
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == METHOD:
                    return textwrap.dedent(ast.get_source_segment(text, item) or "")
    return None


def _class_defined(release: str, arch: str) -> bool:
    with zipfile.ZipFile(_wheel(release)) as z:
        return any(
            f"class {arch}(" in z.read(name).decode(errors="replace")
            for name in z.namelist()
            if name.startswith("sglang/srt/models/") and name.endswith(".py")
        )


class _Inner(SimpleNamespace):
    def set_eagle3_layers_to_capture(self, ids: list[int]) -> None:  # qwen2_moe.py's Model
        self.layers_to_capture = ids
        for i in ids:
            self.layers[i]._is_layer_to_capture = True


def _stub() -> SimpleNamespace:
    return SimpleNamespace(
        config=SimpleNamespace(num_hidden_layers=L),
        capture_aux_hidden_states=False,
        pp_group=SimpleNamespace(is_last_rank=True),
        model=_Inner(layers=[SimpleNamespace() for _ in range(L)], layers_to_capture=None),
    )


def _function(source: str) -> Any:
    last = SimpleNamespace(is_last_rank=True)
    namespace: dict[str, Any] = {
        "Optional": Optional,
        "List": list,
        "get_pp_group": lambda: last,
        "get_parallel": lambda: SimpleNamespace(pp_group=last),
    }
    exec(source, namespace)  # a method body from the official release wheel
    return namespace["set_eagle3_layers_to_capture"]


def _run(release: str, row: table.Row, ids: list[int] | None) -> object:
    source = _method_source(release, row.method_in)
    assert source, f"{row.method_in} has no method in sglang {release}"
    fn = _function(source)
    stub = _stub()
    if "language_model" in source:  # Kimi-K2.5 delegates to its DeepSeek-V3 model
        inner_fn = _function(_method_source(release, "deepseek_v2.py:DeepseekV2ForCausalLM") or "")
        inner = _stub()
        stub.language_model = SimpleNamespace(
            set_eagle3_layers_to_capture=lambda layer_ids=None: inner_fn(inner, layer_ids)
        )
        fn(stub, ids)
        return list(inner.model.layers_to_capture)
    try:
        if fn.__code__.co_argcount == 1:
            fn(stub)
        else:
            fn(stub, ids)
    except IndexError:
        return "IndexError"
    return list(stub.model.layers_to_capture)


def _expected(row: table.Row, ids: list[int] | None) -> object:
    if ids is not None and row.rule == "plus1-flag" and any(i + 1 >= L for i in ids):
        return "IndexError"
    return _apply_rule(row.rule, ids, L)


CASES = [
    (release, arch)
    for release in RELEASES
    for arch in sorted(table.KNOWN_ARCHS - set(table.NO_CAPTURE))
]


@pytest.mark.parametrize(("release", "arch"), CASES, ids=[f"{r}-{a}" for r, a in CASES])
def test_release_method_matches_table(release, arch):
    row = table.row_for(arch, release)
    if row is None:  # the table says absent: no such class, or no capture method for it
        rows = [r for r in table.ROWS if arch in r.archs]
        assert not _class_defined(release, arch) or all(
            _method_source(release, r.method_in) is None for r in rows
        ), f"sglang {release} has a capture method for {arch} the table does not list"
        return
    assert _class_defined(release, arch), f"{arch} is not in sglang {release}"
    for name, ids in ID_SETS.items():
        assert _run(release, row, ids) == _expected(row, ids), (release, arch, name)


def test_kimi_vl_has_no_method_in_any_release():
    for release in RELEASES:
        assert _method_source(release, "kimi_vl.py:KimiVLForConditionalGeneration") is None


def test_resolve_refuses_releases_before_eagle3():
    from pytest_eagle_contract.engines.resolve import resolve

    with pytest.raises(Unservable):
        resolve("sglang", L, [2, 30, 58], "LlamaForCausalLM", "0.4.4", use_installed=False)
    assert _method_source("0.4.4", "llama.py:LlamaForCausalLM") is None
