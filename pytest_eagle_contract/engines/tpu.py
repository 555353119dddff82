"""vLLM tpu-inference: its EAGLE-3 rules per release (``tpu_rules.json``, written by
``scripts/gen_tpu_rules.py`` from each wheel's own code).

With ``MODEL_IMPL_TYPE=auto`` an architecture resolves to ``vllm`` when tpu-inference prefers
vLLM's code for it (``_VLLM_PREFERRED_ARCHITECTURES``), else to ``flax_nnx``. A ``flax_nnx``
target in the JAX registry runs its JAX model: with EAGLE-3 (Llama) its
``get_eagle3_aux_hidden_state_layers`` takes no config at all, whatever the draft says it
captures ``(2, L//2, L-3)``, each as the residual stream entering that layer, in layer order;
without EAGLE-3 (Qwen2/3, DeepSeek-V3, ...) it returns no aux states and the drafter's assertion
"EAGLE3 requires auxiliary hidden states from the target model." fails at the first request. A
``flax_nnx`` target not in the registry falls back to vLLM's model code.

From 0.18.0 the draft resolves on its own (``DRAFT_MODEL_IMPL_TYPE``, default ``auto``: the
EAGLE-3 draft class is in the JAX registry, so ``flax_nnx``), ``Eagle3Proposer.load_model``
raises ValueError at start-up when the draft's and the target's resolved implementations
differ, and the vLLM-path wrapper sets the target's aux layers with vLLM's V2-runner helper
(``eagle3_utils.set_eagle3_aux_hidden_state_layers``): those targets get the vLLM rules of the
release beside it with the V2 runner's keys. Before 0.18.0 that wrapper returns no aux states.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import EagleContractError, Problem, Unservable
from ..layers import Layer
from .base import Engine, Position, Query, Resolution, eagle3_default_ids, releases_for
from .rule_table import RuleTable, span
from .vllm import VLLM, read_draft_ids

if TYPE_CHECKING:
    from .dflash_draft import DFlashDraft
    from .draft_config import DraftConfig

_TABLE = RuleTable("tpu_rules.json", "tpu-inference", "0.32.0")
_data, releases, _v, _covers = _TABLE.data, _TABLE.releases, _TABLE.version, _TABLE.covers
_span = span

DRAFT_IMPLS = ("auto", "flax_nnx", "vllm")  # DRAFT_MODEL_IMPL_TYPE's choices (envs.py)
_ASSERTION = (
    "the drafter's assertion 'EAGLE3 requires auxiliary hidden states from the target model.' "
    "fails at the first request (spec_decode/jax/eagle3.py)"
)


def _check(version: str) -> None:
    _TABLE.check(version)


class TPUInference(Engine):
    name = "tpu-inference"
    title = "tpu-inference"
    id_keys = VLLM.id_keys  # read only where the target runs vLLM's code (from 0.18.0)

    def __init__(self, draft_impl: str | None = None) -> None:
        if draft_impl is not None and draft_impl not in DRAFT_IMPLS:
            raise EagleContractError(
                f"unknown DRAFT_MODEL_IMPL_TYPE {draft_impl!r}: one of {', '.join(DRAFT_IMPLS)}"
            )
        self.draft_impl = draft_impl or "auto"

    def versions(self, spec: str | None) -> list[str | None]:
        return [None] if spec is None else list(releases_for(spec, releases(), "tpu-inference"))

    def known_archs(self) -> frozenset[str]:
        data = _data()
        own = {a for r in data["rows"] for key in ("preferred", "jax") for a in r[key]}
        return VLLM().known_archs() | own | {a for r in data["archs"] for a in r["archs"]}

    def draft_ids(self, draft: DraftConfig) -> tuple[int, ...] | None:
        return read_draft_ids(draft.path)

    def _resolve(self, q: Query) -> Resolution:
        version = q.assume(releases()[-1], "tpu-inference")
        _check(version)
        arch = q.arch or "LlamaForCausalLM"
        if not q.arch:
            q.notes.append(f"no --arch: {arch}")
        q.arch = arch
        rel: dict[str, Any] = next(r for r in _data()["rows"] if _covers(r, version))
        target = "vllm" if arch in rel["preferred"] else "flax_nnx"
        if rel["impl_check"]:
            draft = "flax_nnx" if self.draft_impl == "auto" else self.draft_impl
            q.assumed.append(("DRAFT_MODEL_IMPL_TYPE", self.draft_impl, self._draft_why(rel)))
            if draft != target:
                raise Unservable(
                    f"tpu-inference {version}: MODEL_IMPL_TYPE=auto resolves {arch[:60]} to "
                    f"{target}"
                    + (" (preferred: vLLM's code)" if target == "vllm" else "")
                    + f", the draft to {draft}: Eagle3Proposer.load_model raises ValueError at "
                    "start-up (the implementation of the draft model must be the same as the "
                    "target model)"
                    + (
                        "; DRAFT_MODEL_IMPL_TYPE=vllm runs the draft on vLLM's code too "
                        "(resolve --draft-model-impl vllm)"
                        if target == "vllm"
                        else ""
                    ),
                    "--draft-model-impl vllm (DRAFT_MODEL_IMPL_TYPE=vllm)"
                    if target == "vllm"
                    else "leave DRAFT_MODEL_IMPL_TYPE unset (auto)",
                )
        elif self.draft_impl != "auto":
            q.notes.append(
                f"tpu-inference {version} has no DRAFT_MODEL_IMPL_TYPE (first in 0.18.0): "
                f"{self.draft_impl} not read"
            )
        if target == "flax_nnx" and arch in rel["jax"]:
            row = next(
                (r for r in _data()["archs"] if arch in r["archs"] and _covers(r, version)), None
            )
            if row is None:
                raise Unservable(
                    f"tpu-inference {version}: {arch[:60]} runs its JAX model (flax_nnx), which "
                    f"has no EAGLE-3 capture and returns no aux states: {_ASSERTION}"
                )
            return self._jax(q, row)
        # vLLM's own model code (torchax): preferred, or not in the JAX registry (the flax_nnx
        # load raises UnsupportedArchitectureError and falls back to it)
        how = (
            "prefers vLLM's code for it"
            if target == "vllm"
            else "has no JAX model for it (flax_nnx falls back to vLLM's model code)"
        )
        if rel["vllm_aux"] == "none":
            raise Unservable(
                f"tpu-inference {version} {how}: its vLLM-path wrapper "
                "(models/vllm/vllm_model_wrapper.py) returns no aux states in this release: "
                f"{_ASSERTION}"
            )
        return self._via_vllm(q, version, how)

    @staticmethod
    def _draft_why(rel: dict[str, Any]) -> str:
        drafts = ", ".join(rel["drafts"]) or "the EAGLE-3 draft"
        return (
            f"auto resolves the draft ({drafts}, in the JAX registry) to flax_nnx; "
            "--draft-model-impl vllm for DRAFT_MODEL_IMPL_TYPE=vllm"
        )

    def _jax(self, q: Query, row: dict[str, Any]) -> Resolution:
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

    def _via_vllm(self, q: Query, version: str, how: str) -> Resolution:
        """The target runs vLLM's model code; its aux layers are set by vLLM's V2-runner
        helper of the vLLM release beside it (taken as the same number)."""
        q.assumed.append(("vllm", version, f"tpu-inference {version} runs beside vLLM {version}"))
        ids: Sequence[int] | None = q.ids
        try:
            res = VLLM("v2").resolve(q.num_layers, ids, q.arch, version, q.use_installed)
        except EagleContractError as exc:
            raise Unservable(f"tpu-inference {version} {how}, on vLLM {version}: {exc}") from None
        q.notes.extend(res.notes)
        q.problems.extend(res.problems)
        return q.answer(
            res.positions,
            f"built-in rules: tpu-inference {version} {how}; models/vllm/vllm_model_wrapper.py "
            "sets the target's aux layers with vLLM's eagle3_utils."
            "set_eagle3_aux_hidden_state_layers (the V2 runner's reader); capture: "
            + res.source.removeprefix("built-in rules: "),
            res.ids,
        )


# --- DFlash, DFlash2, DSpark, MTP (tpu_rules.json rows' dflash / dflash2 / dspark / mtp) ---

_DFLASH_ASSERT = (
    "DFlashProposer.prepare_inputs asserts aux states at the first request "
    "(spec_decode/jax/dflash.py)"
)


_LISTED = 16  # the fallback's ids below 0 named one by one (more: the first, ..., -1)
_MOST_TAPS = 4096  # the most states a fallback list is built for (a huge L or n is refused)


def dflash_releases() -> list[str]:
    """The tpu-inference releases whose runner serves DFlash (read: every release)."""
    return [v for v in releases() if (_dflash_row(v).get("dflash") or {}).get("runner")]


def _dflash_row(version: str) -> dict[str, Any]:
    return next(r for r in _data()["rows"] if _covers(r, version))


def resolve_dflash(q: Query, draft: DFlashDraft, draft_impl: str | None = None) -> Resolution:
    """A DFlash draft on tpu-inference (the module's rows, ``dflash``): only a JAX target
    class with ``get_dflash_aux_hidden_state_layers`` (Llama, Qwen3 from 0.25.0) captures
    taps; it reads ``dflash_config.target_layer_ids`` alone, else the last n layers
    (``range(L - n, L)``, n = the draft's ``num_target_layers``, else L), and appends layer
    i's output (``residual:i+1``) in layer order. Raises Unservable."""
    from .dflash_draft import TAP_KEYS

    version = q.assume(releases()[-1], "tpu-inference")
    _TABLE.check(version, " is before the releases read")
    rel = _dflash_row(version)
    d = rel.get("dflash")
    served = dflash_releases()
    if d is None or not d["runner"]:
        raise Unservable(
            f"tpu-inference {version}: "
            + (
                "no DFlash code"
                if d is None
                else "models/jax/dflash.py is there, but runner/tpu_runner.py builds no "
                "DFlashProposer for method dflash"
            )
            + f" (DFlash is served from {served[0]}; read: {releases()[0]}-{releases()[-1]})"
        )
    arch = q.arch or "LlamaForCausalLM"
    if not q.arch:
        q.notes.append(f"no --arch: {arch}")
    q.arch = arch
    where = f"tpu-inference {span(rel)}"
    drafts = ", ".join(d["drafts"])
    impl = draft_impl or "auto"
    if impl not in DRAFT_IMPLS:
        raise EagleContractError(
            f"unknown DRAFT_MODEL_IMPL_TYPE {impl!r}: one of {', '.join(DRAFT_IMPLS)}"
        )
    q.assumed.append(
        (
            "DRAFT_MODEL_IMPL_TYPE",
            impl,
            f"the draft ({drafts}, in the JAX registry) runs flax_nnx"
            if impl != "vllm"
            else "the draft runs vLLM's code",
        )
    )
    if impl == "vllm":
        preferred = arch in rel["preferred"]
        raise Unservable(
            f"{where}: DRAFT_MODEL_IMPL_TYPE=vllm runs the draft on vLLM's code; "
            + (
                "the target runs vLLM's code too, and the vLLM-path wrapper returns aux states "
                "for eagle3 only: " + _DFLASH_ASSERT
                if preferred
                else f"the target {arch[:60]} resolves to flax_nnx: DFlashProposer.load_model "
                "raises ValueError (draft model implementation must match target model)"
            )
        )
    if arch in rel["preferred"]:
        raise Unservable(
            f"{where}: MODEL_IMPL_TYPE=auto resolves {arch[:60]} to vllm (preferred), the "
            "draft to flax_nnx: DFlashProposer.load_model raises ValueError (draft model "
            "implementation must match target model); with DRAFT_MODEL_IMPL_TYPE=vllm the "
            "vLLM-path wrapper returns aux states for eagle3 only: " + _DFLASH_ASSERT
        )
    if arch not in rel["jax"]:
        raise Unservable(
            f"{where} has no JAX model for {arch[:60]} (flax_nnx falls back to vLLM's model "
            "code), whose wrapper (models/vllm/vllm_model_wrapper.py) returns aux states for "
            "eagle3 only: " + _DFLASH_ASSERT
        )
    target = d["targets"].get(arch)
    if target is None:
        read = ", ".join(sorted(d["targets"]))
        raise Unservable(
            f"{where}: {arch[:60]}'s JAX model has no get_dflash_aux_hidden_state_layers and "
            f"returns no aux states (the JAX targets that capture DFlash taps: {read}): "
            + _DFLASH_ASSERT
        )
    L = q.num_layers
    key = TAP_KEYS[0]
    listed = draft.found.get(key)
    fc: int | None
    n: int | None = None
    if listed is not None:
        ids = list(listed)
        fc = len(ids)
    else:
        n = _top_level(draft, "num_target_layers")
        # range(L - n, L): its ids below 0 match no layer; far below 0 (n well above L) only
        # the first and -1 are kept, so a huge num_target_layers is never built into a list
        low = L - (L if n is None else n)
        if L - max(low, 0) > _MOST_TAPS:
            raise EagleContractError(
                f"tpu-inference's fallback range(L - n, L) with L = {L}, n = "
                f"{L if n is None else n} would capture {L - max(low, 0)} states: at most "
                f"{_MOST_TAPS} are resolved here; give the draft's "
                f"{key} (--ids) or a smaller --num-layers / num_target_layers"
            )
        ids = list(range(low, L)) if low >= -_LISTED else [low, *range(-1, L)]
        fc = n if n is not None else draft.num_hidden_layers
        if n is None and draft.num_target_layers is not None:
            q.notes.append(
                f"{where} reads the top-level num_target_layers only: the draft's "
                f"dflash_config.num_target_layers {draft.num_target_layers} is not read"
            )
        if TAP_KEYS[1] in draft.found:
            q.notes.append(f"{where} reads {key} only: the top-level {TAP_KEYS[1]} is not read")
    captured = sorted({i for i in ids if 0 <= i < L})
    if fc is None or len(captured) != fc:
        dropped = sorted({i for i in ids if not 0 <= i < L})
        if listed is None and dropped:  # the fallback's ids below 0: low .. -1
            dropped_text = f"[{dropped[0]}, ..., -1]" if dropped[0] < -_LISTED else str(dropped)
        else:
            dropped_text = str(dropped)
        lost = f"ids {dropped_text} lie outside [0, {L}) and match no layer; " if dropped else ""
        raise Unservable(
            f"{where} {target['file']}: {lost}{len(captured)} distinct states captured, the "
            f"draft's fc (models/jax/dflash.py) takes "
            f"{fc if fc is not None else 'num_hidden_layers (absent)'}: shape mismatch at the "
            "first draft step"
            + (
                f" (its dflash_config.num_target_layers {draft.num_target_layers} is not read: "
                "only the top-level one)"
                if listed is None and n is None and draft.num_target_layers is not None
                else ""
            )
        )
    q.note_order(ids, "tpu-inference appends the states in layer order")
    positions = tuple(Position(i, i, Layer(i + 1)) for i in captured)
    if listed is None:
        from .dflash_draft import guess_problem

        n_said = (
            f"the draft's num_target_layers {n}"
            if n is not None
            else f"L = {L} (no top-level num_target_layers)"
        )
        q.problems.append(
            guess_problem(
                "tpu-inference",
                f"{version} {target['file']} falls back to range(L - n, L), n = {n_said},",
                ids,
                [p.layer for p in positions],
            )
        )
    return q.answer(
        positions,
        f"built-in rules: {where} {target['file']} (JAX path, MODEL_IMPL_TYPE=auto) "
        f"get_dflash_aux_hidden_state_layers reads {key} only, else range(L - n, L) with n the "
        "draft's num_target_layers (else L); appends layer i's output (residual:i+1) in layer "
        "order; the draft's fc takes the list's length, else num_target_layers, else "
        "num_hidden_layers",
        listed,
    )


def _top_level(draft: DFlashDraft, key: str) -> int | None:
    """``key`` as tpu-inference reads it, the draft config's top-level attribute
    (``getattr(hf_config, key, ...)``): the DFlash parser's value where the draft came as
    ids alone, else the config.json's top level (a ``dflash_config`` copy is not read)."""
    from .draft_config import read_draft_json
    from .gguf_meta import is_gguf

    if draft.path is None or is_gguf(draft.path):
        return getattr(draft, key)  # type: ignore[no-any-return]
    value = read_draft_json(draft.path).get(key)
    return value if type(value) is int and value >= 0 else None


def resolve_mtp(num_layers: int, arch: str | None, version: str | None) -> Resolution:
    """MTP on tpu-inference (``tpu_rules.json``'s ``mtp_targets``, 0.22.1 on):
    ``runner/speculative_decoding_manager.py`` feeds the draft the target step's
    ``hidden_states`` output, which on the JAX path is what the registered model's
    ``__call__`` returns (``final_norm`` where the generator follows it to ``self.norm(x)``).
    The JAX path is assumed (``MODEL_IMPL_TYPE`` auto, an architecture of the JAX registry not
    in ``_VLLM_PREFERRED_ARCHITECTURES``); vLLM-path targets are refused: which vLLM release a
    tpu-inference release runs on is stated by no file read. Raises Unservable."""
    q = Query("tpu-inference", num_layers, None, arch, version)
    version = q.assume(releases()[-1], "tpu-inference")
    _TABLE.check(version, " is before the releases read")
    rel = _dflash_row(version)
    targets = rel.get("mtp_targets")
    if not rel["mtp"] or targets is None:
        raise Unservable(method_refusal("mtp", version) or "MTP not read")
    if not arch:
        raise Unservable("give --arch or --target-config: the state fed depends on the target")
    where = f"tpu-inference {version}"
    names = [str(arch), *getattr(arch, "also", ())]
    name = next((n for n in names if n in targets), None)
    preferred = next((n for n in names if n in rel["preferred"]), None)
    if preferred is not None or name is None:
        raise Unservable(
            f"{where}: {str(arch)[:60]} runs on the vLLM path "
            + (
                "(_VLLM_PREFERRED_ARCHITECTURES)"
                if preferred
                else "(not in the JAX registry of models/common/model_loader.py)"
            )
            + ", where the state is vLLM's forward output; which vLLM release this "
            "tpu-inference release runs on is stated by no file read: not followed"
        )
    if targets[name] != "final_norm":
        raise Unservable(
            f"{where}: what {name}'s JAX model returns as its hidden states was not read "
            "(its __call__ is not followed to the final norm; docs/layers.md)"
        )
    q.arch = name
    q.notes.append(
        "the JAX path assumed: MODEL_IMPL_TYPE auto (vllm, or a runai_streamer load of a "
        "model without a JAX weight loader, runs vLLM's model instead: not followed)"
    )
    drafts = [a for a in rel["jax"] if "MTP" in a]
    q.notes.append(
        "how the MTP draft itself loads is not followed (JAX MTP drafts registered in this "
        f"release: {', '.join(drafts) or 'none'}; others go through vLLM's model code)"
    )
    return q.answer(
        (Position(None, 0, Layer.parse("final_norm")),),
        f"MTP: {where} runner/speculative_decoding_manager.py feeds the draft the target "
        f"step's hidden_states output ((hidden_states, ), no aux states); {name}'s JAX "
        "model returns it after its final norm (x = self.norm(x); tpu_rules.json "
        "mtp_targets)",
        None,
    )


def method_refusal(method: str, version: str | None) -> str | None:
    """Why ``resolve --method dflash2|dspark|mtp`` is not answered for tpu-inference."""
    version = version or releases()[-1]
    _TABLE.check(version, " is before the releases read")
    rel = _dflash_row(version)
    span_read = f"{releases()[0]}-{releases()[-1]}"
    if method in ("dflash2", "dspark"):
        title = "DFlash2" if method == "dflash2" else "DSpark"
        has = [v for v in releases() if _dflash_row(v)[method]]
        return (
            f"tpu-inference {version}: no {title} code (no file of the wheel names "
            f"{method}; read {span_read}, none has it)"
            if not has
            else f"tpu-inference {version}: {title} code is there ({has[0]} on) but its path was "
            "not traced"
        )
    if method == "mtp":
        if rel["mtp"] and rel.get("mtp_targets") is not None:
            return None  # answered: resolve_mtp
        if not rel["mtp"]:
            return (
                f"tpu-inference {version}: MTP not read: runner/speculative_decoding_manager.py "
                "has no MTP branch"
            )
        return (
            f"tpu-inference {version}: MTP not read per target: "
            "runner/speculative_decoding_manager.py feeds an MTP draft the target step's "
            "hidden_states output (its own Eagle3Proposer path, method mtp), i.e. whatever "
            "state each target model returns (a JAX model after its final norm, a vLLM-path "
            "model vLLM's forward output); that return is not read per architecture here"
        )
    return f"tpu-inference: --method {method} is not read"
