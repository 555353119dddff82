"""``eagle-contract infer``: draft a contract from shards the user trusts.

Bounds (docs/first-contract.md, :mod:`.observed`): each slot's norm bounds leave about
``RATE`` of fresh good shards outside (a prediction from the trusted shards' medians and
lengths, never narrower than their range widened by itself), narrowed only as far as the
sharpness self-test needs. Where two slots' bounds would overlap they are cut apart, so a
swap fails, at the cost of false alarms the draft states. With ``--target-model`` such a
draft turns on ``reference_capture`` instead (a run of the target names every slot, so the
bounds need no cut). Slots whose medians overlap cannot be told apart by norms at all: the
draft names the evidence that can. Every draft is run through the sharpness self-test.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..contract.model import schema_id
from ..errors import EagleContractError, UsageError
from ..layers import Layer
from ..shards.discovery import Sampling, choose, discover
from ..shards.formats import FORMATS
from .observed import ALARMING, RATE, Bounds, Fit, Observed, describe_rate, fit_bounds, observe

if TYPE_CHECKING:
    from ..models.target import TargetModel

IDENTIFY_MAX_ERROR = 0.05  # a slot is named by identification below this relative error


def default_layers(
    format: str, num_layers: int, metadata: dict[str, Any], arch: str | None = None
) -> list[Layer]:
    """The layers each trainer's own defaults capture, by format (docs/layers.md)."""
    return FORMATS[format].default_layers(num_layers, metadata, arch)


@dataclass(frozen=True)
class Draft:
    """A drafted contract, what infer has to tell about it, and whether it is sharp."""

    text: str
    notes: tuple[str, ...] = ()
    sharp: bool = True
    false_alarms: float | None = None  # estimated share of fresh good shards it fails


@dataclass(frozen=True)
class InferRequest:
    """What ``infer`` is asked, built once (the CLI builds it from its options): the shards
    and how to read them, the target's shape and the slots' layers (``target_model``, an HF
    directory, supplies L, H, vocab and arch; the explicit fields override it), the serving
    side (``draft``: the draft's directory or config.json, read as ``engine`` reads it;
    default the engine the shards' format pairs with), the tokenizer, and how the drafted
    contract names those files (the ``*_ref`` paths, relative to ``where``)."""

    paths: Sequence[Path]
    name: str
    format: str = "auto"
    sample: Sampling = None
    seed: int = 0
    workers: int = 1
    layers: Sequence[str] | None = None
    num_layers: int | None = None
    hidden_size: int | None = None
    vocab_size: int | None = None
    arch: str | None = None
    target_model: Path | None = None
    draft: Path | None = None
    engine: str | None = None
    tokenizer: Path | None = None
    where: Path | None = None
    shards_ref: str | None = None
    schema_ref: str | None = None
    model_ref: str | None = None
    draft_ref: str | None = None
    tokenizer_ref: str | None = None


def infer_contract(paths: Sequence[Path], *, name: str, **options: Any) -> str:
    """The text of a drafted contract (YAML with comments); ``options`` are
    :class:`InferRequest`'s fields."""
    return draft_contract(InferRequest(paths, name, **options)).text


