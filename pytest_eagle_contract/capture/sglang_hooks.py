"""A hook factory for SGLang's ``--forward-hooks`` (0.5.14+): record the draft's fc input.

SGLang (``srt/model_executor/hook_manager.py``) imports ``hook_factory`` by path, calls it
with the spec's ``config`` dict, and registers the returned callable with
``module.register_forward_hook`` on every module whose name matches ``target_modules``
(fnmatch), in the target's and in the draft's model. Register this one on the draft's
``model.fc`` (its input is the aux concat ``[T, n_aux * H]``) and on ``*embed_tokens`` (the
target's and the draft's embedding; their input is the batch's input ids)::

    --forward-hooks '[{"name": "eagle-capture",
      "target_modules": ["model.fc", "*embed_tokens"],
      "hook_factory": "pytest_eagle_contract.capture.sglang_hooks:capture_fc_input",
      "config": {"dir": "/tmp/eagle-captures", "arch": "LlamaForCausalLM",
                 "layer_ids": [1, 3, 4]}}]'

Each eager pass through ``fc`` writes one capture file (the layout of
``pytest_eagle_contract.capture.files``), so ``eagle-contract check --captures DIR`` reads them
directly. The draft embeds its input ids shifted by one (``cat(input_ids[1:], next)``);
the target embeds the sequence as sent. The hooks (one per model runner, sharing what
they saw per ``dir``) pair the two and store the target's ids, which are the shard's;
send one request at a time so a pass holds one sequence. Passes under CUDA-graph capture
are skipped (launch with ``--disable-cuda-graph``), and so is every rank but 0.

``config`` keys: ``dir`` (required), ``max_files`` (default 256), ``min_rows`` (default 2:
decode passes are not recorded), and, for the metadata, ``arch``, ``layer_ids``,
``hidden_size``, ``n_aux``, ``version`` (default: the installed sglang's). A ``dir`` that
cannot be written stops the recording with one logged warning; the server serves on.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engines.sglang import installed_sglang
from ..errors import EagleContractError

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)
Hook = Callable[[Any, tuple[Any, ...], Any], None]
# SGLang calls the factory once per model runner (target, draft): the hooks writing to one
# directory share the ids they have seen, so the draft's fc pass finds the target's ids.
_RECENT_IDS: dict[str, deque[torch.Tensor]] = {}


def _skip_pass() -> bool:
    """True under CUDA-graph capture (dummy inputs) and on every rank but 0."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return True
    dist = torch.distributed
    return bool(dist.is_available() and dist.is_initialized() and dist.get_rank() != 0)


class FcInputRecorder:
    """The hook: remembers recent input ids, writes one capture file per fc pass."""

    def __init__(self, config: dict[str, Any]) -> None:
        if not config.get("dir"):
            raise ValueError("capture_fc_input needs config {'dir': PATH}: where to write")
        self.dir = Path(str(config["dir"]))
        self.max_files = int(config.get("max_files", 256))
        self.min_rows = int(config.get("min_rows", 2))
        ids = config.get("layer_ids")
        self.layer_ids = None if ids is None else tuple(int(i) for i in ids)
        self.arch = config.get("arch")
        self.hidden_size = config.get("hidden_size")
        self.n_aux = config.get("n_aux")
        self.version = config.get("version") or installed_sglang()
        self.written: list[Path] = []
        self.skipped = 0
        self._ids = _RECENT_IDS.setdefault(str(self.dir.resolve()), deque(maxlen=8))

    def __call__(self, module: Any, inputs: tuple[Any, ...], output: Any) -> None:
        import torch

        x = inputs[0] if inputs else None
        if not isinstance(x, torch.Tensor) or _skip_pass():
            return
        if not x.is_floating_point():
            self._ids.append(x.detach().reshape(-1).to("cpu", torch.int64))
            return
        if not hasattr(module, "in_features"):
            return  # a float input to anything but a Linear (fc) is not ours
        aux = x.detach().reshape(-1, x.shape[-1])
        if aux.shape[0] < self.min_rows or len(self.written) >= self.max_files:
            return
        ids = self._target_ids(int(aux.shape[0]))
        if ids is None:
            self.skipped += 1
            logger.warning(
                "eagle-capture: fc pass of %d rows without the target's and the "
                "draft's input ids of that length (add *embed_tokens to "
                "target_modules; one request at a time); not written",
                aux.shape[0],
            )
            return
        self._ids.clear()
        try:
            self.written.append(self._write(ids, aux))
        except (OSError, EagleContractError) as exc:  # never the server's failure
            self.max_files = len(self.written)  # write no more
            logger.warning("eagle-capture: cannot write in %s: %s; no more captures", self.dir, exc)

    def _target_ids(self, rows: int) -> torch.Tensor | None:
        """The target's ids of this pass: those the draft's shifted ids follow, else None.

        The draft embeds ``cat(ids[1:], next_token)`` after the target embedded ``ids``;
        without both, which is which cannot be told, and nothing is written.
        """
        import torch

        same = [t for t in self._ids if t.numel() == rows]
        for i, a in enumerate(same):
            for b in same[i + 1 :]:
                if torch.equal(b[:-1], a[1:]) and not torch.equal(a, b):
                    return a
        return None

    def _write(self, ids: torch.Tensor, aux: torch.Tensor) -> Path:
        from .files import CaptureMeta, write_capture

        width = int(aux.shape[-1])
        n_aux = self.n_aux or (width // int(self.hidden_size) if self.hidden_size else None)
        meta = CaptureMeta(
            version=self.version,
            arch=self.arch,
            mode="forward-hook",
            layer_ids=self.layer_ids,
            hidden_size=self.hidden_size,
            n_aux=n_aux,
            source="forward-hook",
            notes=("the draft's model.fc input on an eager pass",),
        )
        return write_capture(self.dir, ids, aux.to("cpu").contiguous(), meta)


def capture_fc_input(config: dict[str, Any] | None = None) -> FcInputRecorder:
    """SGLang ``hook_factory``: ``config`` -> a forward hook ``(module, inputs, output)``."""
    return FcInputRecorder(dict(config or {}))
