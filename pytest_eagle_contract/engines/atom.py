"""ROCm ATOM: its EAGLE-3 rules (``atom_rules.json``, written by ``scripts/gen_atom_rules.py``
from the ROCm/ATOM repository: its tags from v0.1.3 and a snapshot commit; ATOM is not on the
package index).

ATOM reads the draft's ``eagle_config.eagle_aux_hidden_state_layer_ids`` only when that
``eagle_config`` also says ``use_aux_hidden_state: true``: its default there is false, and then
it captures no aux state at all and feeds the draft the target's final (post-norm) hidden
state without the draft's fc. A draft without ``eagle_config`` gets the target's default
``(2, L//2, L-3)``; a top-level ``eagle_aux_hidden_state_layer_ids`` is never read. Id i is the
residual stream entering layer i (``residual:i``; id 0 the embedding), in layer order, each
once; an id no layer reaches, or a repeated one, leaves fewer states than the draft expects
(a failure at the first forward).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Problem, Unservable
from ..layers import Layer
from .base import Engine, Position, Query, Resolution, eagle3_default_ids
from .draft_config import read_draft_json

if TYPE_CHECKING:
    from .draft_config import DraftConfig

NESTED = "eagle_config.eagle_aux_hidden_state_layer_ids"
_DEEPSEEK = "DeepseekV3ForCausalLM"


class Unread(tuple[int, ...]):
    """Ids a draft's config.json holds that ATOM does not read, and why: ``gate`` (its
    ``eagle_config`` lacks ``use_aux_hidden_state: true``) or ``top-level``."""

    why: str

    def __new__(cls, ids: Iterable[int], why: str) -> Unread:
        self = super().__new__(cls, ids)
        self.why = why
        return self


@functools.cache
def _data() -> dict[str, Any]:
    text = (Path(__file__).parent / "atom_rules.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def snapshot() -> str:
    return f"main@{_data()['snapshot']['commit'][:8]}"


def _ids(value: object) -> tuple[int, ...]:
    if isinstance(value, list) and all(type(i) is int for i in value):
        return tuple(value)
    return ()


class ATOM(Engine):
    name = "atom"
    title = "ROCm ATOM"
    id_keys = (NESTED,)

    def known_archs(self) -> frozenset[str]:
        return frozenset(a for r in _data()["rows"] for a in r["archs"])

    def default_ids(self, num_layers: int) -> list[int] | None:
        return eagle3_default_ids(num_layers)

    def draft_ids(self, draft: DraftConfig) -> tuple[int, ...] | None:
        data = read_draft_json(draft.path)
        nested = data.get("eagle_config")
        if isinstance(nested, dict):
            ids = _ids(nested.get("eagle_aux_hidden_state_layer_ids"))
            if nested.get("use_aux_hidden_state") is not True:
                return Unread(ids, "gate")
            return ids or None
        top = _ids(data.get("eagle_aux_hidden_state_layer_ids"))
        return Unread(top, "top-level") if top else None

    def config_line(self, ids: Sequence[int]) -> str:
        return (
            f'"eagle_config": {{"eagle_aux_hidden_state_layer_ids": {json.dumps(list(ids))}, '
            '"use_aux_hidden_state": true}'
        )

    def _resolve(self, q: Query) -> Resolution:
        row = self._row(q)
        arch = q.arch or _DEEPSEEK
        if not q.arch:
            q.notes.append(f"no --arch: {arch}")
        q.arch = arch
        if arch not in row["archs"]:
            raise Unservable(
                f"ATOM {q.version} has no EAGLE-3 capture for {arch[:60]} (served: "
                f"{', '.join(row['archs'])})"
            )
        where = f"ATOM {q.version} atom/config.py and {row['archs'][arch]}"
        L = q.num_layers
        ids = q.ids
        if isinstance(ids, Unread) and ids.why == "gate":
            q.problems.append(
                Problem(
                    "EC508",
                    "the draft's eagle_config lacks use_aux_hidden_state: true (ATOM's default "
                    "there is false): ATOM captures no aux state and feeds the draft the "
                    "target's final hidden state, without its fc"
                    + (f"; its ids {list(ids)} are not used" if ids else ""),
                )
            )
            return q.answer(
                (Position(None, -1, Layer(-1)),),
                f"built-in rules: {where}: use_aux_hidden_state off, no capture",
                (),
            )
        default = eagle3_default_ids(L)
        if isinstance(ids, Unread):
            q.problems.append(
                Problem(
                    "EC508",
                    f"ATOM reads only {NESTED} (with use_aux_hidden_state: true): the draft's "
                    f"top-level eagle_aux_hidden_state_layer_ids {list(ids)} are not used, it "
                    f"captures its default {default}",
                )
            )
            ids = None
        if ids is None:
            q.notes.append(f"no ids read: get_eagle3_aux_hidden_state_layers() = {default}")
        wanted = list(default if ids is None else ids)
        captured = sorted({i for i in wanted if 0 <= i < L})
        if len(captured) != len(wanted):
            how = (
                "zip(strict=True) into the drafter's buffers raises"
                if row["mismatch"] == "strict"
                else "the fc gets a narrower concatenation (shape mismatch)"
            )
            raise Unservable(
                f"ids {wanted}: {len(captured)} distinct states in layers 0..{L - 1} for "
                f"{len(wanted)} ids: {how} at the first forward"
            )
        if wanted != captured:
            q.notes.append(f"ids {wanted} are not ascending: ATOM concatenates in layer order")
        return q.answer(
            tuple(Position(i, i, Layer(i)) for i in captured),
            f"built-in rules: {where}: reads {NESTED} when use_aux_hidden_state is true; id i "
            "= the residual stream entering layer i (residual:i, id 0 the embedding), in "
            "layer order",
            None if ids is None else captured,
        )

    def _row(self, q: Query) -> dict[str, Any]:
        rows = _data()["rows"]
        if q.version is None:
            q.version = snapshot()
            q.notes.append(f"no version: the source snapshot {q.version}")
            return dict(rows[-1])
        wanted = q.version if q.version.startswith("v") else f"v{q.version}"
        for row in rows:
            if wanted in row["refs"] or q.version == snapshot():
                return dict(row)
        if wanted in ("v0.1.0", "v0.1.1", "v0.1.2"):
            raise Unservable(f"ATOM {q.version} has no EAGLE-3 (first in v0.1.3)")
        q.notes.append(f"ATOM {q.version} not read: the rules of the source snapshot {snapshot()}")
        return dict(rows[-1])
