"""Loaded by a ``.pth`` file in the SGLang test environment only (tests/sglang_cpu/setup_env.py).

torchvision's wheels on the package index are built against CUDA torch: beside the CPU torch
pinned here its ``_C`` extension does not load, so ``torchvision::nms`` and ``qnms`` are never
defined, and ``torchvision/_meta_registrations.py`` fails at import registering fake kernels
for them (``RuntimeError: operator torchvision::nms does not exist``). SGLang imports
torchvision at start-up (image processors' configs) but never runs these ops for a text
target. This guard runs that one module with ``torch.library.register_fake`` skipping
torchvision operators that do not exist; every other registration, and every other module,
is untouched.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any

_MODULE = "torchvision._meta_registrations"


class _GuardedLoader(importlib.abc.Loader):
    def __init__(self, real: Any) -> None:
        self._real = real

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._real.create_module(spec)

    def exec_module(self, module: Any) -> None:
        import torch

        register = torch.library.register_fake

        def guarded(op: Any, *args: Any, **kwargs: Any) -> Any:
            if not (isinstance(op, str) and op.startswith("torchvision::")):
                return register(op, *args, **kwargs)

            def apply(fn: Any) -> Any:
                try:
                    return register(op, *args, **kwargs)(fn)
                except RuntimeError as exc:
                    if "does not exist" not in str(exc):
                        raise
                    return fn

            return apply

        torch.library.register_fake = guarded  # type: ignore[assignment]
        try:
            self._real.exec_module(module)
        finally:
            torch.library.register_fake = register


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _GuardedLoader(spec.loader)
        return spec


sys.meta_path.insert(0, _Finder())
