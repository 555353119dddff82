"""The method-only engines: onnxruntime-genai (DFlash2, DSpark, MTP) and lmdeploy (DFlash),
whose rules are read here for those methods alone (``methods.METHOD_ONLY_ENGINES``).

Their rules are ``method_engines_rules.json``, written by ``scripts/read_engine_wheels.py
--rules`` from the wheels (docs/layers.md, "Methods per engine and release"):

- onnxruntime-genai 0.16.0 on (``models/builders/qwen.py``): the builder exports a DFlash2 or
  DSpark drafter for the Qwen3.5 targets only; it reads ``dflash_config.target_layer_ids``
  alone (never ``dspark_target_layer_ids``), adds 1 to each id to pick the residual entering
  that layer (``aux_hidden_state_layers``, which must lie in [1, L)), so tap t =
  ``residual:t+1``; an empty list or a tap on the last layer is refused at export. An MTP head
  on Qwen3.5 reads the hidden_states output, the final norm's (``final_norm``).
- lmdeploy 0.18.0 (``pytorch/spec_decode/dflash_utils.py``): DFlash on the targets whose model
  file captures a layer's output (qwen3, qwen3_5 and its MoE); it reads
  ``dflash_config.target_layer_ids`` alone, refuses ids that are not strictly increasing or
  lie outside [0, L) and a draft whose ``num_target_layers`` is not the target's (with
  ``--ids`` alone there is no config to read it from: the answer notes it as not checked);
  without ids it falls back to SGLang's formula (EC522, as SGLang's guess is reported).
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import EagleContractError, Unservable
from ..layers import Layer
from ..methods import METHOD_ONLY_ENGINES
from .base import Position, Query, Resolution

TITLES = {"dflash": "DFlash", "dflash2": "DFlash2", "dspark": "DSpark", "mtp": "MTP"}


@functools.cache
def table() -> dict[str, Any]:
    """method_engines_rules.json, read once."""
    data: dict[str, Any] = json.loads(
        Path(__file__).with_name("method_engines_rules.json").read_text()
    )
    return data


def releases(engine: str, method: str) -> list[str]:
    """The releases of ``engine`` read that serve ``method``, oldest first."""
    rows: dict[str, Any] = table()[engine]["releases"]
    return [v for v, row in rows.items() if row is not None and method in row["methods"]]


def refusal(engine: str, method: str) -> str | None:
    """Why ``method`` on method-only ``engine`` is not answered here, or None."""
    served = METHOD_ONLY_ENGINES[engine]
    if method in served:
        return None
    return (
        f"{engine}: rules are read here only for --method {' / '.join(served)} "
        f"(docs/layers.md); not for {method}"
    )


def _row(engine: str, method: str, q: Query) -> tuple[str, dict[str, Any]]:
    rows: dict[str, Any] = table()[engine]["releases"]
    read = list(rows)
    served = releases(engine, method)
    version = q.assume(served[-1], engine)
    if version not in rows:
        raise Unservable(
            f"{engine} {version}: not read for {TITLES[method]} here; read: {', '.join(read)} "
            "(docs/layers.md)"
        )
    row = rows[version]
    if row is None or method not in row["methods"]:
        raise Unservable(
            f"{engine} {version} has no {TITLES[method]} path"
            + (f" (from {served[0]} on)" if served else "")
        )
    return version, row


def _target(q: Query, row: Mapping[str, Any], engine: str, version: str, what: str) -> str:
    targets: list[str] = row["targets"]
    if not q.arch:
        raise Unservable(
            f"give --arch or --target-config: {engine} {version} serves {what} only for "
            f"{', '.join(targets)}"
        )
    names = [str(q.arch), *getattr(q.arch, "also", ())]
    name: str | None = next((n for n in names if n in targets), None)
    if name is None:
        raise Unservable(
            f"{engine} {version}: {str(q.arch)[:60]} is not a {what} target there (only "
            f"{', '.join(targets)}; {row['file']})"
        )
    return name


def _tap_list(data: Mapping[str, Any] | None, ids: Sequence[int] | None) -> Any:
    """The draft's ``dflash_config.target_layer_ids`` as written (None where absent)."""
    if ids is not None:
        return list(ids)
    dc = (data or {}).get("dflash_config")
    return dc.get("target_layer_ids") if isinstance(dc, dict) else None


def _ints(value: Any, where: str) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in value
    ):
        raise EagleContractError(
            f"{where}: dflash_config.target_layer_ids must be a list of integers, not {value!r:.80}"
        )
    return list(value)


def resolve(
    engine: str,
    method: str,
    num_layers: int,
    data: Mapping[str, Any] | None,
    ids: Sequence[int] | None = None,
    arch: Any = None,
    version: str | None = None,
) -> Resolution:
    """``method``'s draft (its config.json ``data``, or ``ids`` as its tap list) on the
    method-only ``engine``. Raises Unservable (not served) or EagleContractError (a bad
    config)."""
    why = refusal(engine, method)
    if why is not None:
        raise Unservable(why)
    q = Query(engine, num_layers, None, arch, version)
    ver, row = _row(engine, method, q)
    if engine == "onnxruntime-genai":
        return _ortg(method, q, data, ids, ver, row)
    return _lmdeploy(q, data, ids, ver, row)