def draft_contract(request: InferRequest) -> Draft:
    """Draft a contract from ``request.paths`` as ``request`` asks."""
    target = None
    if request.target_model is not None:  # it supplies what the request leaves out
        from ..models.target import TargetModel

        target = TargetModel.open(request.target_model)
        request = replace(
            request,
            num_layers=request.num_layers or target.num_layers,
            hidden_size=request.hidden_size or target.hidden_size,
            vocab_size=request.vocab_size or target.vocab_size,
            arch=request.arch or target.arch,
        )
    files = [f for p in request.paths for f in discover(Path(p), request.format)]
    if not files:
        raise UsageError("no shard files found under " + ", ".join(map(str, request.paths)))
    chosen = choose(files, request.sample, request.seed)
    try:
        obs = observe(chosen, request.format, request.hidden_size, request.workers)
    except UsageError:
        # SpecForge's DFlash files hold the taps alone, concatenated: their width says H only
        # with the draft's hidden_size beside it
        hidden = None
        if request.draft is not None and request.hidden_size is None:
            hidden = _dflash_hidden_size(request.draft)
        if hidden is None:
            raise
        request = replace(request, hidden_size=hidden)
        obs = observe(chosen, request.format, hidden, request.workers)
    named, why = _name_slots(
        obs, request.layers, request.num_layers, request.arch, target, request.draft
    )
    L = request.num_layers or max((ly.index for ly in named), default=1) or 1
    d = _Drafting(
        obs,
        named,
        why,
        request.name,
        L,
        request.arch,
        request.vocab_size,
        request.shards_ref,
        request.schema_ref,
        len(files),
    )
    serving = _serving(d, request.draft, request.draft_ref, request.engine)
    if request.tokenizer is not None or request.target_model is not None:
        from .tokenizer import drafted_lines

        serving += drafted_lines(
            request.tokenizer,
            request.tokenizer_ref,
            request.target_model,
            request.model_ref,
            files,
            obs.format,
        )
    model = (
        None
        if request.target_model is None
        else (request.model_ref or str(request.target_model.resolve()))
    )
    path = request.where or Path("drafted.yaml")
    fit = d.fit(model, False, path)
    if model is None or _quiet(fit):
        plain = _judge(d.text(model, False, serving, fit), path)
        if plain.sharp or model is None:
            notes = (*d.overlap_notes(model is not None), *d.rate_notes(fit, model), *plain.notes)
            return Draft(plain.text, notes, plain.sharp, fit.rate)
    # norms alone give no sharp and quiet bounds: a reference capture names the slots
    evidence_fit = d.fit(model, True, path)
    evidence = _judge(d.text(model, True, serving, evidence_fit, fit), path)
    notes = (*d.rate_notes(evidence_fit, model), *evidence.notes)
    return Draft(evidence.text, notes, evidence.sharp, evidence_fit.rate)


def _quiet(fit: Fit) -> bool:
    """Bounds as quiet as drawn (nothing cut or narrowed), or about as quiet."""
    return fit.quiet or (fit.rate is not None and fit.rate <= 2 * RATE)


def _judge(text: str, path: Path) -> Draft:
    """``text`` with the sharpness self-test's verdict on it."""
    from ..contract.model import parse_contract
    from ..sharpness.selftest import sharpness

    try:
        findings = sharpness(parse_contract(text, path)).findings
    except EagleContractError:
        return Draft(text)  # the caller's validation says why
    notes = tuple(f"{f.code} {f.message}" + (f"; {f.hint}" if f.hint else "") for f in findings)
    return Draft(text, notes, not findings)


def _name_slots(
    obs: Observed,
    layers: Sequence[str] | None,
    num_layers: int | None,
    arch: str | None,
    target: TargetModel | None,
    draft: Path | None = None,
) -> tuple[list[Layer], list[str]]:
    """Each slot's layer and why: --layers, else identification, else the DFlash draft's
    taps (for DFlash shards), else the trainer's defaults."""
    n = len(obs.medians)
    if layers:
        try:
            named = [Layer.parse(x) for x in layers]
        except ValueError as exc:
            raise UsageError(f"--layers: {exc}") from None
        _check_count(n, named)
        return named, ["as --layers says"] * n
    taps = _dflash_taps(obs, draft) if target is None else None
    if taps is not None:
        named = [Layer(t + 1) for t in taps]
        why = [f"the draft's tap {t} (the output of layer {t})" for t in taps]
        if FORMATS[obs.format].has_target:  # SpecForge's DSpark: SGLang's last hidden states
            named.append(Layer(-1))
            why.append(f"{obs.format}'s target_last_hidden_states (post-norm)")
        _check_count(n, named)
        return named, why
    ids = _speculators_dflash_ids(obs, draft) if target is None else None
    if ids is not None:
        if not num_layers:
            raise UsageError(
                "speculators' DFlash shards end with the target's last layer: pass "
                "--num-layers (or --target-model DIR) to name it"
            )
        named = [*(Layer(k) for k in ids), Layer(num_layers)]
        why = [f"the draft's aux_hidden_state_layer_ids {k}" for k in ids]
        why.append("speculators' verifier_last_hidden_states (the last layer, pre-norm)")
        _check_count(n, named)
        return named, why
    if _speculators_mtp(obs, draft, target):
        if not num_layers:
            raise UsageError(
                "speculators' MTP shards hold the target's last layer: pass --num-layers "
                "(or --target-model DIR) to name it"
            )
        named = [Layer(num_layers)]
        _check_count(n, named)
        return named, ["speculators' MTP state: target_layer_ids [num_hidden_layers] (pre-norm)"]
    defaults: list[Layer] | None = None
    if obs.metadata.get("hidden_states", {}).get("layer_ids") or num_layers:
        defaults = default_layers(obs.format, num_layers or 0, obs.metadata, arch)
        _check_count(n, defaults)
    found = _identified(obs, target)
    named, why = [], []
    for i in range(n):
        if i in found:
            named.append(found[i][0])
            why.append(found[i][1])
        elif defaults is not None:
            named.append(defaults[i])
            why.append(f"{obs.format} default")
        else:
            raise UsageError(
                "cannot name the slots' layers: pass --target-model DIR (identifies them), "
                "--layers (one per slot, e.g. residual:2 residual:16 residual:29 final_norm) "
                f"or --num-layers for the {obs.format} defaults"
            )
    return named, why


