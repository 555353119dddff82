"""MLX (mlx-vlm): its EAGLE-3 rules per release (``mlx_rules.json``, written by
``scripts/gen_mlx_rules.py`` from each mlx-vlm wheel's own code; mlx-lm has no EAGLE-3 drafter).

The drafter's config takes the ids from a top-level ``target_layer_ids``, else a top-level
``eagle_aux_hidden_state_layer_ids`` (never the nested ``eagle_config`` one); without either it
defaults to ``[2, D//2, max(D-3, 0)]`` where D counts the *draft's* own layers (1 for an
EAGLE-3 draft: ``[2, 0, 0]``). Id k becomes capture index ``max(k - 1, 0)`` (a given
``capture_layer_ids`` wins), and the target's loop appends the output of layer i for each
capture index i, in layer order, each layer once: id k is ``residual:k``, id 0 silently
``residual:1``. The draft's fc takes exactly 3 states.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..errors import Problem, Unservable
from ..layers import Layer
from .base import Engine, Position, Query, Resolution, releases_for
from .draft_config import DraftConfig, read_draft_json
from .rule_table import Release, RuleTable, span

_TABLE = RuleTable("mlx_rules.json", "mlx-vlm", "0.7.10")
_data, releases, _covers = _TABLE.data, _TABLE.releases, _TABLE.covers


@dataclass(frozen=True)
class Rules(Release):
    keys: tuple[str, ...]
    draft_layers: int  # D when the draft config has no transformer_layer_config
    fc: int


@functools.cache
def rules(version: str) -> Rules:
    row = _TABLE.row(version, " has no EAGLE-3 drafter")
    draft = row["draft"]
    return Rules(version, span(row), tuple(draft["keys"]), draft["draft_layers_default"], row["fc"])


class MlxIds(tuple[int, ...]):
    """What an mlx-vlm drafter takes from a draft's config.json: the ids (empty: none read),
    the key they came from, a ``capture_layer_ids`` override, the draft's own layer count D,
    and the id keys it ignores."""

    key: str | None
    capture: tuple[int, ...] | None
    draft_layers: int | None
    ignored: tuple[str, ...]

    def __new__(
        cls,
        ids: tuple[int, ...],
        key: str | None,
        capture: tuple[int, ...] | None,
        draft_layers: int | None,
        ignored: tuple[str, ...],
    ) -> MlxIds:
        self = super().__new__(cls, ids)
        self.key, self.capture, self.draft_layers, self.ignored = (
            key,
            capture,
            draft_layers,
            ignored,
        )
        return self


def _ints(value: object) -> tuple[int, ...] | None:
    if isinstance(value, list) and value and all(type(i) is int for i in value):
        return tuple(value)
    return None


def _model(arch: str | None, version: str, notes: list[str]) -> tuple[str, bool]:
    """The mlx-vlm model folder asked for, and whether its loop refuses unusable ids."""
    if not arch:
        raise Unservable("give --arch: the mlx-vlm model folder (model_type), e.g. qwen3_5")
    name = arch.lower()
    served = [r for r in _data()["models"] if name in r["models"]]
    for row in served:
        if _covers(row, version):
            return name, row["site"] == "after-strict"
    known = sorted({m for r in _data()["models"] if _covers(r, version) for m in r["models"]})
    raise Unservable(
        f"mlx-vlm {version} has no EAGLE-3 capture for {arch[:60]} (its model folders with "
        f"one: {', '.join(known)})"
    )


class MLX(Engine):
    name = "mlx"
    title = "MLX (mlx-vlm)"
    id_keys = ("target_layer_ids", "eagle_aux_hidden_state_layer_ids")

    def known_archs(self) -> frozenset[str]:
        return frozenset(m for r in _data()["models"] for m in r["models"])

    def versions(self, spec: str | None) -> list[str | None]:
        return [None] if spec is None else list(releases_for(spec, releases(), "mlx-vlm"))

    def default_ids(self, num_layers: int) -> list[int] | None:
        d = rules(releases()[-1]).draft_layers
        return [2, d // 2, max(d - 3, 0)]

    def draft_ids(self, draft: DraftConfig) -> tuple[int, ...] | None:
        data = read_draft_json(draft.path)
        keys = rules(releases()[-1]).keys
        found = {k: ids for k in keys if (ids := _ints(data.get(k))) is not None}
        key = next(iter(found), None)
        text = data.get("transformer_layer_config")
        layers = text.get("num_hidden_layers") if isinstance(text, dict) else None
        ignored = tuple(k for k in draft.aux_ids if k not in keys)
        return MlxIds(
            found[key] if key else (),
            key,
            _ints(data.get("capture_layer_ids")),
            layers if type(layers) is int and layers >= 0 else None,
            ignored,
        )

    def n_aux(self, draft: DraftConfig, version: str | None) -> int:
        return rules(version or releases()[-1]).fc

    def _resolve(self, q: Query) -> Resolution:
        rel = rules(q.assume(releases()[-1], "mlx-vlm"))
        q.arch, strict = _model(q.arch, rel.version, q.notes)
        ids, captures = self._captures(q, rel)
        L = q.num_layers
        reached = sorted({c for c in captures if 0 <= c < L})
        where = f"mlx-vlm {rel.span} models/{q.arch}"
        if strict and (len(reached) != len(captures)):
            raise Unservable(
                f"{where}: capture indices {list(captures)} repeat or leave [0, {L - 1}]: its "
                "loop raises ValueError (capture_layer_ids must be unique layer indices)"
            )
        if len(reached) != rel.fc:
            dropped = sorted({c for c in captures if not 0 <= c < L})
            why = f"capture indices {dropped} are never reached, " if dropped else ""
            raise Unservable(
                f"{where}: {why}{len(reached)} distinct states captured, the draft fc "
                f"(3 * target_hidden_size) takes {rel.fc}: shape mismatch at the first draft step"
            )
        q.note_order(ids, "mlx-vlm concatenates in layer order")
        by_capture = {c: i for i, c in zip(ids, captures)}
        return q.answer(
            tuple(Position(by_capture.get(c), c, Layer(c + 1)) for c in reached),
            f"built-in rules: mlx-vlm {rel.span} (speculative/drafters/eagle3/config.py reads "
            f"{', '.join(rel.keys)}; capture index max(id - 1, 0); models/{q.arch}: the output "
            f"of layer i, in layer order, each once; fc for {rel.fc} states)",
            ids,
        )

    def _captures(self, q: Query, rel: Rules) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The ids the drafter takes and the capture indices they become."""
        given = q.ids
        if isinstance(given, MlxIds):
            ids: tuple[int, ...] = tuple(given)
            if given.ignored:
                q.problems.append(
                    Problem(
                        "EC508",
                        f"mlx-vlm {rel.span} reads {' or '.join(rel.keys)} at the top level "
                        f"only: it ignores {', '.join(given.ignored)}",
                    )
                )
            if given.capture is not None:
                q.notes.append(f"capture_layer_ids {list(given.capture)} given: used as they are")
                return ids or given.capture, given.capture
            if not ids:
                d = rel.draft_layers if given.draft_layers is None else given.draft_layers
                ids = (2, d // 2, max(d - 3, 0))
                q.notes.append(
                    f"no ids read: the default counts the draft's own layers (D = {d}): {list(ids)}"
                )
        elif given is None:
            d = rel.draft_layers
            ids = (2, d // 2, max(d - 3, 0))
            q.notes.append(
                f"no ids: mlx-vlm's default counts the draft's own layers (D = {d} without a "
                f"transformer_layer_config): {list(ids)}, not the target's"
            )
        else:
            ids = tuple(given)
        moved = [i for i in ids if i < 1]
        if moved:
            q.problems.append(
                Problem(
                    "EC516",
                    f"mlx-vlm {rel.span} turns id {moved[0]} into capture index 0 "
                    f"(max(id - 1, 0)): it feeds residual:1, not "
                    f"{'embed' if moved[0] == 0 else f'id {moved[0]}'}",
                )
            )
        return ids, tuple(max(i - 1, 0) for i in ids)
