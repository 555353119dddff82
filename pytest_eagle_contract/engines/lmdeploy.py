"""lmdeploy (its PyTorch engine): its EAGLE-3 rules per release (``lmdeploy_rules.json``,
written by ``scripts/read_engine_wheels.py --eagle3-rules`` from the 0.16.0-0.18.0 wheels;
docs/layers.md, "lmdeploy EAGLE-3").

The target's taps are fixed, never read from the draft: the configuration builder of an
EAGLE-3 target sets ``aux_hidden_state_layers = (2, L // 2, L - 3)``
(``pytorch/configurations/llama.py`` for ``architectures[0] == LlamaForCausalLM``;
``configurations/kimi_k2.py`` for ``model_type`` kimi_k2, and kimi_k25 through it, from
0.17.0), and the model captures the state entering layer i for each (``residual:i``): Llama in
layer order, each once, its drafter's fc built for 3 states; Kimi-K2 in that listed order,
refusing a target under 5 layers. The draft's ``eagle_aux_hidden_state_layer_ids`` are not
used (the Kimi-K2.5 drafter counts them: exactly 3 unique), so a draft whose ids name other
layers is fed these, silently (EC508). Every other target's EAGLE-3 path was not read: it is
refused, with the reason. lmdeploy's DFlash rules are ``method_engines.py``'s.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Problem, Unservable
from ..layers import Layer
from .base import Engine, Position, Query, Resolution, eagle3_default_ids, releases_for

if TYPE_CHECKING:
    from .draft_config import DraftConfig

DRAFT_KEYS = ("eagle_config.eagle_aux_hidden_state_layer_ids", "eagle_aux_hidden_state_layer_ids")


@functools.cache
def table() -> dict[str, Any]:
    """lmdeploy_rules.json, read once."""
    data: dict[str, Any] = json.loads(
        (Path(__file__).parent / "lmdeploy_rules.json").read_text("utf-8")
    )
    return data


def releases() -> list[str]:
    """The releases read whose EAGLE-3 taps are encoded, oldest first."""
    rows: dict[str, Any] = table()["lmdeploy"]["releases"]
    return [v for v, row in rows.items() if row is not None]


def _target(row: dict[str, Any], q: Query, version: str) -> dict[str, Any]:
    """The target path of ``row`` the asked architecture takes, as lmdeploy picks it (Llama's
    by ``architectures[0]``, Kimi-K2's by ``model_type``); refused where none matches."""
    served = "; ".join(
        f"{t['by']} {' / '.join(t['names'])} ({t['config']})" for t in row["targets"]
    )
    if not q.arch:
        raise Unservable(
            f"give --arch or --target-config: lmdeploy {version} sets EAGLE-3 taps only for "
            f"{served}"
        )
    from .arch_names import architectures, model_types

    given = [str(q.arch), *getattr(q.arch, "also", ())]
    targets: list[dict[str, Any]] = row["targets"]
    for t in targets:
        names = {n.lower() for n in t["names"]}
        if any(g.lower() in names for g in given):
            return t
        # an architecture whose every model_type is one of them (KimiK25ForConditionalGeneration:
        # kimi_k25); DeepseekV3ForCausalLM is also deepseek_v3's, which has no path
        if t["by"] == "model_type" and any(
            (types := model_types(g)) and all(m in names for m in types) for g in given
        ):
            return t
        # a model_type whose every architecture is one of them (llama: LlamaForCausalLM)
        if t["by"] != "model_type" and any(
            (archs := architectures(g)) and all(a.lower() in names for a in archs) for g in given
        ):
            return t
    by_type = any(t["by"] == "model_type" for t in row["targets"])
    raise Unservable(
        f"lmdeploy {version}: {str(q.arch)[:60]} has no EAGLE-3 capture path read here: only "
        f"{served} set aux_hidden_state_layers"
        + (
            " (a Kimi-K2 checkpoint is picked by its model_type: give --arch kimi_k2 or "
            "--target-config)"
            if by_type
            else ""
        )
    )


def _span(config: str) -> str:
    """The releases read whose EAGLE-3 path goes through ``config``: one label for them all,
    so that releases that resolve alike read alike."""
    rows: dict[str, Any] = table()["lmdeploy"]["releases"]
    found = [
        v
        for v, r in rows.items()
        if r is not None and any(t["config"] == config for t in r["targets"])
    ]
    return found[0] if len(found) == 1 else f"{found[0]}..{found[-1]}"


class LMDeploy(Engine):
    name = "lmdeploy"
    title = "lmdeploy"
    id_keys = DRAFT_KEYS  # what the draft says, which lmdeploy does not use (EC508)

    def known_archs(self) -> frozenset[str]:
        rows = [r for r in table()["lmdeploy"]["releases"].values() if r is not None]
        return frozenset(n for r in rows for t in r["targets"] for n in t["names"])

    def versions(self, spec: str | None) -> list[str | None]:
        return [None] if spec is None else list(releases_for(spec, releases(), "lmdeploy"))

    def n_aux(self, draft: DraftConfig, version: str | None) -> int:
        return 3  # llama_eagle3.py: target_hidden_size * 3; Kimi-K2.5: exactly 3 ids

    def resolve(
        self,
        num_layers: int,
        ids: Sequence[int] | None,
        arch: str | None,
        version: str | None,
        use_installed: bool = True,
    ) -> Resolution:
        """As ``Engine.resolve``, without mapping the architecture onto other spellings:
        lmdeploy picks a path by ``architectures[0]`` or ``model_type`` exactly (a
        DeepseekV3ForCausalLM is Kimi-K2's and DeepSeek-V3's; only the first has a path)."""
        return self._resolve(Query(self.name, num_layers, ids, arch, version, use_installed))

    def _resolve(self, q: Query) -> Resolution:
        rows: dict[str, Any] = table()["lmdeploy"]["releases"]
        version = q.assume(releases()[-1], "lmdeploy")
        if version not in rows:
            raise Unservable(
                f"lmdeploy {version} not read: its EAGLE-3 taps are read for "
                f"{', '.join(releases())} (docs/layers.md)"
            )
        row = rows[version]
        if row is None:
            raise Unservable(f"lmdeploy {version}: no fixed EAGLE-3 taps read there")
        target = _target(row, q, version)
        L = q.num_layers
        where = f"lmdeploy {_span(target['config'])} {target['config']}"
        low = target["min_layers"]
        if low is not None and L < low:
            raise Unservable(
                f"{where}: the EAGLE3 target model must contain at least {low} layers, it has "
                f"{L} (ValueError at start-up)"
            )
        fixed = eagle3_default_ids(L)
        captured = sorted(set(fixed)) if target["order"] == "layer" else list(fixed)
        width = target["draft_fc"]
        if width is not None and len(captured) != width:
            raise Unservable(
                f"{where}: the taps {fixed} capture {len(captured)} states on {L} layers, the "
                f"drafter's fc takes {width}"
            )
        said = None if q.ids is None else list(q.ids)
        if said is not None and said != fixed:
            q.problems.append(
                Problem(
                    "EC508",
                    f"{where} sets the target's aux_hidden_state_layers = {fixed} and reads no "
                    f"ids from the draft config: {said} are not used",
                )
            )
        elif said is None:
            q.notes.append(f"no ids read: aux_hidden_state_layers = {fixed}")
        how = "in layer order, each once" if target["order"] == "layer" else "in that order"
        return q.answer(
            tuple(Position(None, i, Layer(i)) for i in captured),
            f"built-in rules: {where} sets aux_hidden_state_layers = (2, L//2, L-3) whatever "
            f"the draft says; {target['model']} captures the state entering layer i "
            f"(residual:i), {how}",
            fixed,
        )