def _dflash_hidden_size(draft: Path) -> int | None:
    """A DFlash draft's hidden_size, the width of each tap (SpecForge 0.2.0
    ``modeling/draft/dflash.py``: its fc takes ``len(target_layer_ids) * hidden_size``), or
    None for another draft (or an unreadable one: the serving section says why)."""
    from ..engines.draft_config import read_draft_json

    if _draft_method(draft) != "dflash":
        return None
    path = draft / "config.json" if draft.is_dir() else draft
    try:
        value = read_draft_json(path).get("hidden_size")
    except EagleContractError:
        return None
    return value if type(value) is int and value > 0 else None


def _dflash_taps(obs: Observed, draft: Path | None) -> list[int] | None:
    """The taps a DFlash format's trainer captured: the draft config's tap list, distinct and
    in layer order (SpecForge captures them through SGLang's set_dflash_layers_to_capture),
    or None where the shards are not DFlash's or the draft names no taps."""
    if FORMATS[obs.format].method not in ("dflash", "dspark") or draft is None:
        return None
    from ..engines.dflash import read_dflash_draft

    try:
        taps = read_dflash_draft(draft).taps
    except EagleContractError as exc:
        raise UsageError(f"--draft: {exc}") from None
    return sorted(set(taps)) if taps is not None else None


def _speculators_dflash_ids(obs: Observed, draft: Path | None) -> list[int] | None:
    """A speculators-format DFlash draft's ``aux_hidden_state_layer_ids`` (vLLM ids: id k =
    ``residual:k``) for speculators' shards, or None. speculators 0.9.0 trains DFlash from its
    EAGLE-3 layout (``train/data.py``: the aux ids' states as listed, then
    ``verifier_last_hidden_states``), so the files cannot say the method: the draft does."""
    if obs.format != "speculators" or draft is None or _draft_method(draft) != "dflash":
        return None
    from ..engines.dflash import read_dflash_draft

    try:
        config = read_dflash_draft(draft)
    except EagleContractError as exc:
        raise UsageError(f"--draft: {exc}") from None
    ids = config.found.get("eagle_aux_hidden_state_layer_ids") if config.speculators else None
    if ids is not None and min(ids, default=0) < 0:
        raise UsageError(
            f"--draft: aux_hidden_state_layer_ids {list(ids)} holds a negative id: vLLM ids "
            "count layers from 0 (the embedding output)"
        )
    return list(ids) if ids is not None else None


def _speculators_mtp(obs: Observed, draft: Path | None, target: TargetModel | None) -> bool:
    """Whether these are speculators' shards of an MTP head (the draft says so): speculators
    0.9.0 trains MTP on one state, ``models/mtp/core.py`` ``target_layer_ids`` =
    ``[num_hidden_layers]``, vLLM aux id L: ``residual:L`` (docs/mtp.md)."""
    return (
        target is None
        and obs.format == "speculators"
        and draft is not None
        and _draft_method(draft) == "mtp"
    )


def _check_count(n: int, named: list[Layer]) -> None:
    if len(named) != n:
        raise UsageError(
            f"the shards hold {n} slots but {len(named)} layers were named: "
            + " ".join(map(str, named))
        )


