"""OpenVINO GenAI: its EAGLE-3 rules per release (``openvino_rules.json``, written by
``scripts/gen_openvino_rules.py`` from ``eagle3_model_transforms.cpp`` at each release tag of
openvinotoolkit/openvino.genai and a main snapshot; the wheels hold only the compiled library).

The ids are the draft model's ``hidden_layers_list`` property (``draft_model(path, device,
hidden_layers_list=[...])``; a ``hidden_layers_list`` in the draft IR's rt_info overrides it);
the draft's config.json is never read for them. Without them: ``{2, L/2, L-3}`` from the main
model's ``num_hidden_layers`` (asserted L >= 10). Exactly three. Id k taps the residual Add
after layer k's MLP (a MatMul of a Multiply named ``layers.k/``): the output of layer k,
``residual:k+1`` -- so the default names EAGLE's numbers but feeds each layer's *output*, one
layer past EAGLE's reference, vLLM's and SGLang's defaults. A repeated id or one no layer has
fails the "number of extracted hidden states" assertion. Releases to 2026.3.0.0 concatenate
in layer order; main in the list's order.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import EagleContractError, Unservable
from ..layers import Layer
from .base import Engine, Position, Query, Resolution, releases_for

if TYPE_CHECKING:
    from .draft_config import DraftConfig


@functools.cache
def _data() -> dict[str, Any]:
    text = (Path(__file__).parent / "openvino_rules.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def releases() -> list[str]:
    """The release tags covered, oldest first (the snapshot commit left out)."""
    return [r for row in _data()["rows"] for r in row["refs"] if "." in r]


def snapshot() -> str:
    return f"main@{_data()['snapshot']['commit'][:8]}"


def default_ids(num_layers: int) -> list[int]:
    return [2, num_layers // 2, num_layers - 3]


class OpenVINO(Engine):
    name = "openvino"
    title = "OpenVINO GenAI"
    id_keys = ()  # the hidden_layers_list property, never the draft's config.json

    def versions(self, spec: str | None) -> list[str | None]:
        return [None] if spec is None else list(releases_for(spec, releases(), "openvino-genai"))

    def default_ids(self, num_layers: int) -> list[int] | None:
        return default_ids(num_layers)

    def n_aux(self, draft: DraftConfig, version: str | None) -> int:
        return 3

    def config_line(self, ids: Sequence[int]) -> str:
        return f"hidden_layers_list: {json.dumps(list(ids))} (a draft_model property)"

    def _resolve(self, q: Query) -> Resolution:
        row = self._row(q)
        L = q.num_layers
        ids = q.given
        if ids is None:
            if L < row["least_layers"]:
                raise Unservable(
                    f"L = {L}: OpenVINO GenAI's default needs at least {row['least_layers']} "
                    "layers (assertion at start-up); set hidden_layers_list"
                )
            ids = tuple(default_ids(L))
            q.notes.append(
                f"no hidden_layers_list: OpenVINO's default {list(ids)} (2, L/2, L-3) as "
                "layer outputs, one layer past EAGLE's, vLLM's and SGLang's defaults; the "
                "draft's config.json is never read"
            )
        if len(ids) != row["count"]:
            raise Unservable(
                f"{len(ids)} ids: OpenVINO GenAI asserts exactly {row['count']} "
                "(hidden_layers_list)"
            )
        bad = sorted({i for i in ids if not 0 <= i < L})
        if bad or len(set(ids)) != len(ids):
            why = f"ids {bad} match no layer" if bad else "a repeated id is tapped once"
            raise Unservable(
                f"{why} (L = {L}): fewer hidden states than ids, its 'Number of extracted "
                "hidden states does not match' assertion at start-up"
            )
        order = sorted(ids) if row["order"] == "layer" else list(ids)
        if order != list(ids):
            q.notes.append(f"ids {list(ids)} are concatenated in layer order: {order}")
        where = "graph (layer) order" if row["order"] == "layer" else "the list's order"
        return q.answer(
            tuple(Position(k, k, Layer(k + 1)) for k in order),
            f"built-in rules: OpenVINO GenAI {q.version} {_data()['file']}: id k = the "
            f"residual add after layer k's MLP (residual:k+1), concatenated in {where}",
            order,
        )

    def _row(self, q: Query) -> dict[str, Any]:
        rows = _data()["rows"]
        if q.version is None:
            q.version = releases()[-1]
            q.notes.append(f"no version: openvino-genai {q.version} assumed")
        if q.version == snapshot():
            return dict(rows[-1])
        from packaging.version import InvalidVersion, Version

        try:
            asked = Version(q.version)
        except InvalidVersion:
            raise EagleContractError(
                f"{q.version!r} is not an openvino-genai version (e.g. {releases()[-1]})"
            ) from None
        if asked < Version(releases()[0]):
            raise Unservable(
                f"openvino-genai {q.version} has no EAGLE-3 (first in {releases()[0]})"
            )
        for row in rows:
            if q.version in row["refs"]:
                return dict(row)
        raise Unservable(
            f"openvino-genai {q.version} is not a covered release ({releases()[0]} to "
            f"{releases()[-1]}, and {snapshot()})"
        )