def _ortg(
    method: str,
    q: Query,
    data: Mapping[str, Any] | None,
    ids: Sequence[int] | None,
    version: str,
    row: Mapping[str, Any],
) -> Resolution:
    where = f"onnxruntime-genai {version} {row['file']}"
    q.arch = _target(q, row, "onnxruntime-genai", version, TITLES[method])
    if method == "mtp":
        if row["mtp"] != "final_norm":
            raise Unservable(f"{where}: which state the MTP head reads was not read")
        return q.answer(
            (Position(None, 0, Layer.parse("final_norm")),),
            f"MTP: {where} exports the Qwen3.5 MTP head on the target's hidden_states output "
            "(the last layer norm's output 0): final_norm",
        )
    value = _tap_list(data, ids)
    if value is None:
        extra = (
            " (dspark_target_layer_ids is not read there)"
            if data and data.get("dspark_target_layer_ids") is not None
            else ""
        )
        raise Unservable(
            f"{where}: the draft has no dflash_config.target_layer_ids{extra}: the exporter "
            "refuses it (no fallback)"
        )
    taps = _ints(value, where)
    if not taps:
        raise Unservable(
            f"{where}: the checkpoint must define at least one target_layer_ids entry "
            "(ValueError at export)"
        )
    plus = int(row["plus"])
    L = q.num_layers
    bad = [t for t in taps if not 1 <= t + plus < L]
    if bad:
        raise Unservable(
            f"{where}: target_layer_ids {bad} lie outside [0, {L - 1}): the exporter cannot "
            "expose the output of the last layer or any outside the target (ValueError at export)"
        )
    q.ids = list(taps)
    positions = tuple(Position(t, t + plus, Layer(t + plus)) for t in taps)
    return q.answer(
        positions,
        f"{TITLES[method]}: {where} reads {row['key']} only, aux_hidden_state_layers = id + "
        f"{plus} (the residual entering that layer): tap t = residual:t+{plus}",
        taps,
    )


def _lmdeploy(
    q: Query,
    data: Mapping[str, Any] | None,
    ids: Sequence[int] | None,
    version: str,
    row: Mapping[str, Any],
) -> Resolution:
    from ..errors import Problem
    from .dflash import zlab_formula

    where = f"lmdeploy {version} {row['file']}"
    q.arch = _target(q, row, "lmdeploy", version, "DFlash")
    L = q.num_layers
    data = data or {}
    depth = data.get("num_target_layers")
    if row["depth_check"] and ids is None and depth != L:
        raise Unservable(
            f"{where}: the draft declares num_target_layers={depth!r:.20}, the target has {L} "
            "(DFlash draft/target depth mismatch, ValueError at start-up)"
        )
    if row["depth_check"] and ids is not None:
        q.notes.append(
            f"num_target_layers not checked: --ids give no draft config; lmdeploy {version} "
            f"refuses a draft whose num_target_layers is not the target's {L} (ValueError at "
            "start-up): give --draft-config to check it"
        )
    value = _tap_list(data, ids)
    guessed = value is None
    if guessed:
        n = data.get("num_hidden_layers")
        if type(n) is not int or n < 1:
            raise Unservable(
                f"{where}: no dflash_config.target_layer_ids and no positive num_hidden_layers "
                "(ValueError at start-up)"
            )
        try:
            taps = zlab_formula(L, n)
        except Unservable as exc:
            raise Unservable(f"{where}: {exc}") from None
        how = f"{version} falls back to build_target_layer_ids(L={L}, n={n})"
    else:
        taps = _ints(value, where)
        if not taps and row["nonempty"]:
            raise Unservable(f"{where}: dflash_config.target_layer_ids must not be empty")
    if row["increasing"] and any(b <= a for a, b in itertools.pairwise(taps)):
        raise Unservable(
            f"{where}: target_layer_ids {taps} must be strictly increasing and duplicate-free "
            "(ValueError at start-up)"
        )
    bad = [t for t in taps if t < 0 or t >= L]
    if bad and row["range_check"]:
        raise Unservable(f"{where}: target_layer_ids {bad} lie outside [0, {L}) (ValueError)")
    plus = int(row["plus"])
    q.ids = list(taps)
    positions = tuple(Position(t, t, Layer(t + plus)) for t in taps)
    if guessed:
        q.problems.append(
            Problem(
                "EC522",
                f"the draft config has no dflash_config.target_layer_ids: lmdeploy {how} = "
                f"{list(taps)}, feeding {', '.join(str(p.layer) for p in positions)}; the draft "
                "may have been trained on other layers",
            )
        )
    return q.answer(
        positions,
        f"DFlash: {where} reads {', '.join(row['keys'])} only, else build_target_layer_ids(L, "
        f"draft num_hidden_layers) (SGLang's formula); {q.arch}'s model appends layer t's "
        f"output for id t: tap t = residual:t+{plus}",
        taps,
    )