def _identified(obs: Observed, target: TargetModel | None) -> dict[int, tuple[Layer, str]]:
    """Slots named by a reference capture of the target on the first usable shard."""
    if target is None or obs.probe is None:
        return {}
    from ..checks.evidence import identify
    from ..shards.stored import to_torch

    ids, states = to_torch(obs.probe[0]).reshape(-1), [to_torch(s) for s in obs.probe[1]]
    if obs.hidden_size != target.hidden_size:
        raise UsageError(
            f"the shards' states are {obs.hidden_size} wide, {target.path} has hidden_size "
            f"{target.hidden_size}: not this target's shards"
        )
    from ..models.inputs import unfit

    if unfit(ids, target, slots=states) is not None:
        return {}  # the slots are named by the other means; the shard's checks say why
    return {
        i.slot: (
            i.best.layer,
            f"identified: rel. error {i.best.rel_error:.2g}, "
            f"runner-up {i.runner_up.layer} {i.runner_up.rel_error:.2g}",
        )
        for i in identify(states, ids, target)
        if i.best.rel_error <= IDENTIFY_MAX_ERROR
    }


@dataclass(frozen=True)
class _Drafting:
    obs: Observed
    named: list[Layer]
    why: list[str]
    name: str
    num_layers: int
    arch: str | None
    vocab_size: int | None
    shards_ref: str | None
    schema_ref: str | None
    found: int = 0  # shard files under the paths, of which obs.shards were read (--sample)

    @property
    def has_target(self) -> bool:
        return FORMATS[self.obs.format].has_target

    @property
    def fc(self) -> list[int]:
        return list(range(len(self.named) - (1 if self.has_target else 0)))

    def fit(self, model: str | None, reference: bool, path: Path) -> Fit:
        """Bounds for every slot, as quiet as the sharpness self-test allows; with a
        reference capture, pairs are not cut (the capture tells the slots apart)."""

        def sharp(bounds: list[Bounds]) -> bool:  # serving left out: it moves no norm
            return _judge(self.text(model, reference, [], Fit.of(bounds)), path).sharp

        return fit_bounds(self.obs.medians, self.obs.rows, sharp, cut=not reference)

    def rate_notes(self, fit: Fit, model: str | None) -> list[str]:
        """What infer says about the bounds' false alarms; a warning when too many."""
        n = self.obs.shards
        rate = describe_rate(fit.rate, n)
        read = f"{n} of {self.found} shard(s), --sample all reads every one" if self.more else ""
        said = f"norm bounds: estimated false alarms {rate} (from {read or f'{n} shard(s)'})"
        return [said, *self.rate_warnings(fit, model)]

    @property
    def more(self) -> bool:
        """The sample left shards unread (``--sample N`` below the count found)."""
        return self.found > self.obs.shards

    def rate_warnings(self, fit: Fit, model: str | None) -> list[str]:
        if fit.rate is not None and fit.rate <= ALARMING:
            return []
        n, named = self.obs.shards, self.named
        why = [
            f"slots {i} ({named[i]}) and {j} ({named[j]}) are cut close to their medians so "
            "that a swap of the two fails"
            for i, j in fit.cut
        ]
        narrowed = [str(k) for k, r in enumerate(fit.reach) if r < 1.0]
        if narrowed:
            why.append(
                f"slot(s) {', '.join(narrowed)} are narrowed so that the sharpness self-test passes"
            )
        if n < 10:
            why.append(f"from {n} shard(s) the shard-to-shard spread is not known well")
        advice = (
            "draft from more shards"
            + (" (--sample all)" if self.more else "")
            + (
                ""
                if model is not None or not fit.cut
                else ", or pass --target-model DIR (a reference capture tells the slots apart, "
                "and the bounds need no cut)"
            )
        )
        head = (
            f"how often the norm bounds fail good shards is {describe_rate(None, n)}"
            if fit.rate is None
            else f"the norm bounds will fail about {describe_rate(fit.rate, n)} of this "
            "pipeline that are good"
        )
        return [f"{head}: {'; '.join(why) or 'the spread is wide'}; {advice}"]

    def together(self) -> list[tuple[int, int]]:
        """Pairs of slots whose per-shard medians overlap: norms cannot tell them apart."""
        m = self.obs.medians
        n = len(m)
        return [
            (i, j)
            for i in range(n)
            for j in range(i + 1, n)
            if max(m[i]) >= min(m[j]) and max(m[j]) >= min(m[i])
        ]

    def overlap_notes(self, has_model: bool) -> list[str]:
        m = self.obs.medians
        return [
            f"slots {i} ({self.named[i]}) and {j} ({self.named[j]}) have overlapping per-shard "
            f"median norms [{min(m[i]):.4g}, {max(m[i]):.4g}] and [{min(m[j]):.4g}, "
            f"{max(m[j]):.4g}]: norms cannot tell them apart; "
            + (
                "the target model did not either"
                if has_model
                else "pass --target-model DIR (a reference capture names each slot) or verify "
                "against a serving capture (check --captures DIR or --sglang-url)"
            )
            for i, j in self.together()
        ]

    def text(
        self,
        model: str | None,
        reference: bool,
        serving: list[str],
        fit: Fit,
        plain: Fit | None = None,
    ) -> str:
        """The contract with ``fit``'s bounds; ``plain`` is the fit without a reference
        capture, whose cut pairs say why the capture is on."""
        obs, n = self.obs, len(self.named)
        out = [
            f"# yaml-language-server: $schema={self.schema_ref or schema_id()}",
            f"# Drafted by `eagle-contract infer` from {obs.shards} shard(s). Review every line:",
            "# each slot's layer says where it came from; the bounds are measured (a prediction of",
            "# a fresh shard's median from these shards' medians and lengths, at least their range",
            "# widened by itself, cut where two slots' would overlap: see docs/first-contract.md).",
            f"# Estimated false alarms: {describe_rate(fit.rate, obs.shards)}"
            + (" of this pipeline." if fit.rate is not None else "."),
            f"contract: {self.name}",
            "version: 1",
            "target:",
        ]
        if self.arch:
            out.append(f"  arch: {self.arch}")
        out += [f"  num_hidden_layers: {self.num_layers}", f"  hidden_size: {obs.hidden_size}"]
        if self.vocab_size:
            out.append(f"  vocab_size: {self.vocab_size}")
        else:
            out.append("  # vocab_size: ...   # set it to check input ids against the vocabulary")
        out.append(f"  dtype: {obs.dtypes[0]}")
        if model is not None:
            out.append(f"  model: {model}")
        if reference:
            close = sorted({*self.together(), *(plain.cut if plain else ())})
            pairs = ", ".join(f"{i} and {j}" for i, j in close) or "some"
            out.append(
                f"  reference_capture: true  # slots {pairs}: norms alone cannot tell "
                "them apart without false alarms, a run of the target on each shard's "
                "tokens does"
            )
        out += ["training:", f"  format: {obs.format}"]
        if self.shards_ref:
            out.append(f"  shards: {self.shards_ref}")
        out.append("  slots:  # stored order; norm = bounds on the median per-token L2 norm")
        for i, (layer, dtype, values) in enumerate(zip(self.named, obs.dtypes, obs.medians)):
            lo, hi = fit.bounds[i]
            dtype_part = "" if dtype == obs.dtypes[0] else f", dtype: {dtype}"
            cut = [b if a == i else a for a, b in fit.cut if i in (a, b)]
            out.append(
                f"    - {{layer: {layer}{dtype_part}, norm: {{min: {lo:.6g}, max: {hi:.6g}}}}}"
                f"  # slot {i}: {self.why[i]}; medians {min(values):.6g}..{max(values):.6g}"
                + (f"; cut against slot {', '.join(map(str, cut))}" if cut else "")
            )
        if not self.has_target:
            out += [
                f"  fc_input: [{', '.join(map(str, self.fc))}]  # slots the trainer concatenates",
                f"  target_slot: null  # {obs.format} files keep no target state",
            ]
        elif n > 1:
            out += [
                f"  fc_input: [{', '.join(map(str, self.fc))}]  # slots the trainer concatenates",
                f"  target_slot: {n - 1}",
            ]
        if obs.ids_dtype != "int64" or obs.mask_dtype != "int64":
            out += [
                f"  input_ids: {{dtype: {obs.ids_dtype}}}",
                f"  loss_mask: {{dtype: {obs.mask_dtype}}}",
            ]
        if not reference:
            out += [f"# WARNING: {note}" for note in self.overlap_notes(model is not None)]
        out += [f"# WARNING: {note}" for note in self.rate_warnings(fit, model)]
        made_for = FORMATS[obs.format].method
        if not serving and made_for is not None:  # fitting: the contract must still load
            serving = [f"method: {made_for}"]
        return "\n".join(out + serving) + "\n"


