"""A STAND-IN for SGLang's ``sgl_kernel`` package, for the real-SGLang tests. It is not sgl_kernel.

``sgl_kernel`` (PyPI: ``sglang-kernel``) ships CUDA builds only; SGLang's CPU engine imports
a few of its names at start-up but calls none of them in aux-capture mode (no draft, no
quantization, no custom all-reduce). This package answers every ``from sgl_kernel... import
NAME`` with a function that raises when called, so a kernel that IS reached fails loudly
instead of computing something wrong. Installed only into the SGLang test environment
(tests/sglang_cpu/setup_env.py), never beside the tool.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

__version__ = "0.0.0+eagle-contract-standin"
STANDIN = True


class _Missing:
    """A kernel (or a namespace of them, such as ``scalar_types``) that raises when called."""

    def __init__(self, qualname: str) -> None:
        self.__qualname__ = qualname
        self.__name__ = qualname.rsplit(".", 1)[-1]

    def __call__(self, *args: object, **kwargs: object) -> Any:
        raise NotImplementedError(
            f"{self.__qualname__} is a stand-in (tests/sglang_cpu/sgl_kernel): the CPU test "
            "server reached a CUDA kernel; aux-capture mode on CPU should call none"
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Missing(f"{self.__qualname__}.{name}")

    def __repr__(self) -> str:
        return f"<sgl_kernel stand-in {self.__qualname__}>"


class _Stub(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _Missing(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: object, target: object = None) -> Any:
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _Stub(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


sys.meta_path.insert(0, _Finder())
sys.modules[__name__].__class__ = _Stub
