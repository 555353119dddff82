"""TensorRT-LLM AutoDeploy (``backend="_autodeploy"``): which target layers its EAGLE-3 capture
feeds the draft. Read from a source snapshot of NVIDIA/TensorRT-LLM (no AutoDeploy release is
installable here: PyPI holds only stubs of tensorrt-llm, its wheels are on NVIDIA's index);
``SOURCE`` names the files and commits. The PyTorch backend is ``trtllm.py``.

- ``auto_deploy/llm_args.py`` ``LlmArgs.setup_hidden_state_capture``: with an
  ``EagleDecodingConfig`` it enables the ``detect_hidden_states_for_capture`` transform with
  ``speculative_config.eagle3_layers_to_capture``. The draft's ``config.json`` is never read
  for ids (the transform's own comment says so: a TODO to read the checkpoint's).
- ``transform/library/hidden_states.py``: layer k's capture is its closing residual add
  (``hidden_states + residual`` after the layer's last linear): the output of layer k,
  ``residual:k+1``. No id captures the embedding.
- No ids: ``{1, L//2 - 1, L - 4}`` where L is the number of layers the graph shows; ``L <= 6``
  raises ValueError at start-up.
- An id with no layer: the transform asserts the found layers equal the set (AssertionError
  at start-up). Id -1 is the last layer (the snapshot's tests: ``{-1}`` resolves to layer
  L - 1, its residual add, before the final norm), where the PyTorch backend's -1 is the final
  post-norm state.
- A set: duplicates collapse. The order the draft's fc reads the captured states in was not
  found in the snapshot (the capture ops' cache resources): taken as layer order, as on the
  PyTorch backend's sorted set.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import Problem, Unservable
from ..layers import Layer
from .base import Engine, Position, Query, Resolution

if TYPE_CHECKING:
    from .draft_config import DraftConfig

SNAPSHOT = "main@01e5db0"  # the llm_args.py commit; the transform read at ecb0871
SOURCE = (
    "NVIDIA/TensorRT-LLM source snapshot: _torch/auto_deploy/llm_args.py (01e5db06) "
    "setup_hidden_state_capture, transform/library/hidden_states.py (ecb08716) "
    "DetectHiddenStatesForCapture: id k = closing residual add of layer k (residual:k+1), "
    "-1 = the last layer; fc order taken as layer order (not read)"
)
LAST = -1


def default_ids(num_layers: int) -> list[int]:
    """AutoDeploy's default: ``{1, L//2 - 1, L - 4}`` (in layer order)."""
    return sorted({1, num_layers // 2 - 1, num_layers - 4})


class AutoDeploy(Engine):
    name = "trtllm-autodeploy"
    title = "TensorRT-LLM AutoDeploy"
    id_keys = ()  # speculative_config.eagle3_layers_to_capture, never the draft's config.json

    def default_ids(self, num_layers: int) -> list[int] | None:
        return default_ids(num_layers)

    def n_aux(self, draft: DraftConfig, version: str | None) -> int:
        return 3

    def config_line(self, ids: Sequence[int]) -> str:
        return f"speculative_config: {{eagle3_layers_to_capture: {json.dumps(list(ids))}}}"

    def _resolve(self, q: Query) -> Resolution:
        L = q.num_layers
        if q.version is None:
            q.version = SNAPSHOT
            q.notes.append(f"no version: the rules of the source snapshot {SNAPSHOT}")
        elif q.version != SNAPSHOT:
            q.notes.append(
                f"rules read from the source snapshot {SNAPSHOT}, not from tensorrt-llm "
                f"{q.version} itself (no release checked)"
            )
        ids = q.ids
        if ids is None:
            if L <= 6:
                raise Unservable(
                    f"L = {L}: AutoDeploy's default capture needs more than 6 layers "
                    "(ValueError at start-up); set eagle3_layers_to_capture"
                )
            ids = default_ids(L)
            q.notes.append(
                f"no eagle3_layers_to_capture: AutoDeploy's default {ids} (1, L//2-1, L-4); "
                "the draft config's ids are never read"
            )
        missing = sorted({i for i in ids if not (0 <= i < L or i == LAST)})
        if missing:
            raise Unservable(
                f"ids {missing} match no decoder layer (L = {L}): AutoDeploy's "
                "detect_hidden_states_for_capture asserts every id has a layer "
                "(AssertionError at start-up)"
            )
        layers = sorted({L - 1 if i == LAST else i for i in ids})
        if len(layers) != len(ids):
            q.notes.append("duplicate ids collapse: eagle3_layers_to_capture is a set")
        if LAST in ids:
            q.problems.append(
                Problem(
                    "EC516",
                    f"id -1 is layer {L - 1}'s output (residual:{L}, before the final norm) on "
                    "AutoDeploy; TensorRT-LLM's PyTorch backend feeds the final post-norm state "
                    "for -1",
                )
            )
        if list(dict.fromkeys(ids)) != layers and LAST not in ids:
            q.notes.append(f"ids {list(ids)} are reordered: AutoDeploy captures {layers}")
        return q.answer(
            tuple(Position(k, k, Layer(k + 1)) for k in layers),
            f"built-in rules: {SOURCE}",
            layers,
        )
