"""DFlash: the draft's taps mapped onto canonical layers, per engine and release.

A DFlash draft names its taps in ``dflash_config.target_layer_ids`` (top-level
``target_layer_ids`` where SGLang reads it as a fallback): tap t is the output of target
layer t, HF's ``hidden_states[t + 1]``, the residual stream entering layer t + 1
(``residual:t+1``). Each engine maps the taps onto its own capture ids; where the list is
absent it guesses. What each engine does, read from its released code (docs/methods.md,
docs/layers.md):

- SGLang (``dflash_rules.json``, ``scripts/gen_dflash_rules.py``, 0.5.11 on): the list under
  ``dflash_config.target_layer_ids``, else top-level ``target_layer_ids``; absent, the
  fallback ``build_target_layer_ids(L, n)`` (``speculative/dflash_utils.py``) with n the
  draft's ``num_hidden_layers``; ids outside ``[0, L)`` refused; the target's
  ``set_dflash_layers_to_capture`` captures before layer t + 1 for most architectures.
- vLLM (``vllm_rules.json``: the keys each runner reads, what it adds): from 0.20.0 the V1
  runner reads ``dflash_config.target_layer_ids`` as vLLM ids (0.20.x-0.21.x as they are,
  from 0.22.0 + 1); absent, vLLM's EAGLE-3 default ``(2, L//2, L-3)`` while the DFlash fc
  takes one state per draft layer (``qwen3_dflash.py`` 0.34.0).
- tpu-inference (``tpu_rules.json``'s ``dflash``, 0.25.0 on): JAX Llama / Qwen3 targets read
  ``dflash_config.target_layer_ids`` only, else ``range(L - n, L)`` (n the draft's
  ``num_target_layers``, else L), layer i's output for id i (engines/tpu.py).
- vllm-ascend (``ascend_rules.json``'s ``dflash``, 0.23.0 on): its own proposer, the paired
  vLLM release's V1 rules for the taps (engines/ascend.py).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import EagleContractError, Problem, Unservable
from ..layers import Layer
from ..limits import MOST_LAYERS
from .base import Position, Query, Resolution, eagle3_default_ids
from .dflash_draft import TAP_KEYS, DFlashDraft, guess_problem, mlx_unrouted

# every dotted key some engine reads DFlash-era ids from (vLLM's reader reads them all)
_READ_KEYS = (
    *TAP_KEYS,
    "eagle_aux_hidden_state_layer_ids",
    "eagle_config.eagle_aux_hidden_state_layer_ids",
    "dspark_target_layer_ids",
    "dflash_config.layer_ids",
    "eagle_config.layer_ids",
)
ENGINES = ("sglang", "vllm", "llama.cpp", "mlx", "tpu-inference", "vllm-ascend")
# mlx-vlm's qwen3_dflash drafter (speculative/drafters/qwen3_dflash/config.py, 0.6.15 to
# 0.7.10 alike): DFlashConfig.target_layer_ids defaults to this list when the draft has none
MLX_DEFAULT_TAPS = (1, 8, 15, 22, 29)
MLX_FILE = "mlx_vlm/speculative/drafters/qwen3_dflash/config.py"
GGUF_KEY = "gguf:dflash.target_layers"
LLAMACPP_READ = "0.3.36"  # the llama-cpp-python sdist whose vendored llama.cpp was read
SGLANG_DEFAULT_ARCH = "LlamaForCausalLM"


def _get(data: Mapping[str, Any], dotted: str) -> Any:
    outer, _, inner = dotted.rpartition(".")
    holder = data.get(outer) if outer else data
    return holder.get(inner) if isinstance(holder, dict) else None


def _ids(value: Any, key: str, path: Path | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in value
    ):
        raise EagleContractError(f"{path}: {key} must be a list of integers, not {value!r:.80}")
    return tuple(value) if value else None


def _size(data: Mapping[str, Any], key: str, path: Path | None) -> int | None:
    for where in (data.get("dflash_config"), data):
        value = where.get(key) if isinstance(where, dict) else None
        if value is None:
            continue
        if type(value) is not int or value < 0:
            raise EagleContractError(f"{path}: {key} must be a whole number, not {value!r:.40}")
        if key in _LAYER_COUNTS and value > MOST_LAYERS:
            raise EagleContractError(
                f"{path}: {key} is {value!r:.40}, above {MOST_LAYERS} (a plausibility bound: no "
                "real model comes near it; docs/security.md)"
            )
        return value
    return None


_LAYER_COUNTS = ("num_hidden_layers", "num_target_layers")


def _signed(data: Mapping[str, Any], key: str, path: Path | None) -> int | None:
    """An integer setting under ``dflash_config`` first, then at the top level (SGLang's and
    vLLM's order for ``mask_token_id``), negative values kept."""
    for where in (data.get("dflash_config"), data):
        value = where.get(key) if isinstance(where, dict) else None
        if value is None:
            continue
        if type(value) is not int:
            raise EagleContractError(f"{path}: {key} must be an integer, not {value!r:.40}")
        return value
    return None


def parse_dflash_draft(data: Mapping[str, Any], path: Path | None = None) -> DFlashDraft:
    """A DFlash draft config's tap keys and sizes. Raises EagleContractError."""
    found = {}
    for key in _READ_KEYS:
        ids = _ids(_get(data, key), key, path)
        if ids is not None:
            found[key] = ids
    speculators = data.get("speculators_model_type") == "dflash"
    archs, dc = data.get("architectures"), data.get("dflash_config")
    vocab = _size(data, "vocab_size", path)
    if speculators:
        found |= _speculators_ids(data, path)
        layer = data.get("transformer_layer_config")
        if vocab is None and isinstance(layer, dict):
            vocab = _size(layer, "vocab_size", path)
    block = _size(data, "block_size", path)
    if block == 0:  # a block is the anchor then block_size - 1 masked positions
        raise EagleContractError(f"{path}: block_size must be at least 1 (the anchor), not 0")
    return DFlashDraft(
        path,
        found,
        _size(data, "num_hidden_layers", path),
        _size(data, "num_target_layers", path),
        block,
        _signed(data, "mask_token_id", path),
        vocab,
        _get(data, "dflash_config.sample_from_anchor") is True
        or data.get("sample_from_anchor") is True,
        speculators,
        _speculative_tokens(data) if speculators else None,
        data.get("model_type") if isinstance(data.get("model_type"), str) else None,
        tuple(a for a in archs if isinstance(a, str)) if isinstance(archs, list) else (),
        isinstance(dc, dict),
        isinstance(dc, dict) and (dc.get("projector_type") == "dspark" or _rank(data, dc) > 0),
    )


def _rank(data: Mapping[str, Any], dc: Mapping[str, Any]) -> int:
    """mlx-vlm's ``int(config.get("markov_rank") or dflash_config.get("markov_rank") or 0)``."""
    value = data.get("markov_rank") or dc.get("markov_rank") or 0
    return value if type(value) is int else 0


def _speculators_ids(data: Mapping[str, Any], path: Path | None) -> dict[str, tuple[int, ...]]:
    """A speculators-format DFlash config's ``aux_hidden_state_layer_ids`` (vLLM ids: id k
    = ``residual:k``, speculators 0.9.0 ``models/dflash/config.py``), as vLLM 0.34.0 reads
    them (``transformers_utils/configs/speculators/algos.py`` ``update_dflash``): under
    ``eagle_aux_hidden_state_layer_ids`` as they are, and under
    ``dflash_config.target_layer_ids`` one less ("DFlash configs use different indexing")."""
    ids = _ids(data.get("aux_hidden_state_layer_ids"), "aux_hidden_state_layer_ids", path)
    if ids is None:
        return {}
    return {
        "eagle_aux_hidden_state_layer_ids": ids,
        TAP_KEYS[0]: tuple(i - 1 for i in ids),
    }


def _speculative_tokens(data: Mapping[str, Any]) -> int | None:
    """``speculators_config.proposal_methods[0].speculative_tokens``: what vLLM 0.34.0 takes
    as ``num_speculative_tokens`` when the launch gives none
    (``SpeculatorsConfig.build_vllm_speculative_config``)."""
    config = data.get("speculators_config")
    methods = config.get("proposal_methods") if isinstance(config, dict) else None
    first = methods[0] if isinstance(methods, list) and methods else None
    value = first.get("speculative_tokens") if isinstance(first, dict) else None
    return value if type(value) is int and value > 0 else None


def read_dflash_draft(path: str | Path) -> DFlashDraft:
    """A DFlash draft's config.json (or its folder), or a GGUF DFlash draft (its
    ``dflash.target_layers``). Raises EagleContractError."""
    from . import gguf_meta
    from .draft_config import read_draft_json

    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if gguf_meta.is_gguf(path):
        meta = gguf_meta.read_metadata(path)
        found = {k: v for k, v in gguf_meta.draft_ids(path, meta).items() if k == GGUF_KEY}
        return DFlashDraft(path, found, gguf_meta.size(meta, "dflash.block_count"))
    return parse_dflash_draft(read_draft_json(path), path)


def zlab_formula(num_layers: int, n: int) -> list[int]:
    """SGLang's ``build_target_layer_ids(L, n)`` (``speculative/dflash_utils.py``, 0.5.11 to
    0.5.23 alike; it says it mirrors z-lab's DFlash helper): n taps spread from layer 1 to
    layer L - 3, ``[L // 2]`` for one. Raises Unservable where SGLang raises, UsageError where
    L or n is above this tool's layer limit (limits.MOST_LAYERS: one tap per draft layer)."""
    from ..limits import check_layers

    check_layers("build_target_layer_ids: the target's layer count L", num_layers)
    check_layers("build_target_layer_ids: the draft's num_hidden_layers n", n)
    if n <= 0:
        raise Unservable(f"DFlash fallback: the draft's num_hidden_layers is {n}")
    if n == 1:
        return [num_layers // 2]
    if num_layers - 3 < 1:
        raise Unservable(
            f"DFlash layer selection requires num_target_layers >= 4 (L = {num_layers})"
        )
    span = num_layers - 4
    return [round(1 + i * span / (n - 1)) for i in range(n)]


FORMULAS = {"zlab": ("build_target_layer_ids", zlab_formula)}


@functools.cache
def _table() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(__file__).with_name("dflash_rules.json").read_text())
    return data


def sglang_releases() -> list[str]:
    """The SGLang releases whose wheels were read (with or without DFlash), oldest first."""
    return list(_table()["sglang"]["releases"])


def releases(engine: str) -> list[str]:
    """The releases of ``engine`` whose DFlash rules are read (those with DFlash)."""
    from packaging.version import Version

    if engine == "sglang":
        first = Version(_table()["sglang"]["rows"][0]["since"])
        return [v for v in sglang_releases() if Version(v) >= first]
    if engine == "vllm":
        return list(_table()["vllm"]["releases"])
    if engine == "llama.cpp":
        return [LLAMACPP_READ]
    if engine == "mlx":
        return _mlx_releases()
    if engine == "tpu-inference":
        from .tpu import dflash_releases

        return dflash_releases()
    if engine == "vllm-ascend":
        from .ascend import dflash_releases as ascend_releases

        return ascend_releases()
    return []


def mlx_default_taps() -> list[int]:
    return list(MLX_DEFAULT_TAPS)


def _mlx_releases() -> list[str]:
    """The mlx-vlm releases whose drafters and target capture were read (method_rules.json's
    mlx rows: 0.6.15 on)."""
    from . import method_table

    return [v for v in method_table.read_releases("mlx") if method_table.row("mlx", v)]


def _sglang_row(version: str) -> dict[str, Any] | None:
    from packaging.version import Version

    v = Version(version)
    for row in _table()["sglang"]["rows"]:
        until = row["until"]
        if Version(row["since"]) <= v and (until is None or v < Version(until)):
            return dict(row)
    return None


def _span(row: Mapping[str, Any]) -> str:
    return f"{row['since']}" + (f"-{row['until']} (excl.)" if row["until"] else " on")


def resolve_dflash(
    engine: str,
    num_layers: int,
    draft: DFlashDraft,
    arch: str | None = None,
    version: str | None = None,
    runner: str | None = None,
    draft_impl: str | None = None,
) -> Resolution:
    """The draft's taps on ``engine`` as canonical layers, in the order the engine
    concatenates them (``draft_impl``: tpu-inference's DRAFT_MODEL_IMPL_TYPE). A guessed tap
    list is an EC522 problem. Raises Unservable."""
    q = Query(engine, num_layers, draft.taps, arch, version)
    if draft.speculators and engine != "vllm":
        raise Unservable(
            f"{engine}: a speculators-format DFlash config (speculators_model_type: dflash, "
            "aux_hidden_state_layer_ids): how this engine reads one was not read here (vLLM "
            "0.34.0 converts it: docs/dflash.md)"
        )
    if engine == "sglang":
        return _sglang(q, draft)
    if engine == "vllm":
        return _vllm(q, draft, runner)
    if engine == "llama.cpp":
        return _llamacpp(q, draft)
    if engine == "mlx":
        return _mlx(q, draft)
    if engine == "tpu-inference":
        from .tpu import resolve_dflash as tpu_dflash

        return tpu_dflash(q, draft, draft_impl)
    if engine == "vllm-ascend":
        from .ascend import resolve_dflash as ascend_dflash

        return ascend_dflash(q, draft, resolve_dflash)
    raise Unservable(
        f"{engine}: no DFlash tap rules are read here (DFlash is resolved for "
        f"{', '.join(ENGINES)}; docs/methods.md)"
    )


def _mlx(q: Query, draft: DFlashDraft) -> Resolution:
    """mlx-vlm (method_rules.json's mlx rows, ``scripts/gen_method_rules.py``): ``utils``
    routes a draft with a ``dflash_config`` object to the ``<model_type>_dflash`` drafter
    (0.6.16 on, DFlash2DraftModel, Gemma4DSparkModel and DSpark-marked configs go elsewhere
    first; 0.6.15 routes every one there). ``qwen3_dflash`` (and ``gemma4_dflash``, a subclass
    of its config that leaves the taps alone) reads ``dflash_config.target_layer_ids``, else
    the top-level key, else its default ``[1, 8, 15, 22, 29]`` (EC522); ``laguna_dflash``
    requires ``dflash_config.target_layer_ids``: one per draft layer, strictly increasing,
    below its ``num_target_layers``, which must equal the target's layer count. The DFlash
    loop captures the drafter's ``target_layer_ids``; the target model folder's loop appends
    layer i's output for id i."""
    from . import method_table

    read = _mlx_releases()
    version = q.assume(read[-1], "mlx-vlm")
    row = method_table.row("mlx", version)
    if row is None or version not in read:
        raise Unservable(
            f"mlx-vlm {version}: DFlash is read for the releases {read[0]} to {read[-1]} "
            "(docs/methods.md)"
        )
    where = f"mlx-vlm {version}"
    if draft.has_dflash_config is not None and not draft.model_type:
        raise Unservable(mlx_unrouted(version))
    if draft.has_dflash_config is False:
        raise Unservable(
            f"{where}: utils routes a draft to a DFlash drafter only when its "
            "config has a dflash_config object; this one has none"
        )
    if row["routing"] == "architectures":
        if "DFlash2DraftModel" in draft.architectures:
            raise Unservable(
                f"{where}: a DFlash2DraftModel loads the DFlash2 drafter (method dflash2)"
            )
        gemma = "Gemma4DSparkModel"
        if (gemma in draft.architectures and gemma in row["routes"]) or draft.dspark_marked:
            raise Unservable(
                f"{where}: utils.get_model_type routes this draft to a DSpark drafter "
                "(method dspark)"
            )
    drafters: dict[str, Any] = row["dflash"]
    model_type = "qwen3"
    if draft.has_dflash_config is None:
        q.notes.append("taps given alone: read as a qwen3_dflash draft")
    else:
        model_type = str(draft.model_type).lower()
        if model_type not in drafters:
            raise Unservable(
                f"{where}: no {model_type[:40]}_dflash drafter in this release (read: "
                f"{', '.join(m + '_dflash' for m in sorted(drafters))})"
            )
    facts = drafters[model_type]
    if facts["keys"] is None:
        raise Unservable(f"{where}: {facts['file']} reads its taps in a way not followed here")
    found = {k: draft.found[k] for k in facts["keys"] if k in draft.found}
    picked = next(iter(found.items()), None)
    if picked is None and facts.get("default") is None:
        raise Unservable(
            f"{where}: {facts['file']} requires {facts['keys'][0]} (ValueError at load); "
            "the draft lists none"
        )
    taps = list(picked[1]) if picked is not None else list(facts["default"])
    if facts.get("increasing") and taps != sorted(set(taps)):
        raise Unservable(
            f"{where}: {facts['file']}: target_layer_ids {taps} are not strictly increasing"
        )
    if (
        facts.get("count")
        and draft.num_hidden_layers is not None
        and len(taps) != draft.num_hidden_layers
    ):
        raise Unservable(
            f"{where}: {facts['file']}: one tap per draft layer ({facts['count']} "
            f"{draft.num_hidden_layers}), not {len(taps)} (ValueError at load)"
        )
    if facts.get("target_layers"):
        n = draft.num_target_layers
        if n is not None and n != q.num_layers:
            raise Unservable(
                f"{where}: {facts['file']}: num_target_layers {n} is not the target's "
                f"{q.num_layers} layers (ValueError at bind)"
            )
    folder, positions = method_table.mlx_taps(row, q.arch, taps, q.num_layers, where)
    q.arch = folder
    if picked is None:
        how = f"{version} {facts['file']} default"
        q.problems.append(guess_problem("mlx-vlm", how, taps, [p.layer for p in positions]))
    default = f", else {facts['default']}" if facts.get("default") else " (required)"
    return q.answer(
        positions,
        f"built-in rules: mlx-vlm {method_table.span(row)} {facts['file']} reads "
        f"{', '.join(facts['keys'])}{default}; models/{folder}/language.py "
        "appends layer i's output for id i (residual:i+1)",
        taps,
    )


def _sglang(q: Query, draft: DFlashDraft) -> Resolution:
    from packaging.version import Version

    releases = sglang_releases()
    version = q.assume(releases[-1], "SGLang")
    if version not in releases and not (
        Version(releases[0]) <= Version(version) <= Version(releases[-1])
    ):
        raise Unservable(
            f"SGLang {version}: DFlash rules are read for the releases {releases[0]} to "
            f"{releases[-1]} (docs/methods.md)"
        )
    if version not in releases:
        raise Unservable(f"SGLang {version}: that release's wheel was not read (docs/methods.md)")
    row = _sglang_row(version)
    if row is None:
        raise Unservable(f"SGLang {version} has no DFlash (no speculative/dflash_utils.py)")
    archs: dict[str, str] = row["archs"]
    if not q.arch:
        q.notes.append(f"no --arch: {SGLANG_DEFAULT_ARCH}'s rule")
        q.arch = SGLANG_DEFAULT_ARCH
    from .arch_names import pick

    q.arch, how = pick(q.arch, archs.keys())
    if how:
        q.notes.append(how)
    rule = archs.get(q.arch)
    if rule is None:
        raise Unservable(
            f"SGLang {version}: {q.arch[:80]} has no set_dflash_layers_to_capture (not a "
            "DFlash target there)"
        )
    if rule == "unfollowed" or q.arch.startswith("Muse"):
        raise Unservable(
            f"SGLang {version}: {q.arch}'s set_dflash_layers_to_capture stores the ids where "
            "the generator does not follow them (or remaps them first): not resolved here"
        )
    L = q.num_layers
    picked = next(((k, draft.found[k]) for k in row["keys"] if k in draft.found), None)
    if picked is None:
        n = draft.num_hidden_layers
        if n is None:
            raise Unservable(
                "the draft config has no tap list and no num_hidden_layers: SGLang refuses "
                "(DFLASH requires draft num_hidden_layers)"
            )
        name, formula = FORMULAS[row["fallback"]]
        taps = formula(L, n)
        how = f"{version} falls back to {name}(L={L}, n={n})"
    else:
        taps = list(picked[1])
        how = ""
        if len(draft.found.keys() & set(row["keys"])) > 1:
            q.notes.append(f"SGLang {version} reads {picked[0]}")
    bad = [t for t in taps if t < 0 or t >= L]
    if bad:
        raise Unservable(
            f"SGLang {version}: tap ids {bad} lie outside [0, {L}): ValueError at start-up "
            "(resolve_target_layer_ids)"
        )
    plus = 1 if rule == "plus1" else 0
    captures = [t + plus for t in taps]
    if len(set(captures)) != len(captures):
        raise Unservable(
            f"SGLang {version}: duplicate taps {taps} capture each layer once: fewer states "
            "than the draft's fc takes (shape mismatch at the first forward)"
        )
    layers = _sglang_layers(q, version, captures)
    q.note_order(taps, "SGLang concatenates the states in layer order")
    order = sorted(range(len(taps)), key=lambda i: captures[i])
    positions = tuple(Position(taps[i], captures[i], layers[i]) for i in order)
    if picked is None:
        q.problems.append(guess_problem("SGLang", how, taps, [p.layer for p in positions]))
    keys = ", ".join(row["keys"])
    shift = "capture t + 1 (the state entering layer t + 1)" if plus else "capture t"
    return q.answer(
        positions,
        f"built-in rules: SGLang {_span(row)} speculative/dflash_utils.py reads {keys}, "
        f"else {FORMULAS[row['fallback']][0]}(L, draft num_hidden_layers); "
        f"{q.arch}.set_dflash_layers_to_capture: tap t = {shift}",
        taps,
    )


def _sglang_layers(q: Query, version: str, captures: Sequence[int]) -> list[Layer]:
    """Capture index c is the state entering layer c; index L only where the architecture's
    forward captures after its loop (its EAGLE-3 row in sglang_rules.json, the same loop)."""
    from . import sglang_table

    L = q.num_layers
    row = sglang_table.row_for(q.arch or "", version)
    out = []
    for c in captures:
        if c == 0 and (row is None or row.index0 != "embed"):
            raise Unservable(
                f"SGLang {version}: capture index 0 in {q.arch}'s loop adds hidden_states + "
                "residual where residual is None (or is not read here): refused"
            )
        if c >= L:
            if row is None or row.beyond != "final":
                what = "not read here" if row is None else f"{row.beyond} ({row.source})"
                raise Unservable(
                    f"SGLang {version}: capture index {c} (the last layer's output) in "
                    f"{q.arch}'s loop is {what}: fewer states than the draft's fc takes"
                )
            out.append(Layer(L))
            continue
        out.append(Layer(c))
    return out


def _vllm(q: Query, draft: DFlashDraft, runner_asked: str | None) -> Resolution:
    from . import vllm_rules as rules
    from .vllm import VLLM, _arch

    rel = rules.release(q.assume(rules.releases()[-1], "vLLM"))
    q.arch, cap = _arch(q.arch, rel.version, q.notes)
    if not any(k in TAP_KEYS for keys in rel.runners.values() for k, _ in keys):
        raise Unservable(
            f"vLLM {rel.span} reads no DFlash tap key in any runner: DFlash is not resolved there"
        )
    vrow = _vllm_row(rel.version)
    if vrow is None:
        raise Unservable(
            f"vLLM {rel.version}: its wheel was not read for DFlash (docs/methods.md); read: "
            f"{', '.join(_table()['vllm']['releases'])}"
        )
    v2_runs = vrow["v2_runs_dflash"]
    if runner_asked is None and rel.choice.how == "auto" and v2_runs is False:
        runner, why = (
            "v1",
            (
                f"vLLM {rel.version}: use_v2_model_runner starts V1 for speculative method "
                "'dflash' (_get_v2_model_runner_unsupported_features)"
            ),
        )
    else:
        runner, why = VLLM(runner_asked).launch_runner(rel, q.arch)
    q.assumed.append(("runner", runner, why))
    keys = rel.runners[runner]
    if not any(k in TAP_KEYS for k, _ in keys):
        raise Unservable(
            f"vLLM {rel.span} ({runner} runner) reads no DFlash tap key "
            f"({', '.join(k for k, _ in keys) or 'none'}): DFlash is not resolved there"
        )
    picked = next(((k, [i + s for i in draft.found[k]]) for k, s in keys if k in draft.found), None)
    L = q.num_layers
    guess = ""
    fc = _vllm_fc(vrow["fc"], draft, picked[1] if picked else None)
    if picked is None:
        ids = eagle3_default_ids(L)
        guess = f"no tap list read: vLLM feeds its EAGLE-3 default {ids}; "
        q.notes.append(
            f"no key read: vLLM's EAGLE-3 default {ids}; the DFlash fc takes one state per "
            "draft layer (models/qwen3_dflash.py)"
        )
        shift = 0
    else:
        ids = picked[1]
        shift = dict(keys)[picked[0]]
        q.notes.append(
            f"vLLM {rel.version} ({runner} runner) reads {picked[0]}"
            + (f" (+{shift})" if shift else " (as they are)")
        )
        if picked[0] in TAP_KEYS and shift == 0:
            q.problems.append(
                Problem(
                    "EC516",
                    f"vLLM {rel.span} ({runner} runner) adds nothing to {picked[0]}: tap t "
                    "feeds the state entering layer t, one layer before the output of "
                    "layer t the draft was trained on (from 0.22.0 vLLM adds 1)",
                )
            )
    low = 1 if cap.id0 == "never" else 0
    high = L - 1 + cap.last
    reached = sorted({i for i in ids if low <= i <= high})
    where = f"vLLM {cap.span} {cap.file}"
    if 0 in reached and cap.id0 == "crash":
        raise Unservable(f"id 0: {where} adds hidden_states + residual where residual is None")
    if fc is None or len(reached) != fc:
        dropped = sorted({i for i in ids if not low <= i <= high})
        lost = f"ids {dropped} lie outside [{low}, {high}], " if dropped else ""
        raise Unservable(
            f"{guess}{where}: {lost}{len(reached)} distinct states captured, the DFlash fc takes "
            f"{fc if fc is not None else 'num_hidden_layers (absent)'}: ValueError at the first "
            "forward (qwen3_dflash.py combine_hidden_states)"
        )
    positions = tuple(Position(i - shift, i, Layer(i + cap.plus)) for i in reached)
    if picked is None:
        q.problems.append(
            guess_problem(
                "vLLM",
                f"{rel.version} feeds its EAGLE-3 default",
                ids,
                [p.layer for p in positions],
            )
        )
    return q.answer(
        positions,
        f"built-in rules: vLLM {rel.span}, {runner} runner reads "
        f"{[k + (f' (+{s})' if s else '') for k, s in keys]}; {cap.file} ({cap.span}): id k = "
        f"residual:k{f'+{cap.plus}' if cap.plus else ''}; DFlash fc for {fc} states",
        draft.found[picked[0]] if picked else None,
    )


def _vllm_row(version: str) -> dict[str, Any] | None:
    from packaging.version import Version

    data = _table()["vllm"]
    if version not in data["releases"]:
        return None
    v = Version(version)
    for row in data["rows"]:
        if Version(row["since"]) <= v and (row["until"] is None or v < Version(row["until"])):
            return dict(row)
    return None


def _vllm_fc(rule: str | None, draft: DFlashDraft, read: Sequence[int] | None) -> int | None:
    """How many states the release's DFlash fc takes (``models/qwen3_dflash.py``): the
    length of the dflash_config list (``dflash_config``) or of the ids read (``read``), else
    the draft's num_hidden_layers."""
    if rule is None:
        raise Unservable("this vLLM release has no models/qwen3_dflash.py")
    if rule == "dflash_config":
        listed = draft.found.get(TAP_KEYS[0]) or draft.found.get("dflash_config.layer_ids")
        return len(listed) if listed else draft.num_hidden_layers
    return len(read) if read else draft.num_hidden_layers


def _llamacpp(q: Query, draft: DFlashDraft) -> Resolution:
    """llama.cpp as vendored in llama-cpp-python 0.3.36: the GGUF draft's
    ``dflash.target_layers`` (src/models/dflash.cpp refuses a draft without them), each id k
    read as ``llama_get_embeddings_layer_inp(ctx_tgt, k)``, the input of layer k
    (common/speculative.cpp), in the listed order. An HF draft is what the release's
    converter makes of it (conversion/qwen.py ``DFlashModel``: target_layer_ids + 1; none
    written where the config has none)."""
    version = q.assume(LLAMACPP_READ, "llama-cpp-python")
    if version != LLAMACPP_READ:
        raise Unservable(
            f"llama-cpp-python {version}: DFlash is read here for {LLAMACPP_READ} only "
            "(docs/methods.md)"
        )
    L = q.num_layers
    if GGUF_KEY in draft.found:
        ids = list(draft.found[GGUF_KEY])
        how = "the GGUF's dflash.target_layers"
        read: tuple[int, ...] = draft.found[GGUF_KEY]
    elif draft.taps is not None:
        ids = [t + 1 for t in draft.taps]
        how = f"converted: {draft.tap_key} + 1 (conversion/qwen.py DFlashModel)"
        read = draft.taps
        q.notes.append(f"an HF draft config: {how}")
    else:
        raise Unservable(
            "the draft has no tap list: llama.cpp's converter writes no dflash.target_layers "
            "and its loader refuses the GGUF ('DFlash model requires target_layers', "
            "src/models/dflash.cpp)"
        )
    bad = [i for i in ids if i < 0 or i >= L]
    if bad:
        raise Unservable(
            f"llama.cpp ids {bad}: only the inputs of layers 0..{L - 1} are read here (the "
            "last layer's output is not resolved for DFlash)"
        )
    q.note_order(ids, "llama.cpp concatenates them in this order (it does not sort)")
    positions = tuple(
        Position(r, i, Layer(i)) for r, i in zip(read if GGUF_KEY not in draft.found else ids, ids)
    )
    return q.answer(
        positions,
        f"built-in rules: llama.cpp (llama-cpp-python {LLAMACPP_READ}) reads {how}; id k = the "
        "input of layer k = residual:k (common/speculative.cpp llama_get_embeddings_layer_inp)",
        read,
    )


def taps_for(
    engine: str,
    num_layers: int,
    wanted: Sequence[Layer],
    arch: str | None,
    version: str | None,
    draft_layers: int | None = None,
) -> tuple[int, ...] | None:
    """The tap list that makes ``engine`` feed ``wanted`` (in its order), or None: the
    layers named as layer outputs (t = k - 1, DFlash's own convention), else as layer inputs
    (t = k, where a release adds nothing), each checked by ``resolve_dflash``."""
    if not wanted or any(x.is_final_norm for x in wanted):
        return None
    want = tuple(wanted)
    for back in (1, 0):
        taps = tuple(x.index - back for x in want)
        if min(taps) < 0:
            continue
        probe = DFlashDraft(None, {TAP_KEYS[0]: taps}, draft_layers)
        try:
            if resolve_dflash(engine, num_layers, probe, arch, version).layers == want:
                return taps
        except (Unservable, EagleContractError):
            continue
    return None
