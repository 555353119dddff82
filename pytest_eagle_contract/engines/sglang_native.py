"""Ask the installed sglang itself: run its ``set_eagle3_layers_to_capture`` on a stub.

No model, no GPU: the method only reads ``config.num_hidden_layers`` and ``pp_group`` and
writes ``model.layers_to_capture`` (CONVENTIONS.md). Wrappers that delegate (Kimi-K2.5 to
its DeepSeek-V3 language model) get a stub language model bound to the delegate's class,
the one ``__init__`` assigns.
Models whose inner module flags ``layers[id]`` get a stand-in inner ``model`` that does the
same indexing, so an out-of-range id raises IndexError as at start-up. This module only
runs where sglang is installed (``tox -e sglang`` checks the table against it).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from ..errors import EagleContractError, Unservable


class _InnerModel(SimpleNamespace):
    """Stand-in for the inner ``*Model`` whose setter flags layers (qwen2_moe.py and kin)."""

    def set_eagle3_layers_to_capture(self, layers_to_capture: list[int]) -> None:
        self.layers_to_capture = layers_to_capture
        for layer_id in layers_to_capture:
            self.layers[layer_id]._is_layer_to_capture = True


def _stub(num_layers: int) -> SimpleNamespace:
    config = SimpleNamespace(
        num_hidden_layers=num_layers, text_config=SimpleNamespace(num_hidden_layers=num_layers)
    )
    model = _InnerModel(
        layers=[SimpleNamespace() for _ in range(num_layers)],
        layers_to_capture=[],
        capture_aux_hidden_states=False,
    )
    return SimpleNamespace(
        config=config,
        model=model,
        capture_aux_hidden_states=False,
        pp_group=SimpleNamespace(is_last_rank=True),
    )


def _model_class(arch: str) -> Any:
    from sglang.srt.models.registry import ModelRegistry

    cls, _ = ModelRegistry.resolve_model_cls([arch])
    return cls


def _call(cls: Any, stub: SimpleNamespace, ids: Sequence[int] | None) -> None:
    """Call the method unbound on the stub; module-level pipeline-parallel accessors
    (minimax_m2.py, exaone_moe.py read ``get_parallel().pp_group``) answer "last rank"."""
    import sys
    from contextlib import ExitStack
    from unittest import mock

    method = cls.set_eagle3_layers_to_capture
    module = sys.modules[method.__module__]
    last_rank = SimpleNamespace(is_last_rank=True)
    with ExitStack() as stack:
        if hasattr(module, "get_parallel"):
            stack.enter_context(
                mock.patch.object(
                    module, "get_parallel", lambda: SimpleNamespace(pp_group=last_rank)
                )
            )
        if hasattr(module, "get_pp_group"):
            stack.enter_context(mock.patch.object(module, "get_pp_group", lambda: last_rank))
        if len(inspect.signature(method).parameters) == 1:
            method(stub)  # 0.4.5-0.4.8: no ids
        else:
            method(stub, None if ids is None else list(ids))


def _delegate_class(cls: Any, attr: str) -> Any:
    """The class ``cls.__init__`` assigns to ``self.<attr>`` (``self.language_model =
    DeepseekV3ForCausalLM(...)``), from the module or, imported locally, the registry."""
    import re
    import sys

    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        try:
            source = inspect.getsource(init) if init is not None else ""
        except (OSError, TypeError):
            continue
        match = re.search(rf"self\.{attr}\s*=\s*(\w+)\(", source)
        if match:
            found = getattr(sys.modules[klass.__module__], match.group(1), None)
            return found if found is not None else _model_class(match.group(1))
    raise EagleContractError(f"cannot tell which class {cls.__name__}.{attr} is")


def native_layers_to_capture(arch: str, num_layers: int, ids: Sequence[int] | None) -> list[int]:
    """``layers_to_capture`` as the installed sglang's own method leaves it."""
    try:
        cls = _model_class(arch)
    except Exception as exc:  # the registry raises several kinds for unknown archs
        raise EagleContractError(f"installed sglang cannot load {arch}: {exc}") from None
    stub = _stub(num_layers)
    source = inspect.getsource(cls.set_eagle3_layers_to_capture)
    if "language_model.set_eagle3_layers_to_capture" in source:  # Kimi-K2.5, Llama4 VL
        inner_cls = _delegate_class(cls, "language_model")
        inner = _stub(num_layers)
        stub.language_model = SimpleNamespace(
            set_eagle3_layers_to_capture=lambda layer_ids=None: _call(inner_cls, inner, layer_ids)
        )
        _call(cls, stub, ids)
        return list(inner.model.layers_to_capture)
    if "language_model" in source:  # gemma4_mm.py sets its language model's list itself
        stub.language_model = stub.model
    try:
        _call(cls, stub, ids)
    except IndexError:
        raise Unservable(
            f"sglang's {cls.__name__}.set_eagle3_layers_to_capture raises "
            f"IndexError for ids {list(ids or [])} (L = {num_layers})"
        ) from None
    return list(stub.model.layers_to_capture)