def _serving(
    d: _Drafting, draft: Path | None, draft_ref: str | None, engine: str | None = None
) -> list[str]:
    """A ``serving`` section for ``engine`` (default: the one the shards' pipeline pairs
    with, ``Format.engine``: vLLM for speculators' files, SGLang for SpecForge's) whose aux
    ids feed the draft the fc input's layers: the draft config's ids as that engine reads
    them, else the engine's default or the ids that give those layers."""
    from ..engines.resolve import get_engine

    want = tuple(d.named[i] for i in d.fc)
    if draft is not None and not want and _draft_method(draft) == "mtp":  # one slot, no fc
        return _method_only("mtp", engine or FORMATS[d.obs.format].engine)
    if not want:
        return []
    from ..engines.matrix import serving_engines

    name = engine or FORMATS[d.obs.format].engine
    side = get_engine(name)
    if side not in serving_engines():
        raise UsageError(f"--engine {name} is a trainer, not a serving engine")
    arch = [f"  arch: {d.arch}"] if d.arch else []
    method = _draft_method(draft) if draft is not None else None
    if draft is not None and method == "dflash":
        return _dflash_serving(draft, draft_ref, engine, name, arch)
    if draft is not None and method in ("dflash2", "dspark"):
        return _family_serving(method, draft, draft_ref, engine, name, arch)
    if method in ("dflash2", "dspark", "pard", "mtp"):
        return _method_only(method, name)
    if FORMATS[d.obs.format].method == "dflash":
        return [
            f"method: dflash  # {d.obs.format} shards are DFlash's (docs/dflash.md)",
            "# serving: pass --draft DIR (the DFlash draft) to draft a serving section",
        ]
    if FORMATS[d.obs.format].method == "dspark":
        return [
            f"method: dspark  # {d.obs.format} shards are DSpark's (docs/dspark.md)",
            *_method_only("dspark", name)[1:],
        ]
    releases = _releases(name)
    if draft is not None:
        from ..engines.draft_config import read_draft_config

        config = read_draft_config(draft)
        ids = side.draft_ids(config) if side.id_keys else None
        since = _since(d, name, releases, ids, want)
        ref = draft_ref or str(draft.resolve())
        read = (
            f"aux ids {list(ids) if ids else 'the default'}"
            if side.id_keys
            else f"{side.title} reads no ids from it: its default"
        )
        return [
            "serving:",
            f"  engine: {name}",
            *_version(
                releases,
                since,
                "  # no release feeds the fc input's layers: see EC501" if since is None else "",
            ),
            *arch,
            f"  draft_config: {ref}  # {read}",
        ]
    ks = [x.index for x in want]
    candidates = [ids for ids in (tuple(k - 1 for k in ks), tuple(ks)) if min(ids) >= 0]
    spans = {ids: _since(d, name, releases, ids, want) for ids in (*candidates, None)}
    found = [(since, ids) for ids, since in spans.items() if since is not None]
    if not found:
        return [
            f"# serving: no aux ids make {name} feed {', '.join(map(str, want))}; write "
            "it by hand (eagle-contract resolve)"
        ]
    since, ids = min(found, key=lambda f: (f[0], f[1] is None))  # explicit ids first
    key = side.id_keys[0] if side.id_keys else f"{side.title}'s launch config"
    return [
        "serving:",
        f"  engine: {name}",
        *_version(releases, since, "  # the releases that feed the draft these layers"),
        *arch,
        f"  # aux_layer_ids: none, {side.title}'s default capture feeds these layers"
        if ids is None
        else f"  aux_layer_ids: {list(ids)}  # the draft's {key}",
    ]


