"""vLLM tpu-inference: its EAGLE-3 rules per release (``tpu_rules.json``, written by
``scripts/gen_tpu_rules.py`` from each wheel's own code).

A default launch (``MODEL_IMPL_TYPE=auto``) runs an architecture on the JAX path when
tpu-inference registers a JAX model for it and does not prefer vLLM's code for it; there the
target's ``get_eagle3_aux_hidden_state_layers`` takes no config at all: whatever the draft
says, it captures ``(2, L//2, L-3)``, each as the residual stream entering that layer, in
layer order. The other architectures run vLLM's own model code (torchax): the vLLM rules of
the vLLM release installed beside it apply.
"""

from __future__ import annotations

from ..errors import Problem, Unservable
from ..layers import Layer
from .base import Engine, Position, Query, Resolution, eagle3_default_ids, releases_for
from .rule_table import RuleTable, span

_TABLE = RuleTable("tpu_rules.json", "tpu-inference", "0.32.0")
_data, releases, _v, _covers = _TABLE.data, _TABLE.releases, _TABLE.version, _TABLE.covers
_span = span


def _check(version: str) -> None:
    _TABLE.check(version)


class TPUInference(Engine):
    name = "tpu-inference"
    title = "tpu-inference"
    id_keys = ()  # the JAX path reads no ids from the draft

    def versions(self, spec: str | None) -> list[str | None]:
        return [None] if spec is None else list(releases_for(spec, releases(), "tpu-inference"))

    def _resolve(self, q: Query) -> Resolution:
        version = q.assume(releases()[-1], "tpu-inference")
        _check(version)
        arch = q.arch or "LlamaForCausalLM"
        if not q.arch:
            q.notes.append(f"no --arch: {arch}")
        q.arch = arch
        prefer = next(r for r in _data()["rows"] if _covers(r, version))["preferred"]
        row = next(
            (r for r in _data()["archs"] if arch in r["archs"] and _covers(r, version)), None
        )
        if row is None or arch in prefer:
            why = (
                "prefers vLLM's code for it"
                if arch in prefer
                else "has no JAX model with EAGLE-3 for it"
            )
            raise Unservable(
                f"tpu-inference {version} {why}: MODEL_IMPL_TYPE=auto runs vLLM's own model "
                f"code (torchax) for {arch[:60]}; resolve --engine vllm at the vLLM release "
                "installed beside it"
            )
        L = q.num_layers
        default = eagle3_default_ids(L)
        if q.ids is not None and list(q.ids) != default:
            q.problems.append(
                Problem(
                    "EC508",
                    f"tpu-inference {_span(row)} {row['file']} (JAX path) reads no ids: "
                    f"{list(q.ids)} are not used, it captures its default {default}",
                )
            )
        elif q.ids is None:
            q.notes.append(f"no ids: tpu-inference's default {default}")
        captured = sorted(set(default))
        return q.answer(
            tuple(Position(i, i, Layer(i)) for i in captured),
            f"built-in rules: tpu-inference {_span(row)} {row['file']} (JAX path, "
            f"MODEL_IMPL_TYPE=auto): get_eagle3_aux_hidden_state_layers() = ({row['default']}) "
            "whatever the draft says; captured before layer i (residual:i), in layer order",
            default,
        )
