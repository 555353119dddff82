"""TensorRT-LLM (PyTorch backend): which target layers its EAGLE-3 capture feeds the draft.

Read from NVIDIA/TensorRT-LLM's own code (docs/layers.md, "TensorRT-LLM", says which files
and how); every rule below holds for each release in ``RELEASES``:

- The ids are ``speculative_config.eagle3_layers_to_capture`` (``EagleDecodingConfig`` in
  ``llmapi/llm_args.py``, a ``Set[int]``). The draft's ``config.json`` is never read for
  them: ``eagle_aux_hidden_state_layer_ids`` there changes nothing.
- No ids: ``(1, L//2 - 1, L - 4)`` (``_speculative/eagle3.py``, ``Eagle3SpecMetadata``);
  with ``L <= 5`` that default raises ValueError at start-up.
- Id k is captured at the end of decoder layer k as ``hidden_states + residual``: the
  output of layer k, ``residual:k+1``. No id captures the embedding. Id -1 is the final
  post-norm state.
- The set is sorted, with -1 moved to the end; the fc gets the states in that order.
- An id that no layer matches (k >= L, k < -1) is never written: its slice of the capture
  buffer (``torch.empty``) stays uninitialised and the fc reads it as it is.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import EagleContractError, Problem, Unservable
from ..layers import Layer
from .base import Engine, Position, Query, Resolution, releases_for

if TYPE_CHECKING:
    from .draft_config import DraftConfig

# The stable releases on PyPI (`pip index versions tensorrt-llm`) this rule set covers.
RELEASES: tuple[str, ...] = ("1.0.0", "1.1.0", "1.2.0", "1.2.1")
NEWEST = RELEASES[-1]
FINAL = -1  # the id TensorRT-LLM gives the final post-norm hidden state
SOURCE = (
    "_torch/speculative/eagle3.py Eagle3SpecMetadata (id k = output of "
    "decoder layer k; -1 = post-norm, last; a sorted set)"
)


def default_ids(num_layers: int) -> list[int]:
    """TensorRT-LLM's default ``eagle3_layers_to_capture``: ``(1, L//2 - 1, L - 4)``."""
    return [1, num_layers // 2 - 1, num_layers - 4]


def capture_order(ids: Sequence[int]) -> list[int]:
    """The ids as TensorRT-LLM orders its capture buffer: a sorted set, -1 last."""
    kept = sorted(set(ids))
    return [i for i in kept if i != FINAL] + ([FINAL] if FINAL in kept else [])


def layer_of(capture_id: int) -> Layer:
    """The canonical layer id ``capture_id`` feeds: ``residual:k+1``, or final_norm for -1."""
    return Layer(-1) if capture_id == FINAL else Layer(capture_id + 1)


def _parse(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError:
        return ()


def trtllm_versions(spec: str | None) -> list[str]:
    """The covered releases a version or specifier (">=1.1", "1.2.0") names."""
    return [NEWEST] if spec is None else releases_for(spec, RELEASES, "tensorrt-llm")


def _check_version(version: str) -> None:
    v = _parse(version)
    if not v:
        raise EagleContractError(f"{version!r} is not a tensorrt-llm version (e.g. {NEWEST})")
    if version not in RELEASES:
        raise EagleContractError(
            f"tensorrt-llm {version} is not a covered release ({', '.join(RELEASES)}): its "
            "capture rules were not read"
        )


class TensorRTLLM(Engine):
    name = "trtllm"
    title = "TensorRT-LLM"
    id_keys = ()  # the ids come from speculative_config, never from the draft's config.json

    def versions(self, spec: str | None) -> list[str | None]:
        return list(trtllm_versions(spec))

    def default_ids(self, num_layers: int) -> list[int] | None:
        return default_ids(num_layers)

    def draft_ids(self, draft: DraftConfig) -> tuple[int, ...] | None:
        return None  # TensorRT-LLM reads no ids from the draft config

    def n_aux(self, draft: DraftConfig, version: str | None) -> int:
        return 3  # EagleDecodingConfig.num_capture_layers without eagle3_layers_to_capture

    def config_line(self, ids: Sequence[int]) -> str:
        return f"speculative_config: {{eagle3_layers_to_capture: {json.dumps(list(ids))}}}"

    def _resolve(self, q: Query) -> Resolution:
        num_layers, notes = q.num_layers, q.notes
        version = q.assume(NEWEST, "tensorrt-llm")
        _check_version(version)
        ids = q.ids
        if ids is None:
            if num_layers <= 5:
                raise Unservable(
                    f"L = {num_layers}: TensorRT-LLM's default capture needs more than 5 "
                    "layers (ValueError at start-up); set eagle3_layers_to_capture"
                )
            ids = default_ids(num_layers)
            notes.append(
                f"no eagle3_layers_to_capture: TensorRT-LLM's default {list(ids)} "
                "(1, L//2-1, L-4); the draft config's ids are never read"
            )
        order = capture_order(ids)
        if FINAL in order:
            notes.append(
                "id -1: the final post-norm state, captured last (read in TensorRT-LLM's code; "
                "not confirmed for every covered release: docs/layers.md)"
            )
        if len(order) != len(ids):
            notes.append("duplicate ids collapse: eagle3_layers_to_capture is a set")
        if list(dict.fromkeys(ids)) != order:
            notes.append(f"ids {list(ids)} are reordered: TensorRT-LLM captures {order}")
        missed = [i for i in order if i != FINAL and not 0 <= i < num_layers]
        if missed:
            q.problems.append(
                Problem(
                    "EC511",
                    f"ids {missed} match no decoder layer (L = {num_layers}): TensorRT-LLM "
                    "never writes their part of the capture buffer and the fc reads it "
                    "uninitialised",
                )
            )
        kept = [i for i in order if i not in missed]
        return q.answer(
            tuple(Position(i, i, layer_of(i)) for i in kept),
            f"built-in rules: tensorrt-llm {version} {SOURCE}",
        )