def _draft_method(draft: Path) -> str | None:
    """The method a draft's config.json names (methods.detect), None for a GGUF or an
    unreadable file (the EAGLE-3 reader says why)."""
    from ..engines import gguf_meta
    from ..engines.draft_config import read_draft_json
    from ..methods import detect

    path = draft / "config.json" if draft.is_dir() else draft
    if not path.is_file() or gguf_meta.is_gguf(path):
        return None
    try:
        return detect(read_draft_json(path))
    except EagleContractError:
        return None


def _method_only(method: str, engine: str) -> list[str]:
    """``method: M`` and no serving section, for a draft of another method than EAGLE-3 or
    DFlash (a serving section by EAGLE-3's reading would resolve its taps by the wrong rules;
    which engine serves it is the user's to write)."""
    from ..methods import contract_engines, get_method

    m = get_method(method)
    takes = ", ".join(contract_engines(method))
    how = (
        f"add one (engine: one of {takes}) to check the trained state "
        "(the last training slot, docs/mtp.md)"
        if method == "mtp"
        else f"add one (engine: one of {takes}; draft_config) to check the taps"
        if m.engines
        else m.rules_note
    )
    return [
        f"method: {method}  # the draft config names a {m.title} draft (docs/methods.md)",
        f"# serving: not written by infer; {how}",
    ]


