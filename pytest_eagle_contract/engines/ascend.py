"""vllm-ascend (vLLM on Huawei Ascend NPUs): its EAGLE-3 rules per release
(``ascend_rules.json``, written by ``scripts/gen_ascend_rules.py`` from each sdist's code).

vllm-ascend X.Y.Z runs on vLLM X.Y.Z and loads vLLM's own model files, but its model runner
(``NPUModelRunner.load_model``) sets the aux layers itself. Up to 0.18.0 it sets the target
model's default ``(2, L//2, L-3)`` and never reads the draft's config, even where vLLM's own
runner of the same release reads ``eagle_aux_hidden_state_layer_ids`` (0.13.0, 0.18.0):
the draft's ids are silently not used (EC508). From 0.23.0 it calls vLLM's
``_get_eagle3_aux_layers_from_config``: the keys vLLM's V1 runner reads. The capture itself
is vLLM's (the vLLM rules of the paired release), except for the architectures a patch of its
own gives an EAGLE-3 capture (MiniMax-M2 in 0.18.0: the state entering layer i, the
embedding at i = 0).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import Problem, Unservable
from ..layers import Layer
from . import vllm_rules
from .base import Engine, Position, Query, Resolution, eagle3_default_ids, releases_for
from .rule_table import RuleTable, span
from .vllm import VLLM, DraftIds, read_draft_ids

if TYPE_CHECKING:
    from .dflash_draft import DFlashDraft
    from .draft_config import DraftConfig

_TABLE = RuleTable("ascend_rules.json", "vllm-ascend", "0.23.0")
releases = _TABLE.releases
RUNNER = "worker/model_runner_v1.py NPUModelRunner.load_model"
_LLAMA = "LlamaForCausalLM"


class VLLMAscend(Engine):
    name = "vllm-ascend"
    title = "vllm-ascend"
    id_keys = VLLM.id_keys

    def known_archs(self) -> frozenset[str]:
        rows = _TABLE.data()["rows"]
        own = {p["arch"] for r in rows for p in r["patched"]} | {
            a for r in rows for a in r["replaced"]
        }
        return VLLM().known_archs() | own

    def versions(self, spec: str | None) -> list[str | None]:
        return [None] if spec is None else list(releases_for(spec, releases(), "vllm-ascend"))

    def draft_ids(self, draft: DraftConfig) -> tuple[int, ...] | None:
        return read_draft_ids(draft.path)

    def n_aux(self, draft: DraftConfig, version: str | None) -> int:
        row = _TABLE.row(version or releases()[-1])
        return VLLM("v1").n_aux(draft, row["vllm"])

    def _resolve(self, q: Query) -> Resolution:
        version = q.assume(releases()[-1], "vllm-ascend")
        row = _TABLE.row(version)
        arch = q.arch or _LLAMA
        if not q.arch:
            q.notes.append(f"no --arch: the {_LLAMA} loop's rule")
        q.arch = arch
        where = f"vllm-ascend {span(row)} {RUNNER}"
        reads = row["ids_from"] == "config"
        default = eagle3_default_ids(q.num_layers)
        said = _said(q.ids)
        if not reads and said is not None and said != default:
            own = vllm_rules.release(row["vllm"]).runners.get("v1")
            q.problems.append(
                Problem(
                    "EC508",
                    f"{where} sets the target's {row['method']}() = {default} and reads no "
                    f"ids from the draft config: {said} are not used"
                    + (f" (vLLM {row['vllm']}'s own runner reads them)" if own else ""),
                )
            )
        q.assumed.append(
            (
                "runner",
                "v1",
                f"vllm-ascend {version}: NPUModelRunner ({_v2_why(row)})",
            )
        )
        patched = next((p for p in row["patched"] if p["arch"] == arch), None)
        if patched is not None:
            return self._patched(q, row, patched, default)
        if arch in row["replaced"]:
            q.notes.append(
                f"vllm-ascend {version} registers its own model class for {arch} "
                f"({row['replaced'][arch]}): the capture below is vLLM's, which that class "
                "inherits unless it overrides the model's forward (not read per class)"
            )
        return self._via_vllm(q, row, where, reads)

    def _via_vllm(self, q: Query, row: dict[str, Any], where: str, reads: bool) -> Resolution:
        vllm = row["vllm"]
        try:
            res = VLLM("v1").resolve(
                q.num_layers, q.ids if reads else None, q.arch, vllm, q.use_installed
            )
        except Unservable as e:
            raise Unservable(f"vllm-ascend {q.version} on vLLM {vllm}: {e}") from None
        q.notes.extend(n for n in res.notes if not n.startswith("no ids read"))
        default = eagle3_default_ids(q.num_layers)
        if not reads:
            q.notes.append(f"no ids read: {row['method']}() = {default}")
        elif res.ids is None:
            q.notes.append(f"no ids read: the target's default {default}")
        q.problems.extend(res.problems)
        how = (
            f"reads the draft's ids through vLLM {vllm}'s _get_eagle3_aux_layers_from_config"
            if reads
            else f"sets {row['method']}() whatever the draft says"
        )
        return q.answer(
            res.positions,
            f"built-in rules: {where} {how}; capture: "
            + res.source.removeprefix("built-in rules: "),
            res.ids if reads else default,
        )

    def _patched(
        self, q: Query, row: dict[str, Any], patched: dict[str, str], default: list[int]
    ) -> Resolution:
        L = q.num_layers
        captured = sorted({i for i in default if 0 <= i < L})
        if q.ids is None:
            q.notes.append(f"no ids: {row['method']}() = {default}")
        return q.answer(
            tuple(Position(i, i, Layer(i)) for i in captured),
            f"built-in rules: vllm-ascend {span(row)} {patched['file']}: {q.arch} patched with "
            f"an EAGLE-3 capture; {RUNNER} sets {row['method']}() = (2, L//2, L-3) whatever "
            "the draft says; id i = the state entering layer i (residual:i, id 0 the "
            "embedding), in layer order",
            default,
        )


def _said(ids: Sequence[int] | None) -> list[int] | None:
    """The ids the draft says, under any key some vLLM release reads."""
    if isinstance(ids, DraftIds):
        return next((list(v) for v in ids.found.values()), None)
    return None if ids is None else list(ids)


def _v2_why(row: dict[str, Any]) -> str:
    v2 = row["v2"]
    if v2 == "env":
        return (
            "VLLM_USE_V2_MODEL_RUNNER=1 starts its V2 runner instead, which keeps vLLM "
            f"{row['vllm']}'s V2 load_model: resolve --engine vllm --version {row['vllm']} "
            "--runner v2 for that launch"
        )
    if v2 == "v1 only":
        return f"its worker turns the V2 runner off on vLLM {row['vllm']}"
    return "it has no other runner"


# --- DFlash, DFlash2, DSpark, MTP (ascend_rules.json rows' proposers / dflash) ---

_BEFORE = " is before the releases read"


def dflash_releases() -> list[str]:
    """The vllm-ascend releases read whose ``get_spec_decode_method`` builds a DFlash
    proposer."""
    return [v for v in releases() if _TABLE.row(v).get("dflash")]


def resolve_dflash(
    q: Query, draft: DFlashDraft, vllm_dflash: Callable[..., Resolution]
) -> Resolution:
    """A DFlash draft on vllm-ascend: its own proposer (AscendDflashProposer), but the aux
    layers and their capture are the paired vLLM release's, as its V1 runner sets them
    (``NPUModelRunner`` keeps vLLM's ``use_aux_hidden_state_outputs`` for dflash; its
    ``load_model`` reads vLLM's ``_get_eagle3_aux_layers_from_config``, else the target's
    default): ``resolve --engine vllm --version <paired> --runner v1 --method dflash``'s rules,
    which ``vllm_dflash`` (engines/dflash.py's resolver, handed in: it dispatches here)
    answers. Raises Unservable."""

    version = q.assume(releases()[-1], "vllm-ascend")
    row = _TABLE.row(version, _BEFORE)
    d = row.get("dflash")
    if d is None:
        served = dflash_releases()
        raise Unservable(
            f"vllm-ascend {version}: spec_decode/__init__.py get_spec_decode_method builds no "
            f"DFlash proposer (methods: {', '.join(row['proposers']) or 'none read'}); DFlash "
            f"is served from {served[0]} (read: {', '.join(releases())})"
        )
    arch = q.arch or _LLAMA
    if not q.arch:
        q.notes.append(f"no --arch: the {_LLAMA} loop's rule")
    where = f"vllm-ascend {span(row)}"
    if arch in row["replaced"]:
        raise Unservable(
            f"{where} registers its own model class for {arch[:60]} ({row['replaced'][arch]}): "
            "its DFlash capture is not read here"
        )
    if any(p["arch"] == arch for p in row["patched"]):
        raise Unservable(f"{where} patches {arch[:60]}'s capture: not read for DFlash")
    vllm = row["vllm"]
    q.assumed.append(("runner", "v1", f"vllm-ascend {version}: NPUModelRunner ({_v2_why(row)})"))
    q.assumed.append(("vllm", vllm, f"vllm-ascend {version} runs on vLLM {vllm}"))
    try:
        res = vllm_dflash("vllm", q.num_layers, draft, arch, vllm, "v1")
    except Unservable as e:
        raise Unservable(f"{where} on vLLM {vllm} (its V1 runner's DFlash rules): {e}") from None
    q.arch = res.arch
    q.notes.extend(n for n in res.notes if not n.startswith("no version given"))
    q.problems.extend(
        Problem(p.code, f"vllm-ascend {version} (vLLM {vllm}'s rules): {p.message}", p.hint)
        for p in res.problems
    )
    patches = ", ".join(d["patches"])
    return q.answer(
        res.positions,
        f"built-in rules: {where} runs vLLM {vllm}'s DFlash rules (V1 runner): "
        "spec_decode/__init__.py builds AscendDflashProposer; NPUModelRunner (a vLLM "
        f"GPUModelRunner) keeps vLLM {vllm}'s use_aux_hidden_state_outputs for dflash (its own "
        f"_set_up_drafter sets it for {', '.join(d['own_flags'])} only) and {RUNNER} sets the "
        "aux layers through vLLM's _get_eagle3_aux_layers_from_config, else the target's "
        "default"
        + (
            f"; its patch replaces {patches} (the draft's context KV, not the taps)"
            if patches
            else ""
        )
        + "; vLLM's: "
        + res.source.removeprefix("built-in rules: "),
        res.ids,
    )


def resolve_mtp(
    num_layers: int,
    arch: str | None,
    version: str | None,
    vllm_mtp: Callable[[str, int, str | None, str | None], Resolution],
    vllm_draft_types: Callable[[str], Mapping[str, str]],
) -> Resolution:
    """MTP on vllm-ascend (``ascend_rules.json``'s ``mtp``, 0.23.0 on): the runner hands its
    own proposer the target forward's ``hidden_states`` (after ``get_mtp_target_hidden_states``
    where the target has one; the proposer combines states for eagle3 / dflash only), so the
    state is the paired vLLM release's (``vllm_mtp``: engines/mtp.py on vLLM, its V1 rule).
    Targets vllm-ascend replaces with its own class, and targets whose MTP draft a
    ``routes`` test sends to another proposer (``vllm_draft_types``: vLLM's
    ``SpeculativeConfig`` draft model_type per target), are refused. Raises Unservable."""
    assumed = [] if version else [f"no version given: vllm-ascend {releases()[-1]} assumed"]
    version = version or releases()[-1]
    row = _TABLE.row(version, _BEFORE)
    mtp = row.get("mtp")
    if mtp is None:
        raise Unservable(method_refusal("mtp", version, ()) or f"vllm-ascend {version}: no MTP")
    if not arch:
        raise Unservable("give --arch or --target-config: the state fed depends on the target")
    vllm = row["vllm"]
    where = f"vllm-ascend {version}"
    names = [str(arch), *getattr(arch, "also", ())]
    own = next((n for n in names if n in row["replaced"]), None)
    if own is not None:
        raise Unservable(
            f"{where}: {own} is vllm-ascend's own class ({row['replaced'][own]}, registered "
            "over vLLM's in models/__init__.py); what it hands an MTP drafter is not read"
        )
    types = vllm_draft_types(vllm)
    draft = next((types[n] for n in names if n in types), None)
    for test, proposer in mtp["routes"].items():
        if draft is not None and test == f"use_{draft}":
            raise Unservable(
                f"{where}: vLLM {vllm} makes {arch}'s MTP draft a {draft} model, for which "
                f"get_spec_decode_method builds {proposer} (speculative_config.{test}()): "
                "that proposer's feed is not read"
            )
    res = vllm_mtp("vllm", num_layers, arch, vllm)
    proposer = row["proposers"]["mtp"]
    return dataclasses.replace(
        res,
        engine="vllm-ascend",
        version=version,
        source=(
            f"MTP: vllm-ascend {version} worker/model_runner_v1.py hands {proposer} the "
            "target forward's hidden_states (after get_mtp_target_hidden_states where the "
            f"target has one; no aux states for mtp): vLLM {vllm}'s model code; {res.source}"
        ),
        notes=(*assumed, *(n for n in res.notes if not n.startswith("no version given"))),
    )


def method_refusal(method: str, version: str | None, vllm_mtp_read: Sequence[str]) -> str | None:
    """Why ``resolve --method dflash2|dspark|mtp`` is not answered for vllm-ascend
    (``vllm_mtp_read``: the vLLM releases read for MTP, engines/mtp.py's)."""

    version = version or releases()[-1]
    row = _TABLE.row(version, _BEFORE)
    vllm = row["vllm"]
    known = ", ".join(row["proposers"]) or "none read"
    if method in ("dflash2", "dspark"):
        title = "DFlash2" if method == "dflash2" else "DSpark"
        if row[method]:
            return f"vllm-ascend {version}: {title} code is there, its path was not traced"
        return (
            f"vllm-ascend {version}: no {title} code (no file of the sdist names {method}; "
            f"get_spec_decode_method knows {known}); read: {', '.join(releases())} (release "
            "candidates not read)"
        )
    if method == "mtp":
        proposer = row["proposers"].get("mtp") or row["proposers"].get("deepseek_mtp")
        if proposer is None:
            return f"vllm-ascend {version}: no MTP proposer in get_spec_decode_method ({known})"
        if row.get("mtp") is None:  # only the 0.23.0 runner's MTP feed was read
            return f"vllm-ascend {version}: MTP not read: its {proposer} path was not traced"
        if row["vllm"] in vllm_mtp_read:
            return None  # answered: resolve_mtp
        read = list(vllm_mtp_read)
        vllm_read = (
            f"vLLM {vllm}'s MTP rules are read, but not followed through vllm-ascend's own "
            "proposer here"
            if vllm in read
            else f"vLLM {vllm} was not read for MTP here (mtp_rules.json: vLLM {read[0]} on)"
        )
        return (
            f"vllm-ascend {version}: MTP not read: get_spec_decode_method builds its own "
            f"{proposer}, and worker/model_runner_v1.py feeds it the target forward's "
            f"hidden_states (no aux states for mtp), whose state is vLLM {vllm}'s model code"
            + (
                ", or what the target's get_mtp_target_hidden_states() returns where it has "
                f"one ({', '.join(o.rpartition(':')[2] for o in row['mtp_override'])})"
                if row.get("mtp_override")
                else ""
            )
            + "; "
            + vllm_read
        )
    return f"vllm-ascend: --method {method} is not read"