def _family_serving(
    method: str,
    draft: Path,
    draft_ref: str | None,
    engine: str | None,
    default: str,
    arch: list[str],
) -> list[str]:
    """``method: dflash2|dspark`` and a serving section for such a draft: the engine asked
    for, else the shards' pipeline's where it serves the method, else SGLang; from the first
    release of it that serves the method (method_rules.json), so the layout check resolves
    the draft's taps by that method's rules in every release the section names."""
    from ..engines.method_table import releases
    from ..methods import get_method

    m = get_method(method)
    name = engine or (default if default in m.engines else "sglang")
    if name not in m.engines:
        raise UsageError(
            f"--engine {name}: no {m.title} tap rules of it are read here; one of "
            f"{', '.join(m.engines)}"
        )
    served = releases(name, method)
    version = (
        [f'  version: ">={served[0]}"  # the first release read that serves it'] if served else []
    )
    return [
        f"method: {method}  # the draft config names a {m.title} draft (docs/{method}.md)",
        "serving:",
        f"  engine: {name}",
        *arch,
        *version,
        f"  draft_config: {draft_ref or str(draft.resolve())}  # taps as {name} reads them",
    ]


def _dflash_serving(
    draft: Path, draft_ref: str | None, engine: str | None, default: str, arch: list[str]
) -> list[str]:
    """``method: dflash`` and a serving section for a DFlash draft (docs/dflash.md): the
    engine asked for, else the shards' pipeline's where it serves DFlash, else SGLang."""
    from ..engines.dflash import ENGINES, read_dflash_draft
    from ..engines.dflash_draft import TAP_KEYS

    name = engine or (default if default in ENGINES else "sglang")
    if name not in ENGINES:
        raise UsageError(
            f"--engine {name}: no DFlash tap rules of it are read here; one of {', '.join(ENGINES)}"
        )
    config = read_dflash_draft(draft)
    aux = config.found.get("eagle_aux_hidden_state_layer_ids") if config.speculators else None
    read = (
        f"aux_hidden_state_layer_ids {list(aux)} (vLLM ids: residual:k)"
        if aux is not None
        else f"taps {list(config.taps)} under {config.tap_key}"
        if config.taps is not None
        else f"no tap list ({' / '.join(TAP_KEYS)}): the engine guesses them (EC522)"
    )
    return [
        "method: dflash  # the draft config names a DFlash draft (docs/dflash.md)",
        "serving:",
        f"  engine: {name}",
        *arch,
        f"  draft_config: {draft_ref or str(draft.resolve())}  # {read}",
    ]


def _releases(engine: str) -> list[str | None]:
    """Every release of ``engine`` the tool covers, oldest first (``[None]`` when it is
    unversioned)."""
    from ..engines.fixes import ANY
    from ..engines.matrix import covered
    from ..engines.resolve import get_engine

    return [None if v == ANY else v for v in covered(get_engine(engine))]


def _version(releases: list[str | None], since: int | None, note: str) -> list[str]:
    """The section's ``version`` line: from the oldest release that feeds the layers (the
    newest, with ``note``, when none does); none for an unversioned engine."""
    if releases == [None]:
        return []
    first = releases[-1 if since is None else since]
    return [f'  version: ">={first}"{note}']


def _since(
    d: _Drafting,
    engine: str,
    releases: list[str | None],
    ids: tuple[int, ...] | None,
    want: tuple[Layer, ...],
) -> int | None:
    """The index in ``releases`` of the oldest release from which every release up to the
    newest feeds ``want`` for ``ids`` with no problem; None when the newest does not."""
    from ..engines.resolve import resolve

    oldest = None
    for index in range(len(releases) - 1, -1, -1):
        try:
            res = resolve(engine, d.num_layers, ids, d.arch, releases[index])
        except EagleContractError:  # Unservable, or ids the engine cannot take
            break
        if res.layers != want or res.problems:
            break
        oldest = index
    return oldest
