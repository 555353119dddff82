"""``eagle-contract doctor``: every check that needs no shards, before deploy, one verdict
per seam (docs/doctor.md).

A seam is one place where the draft meets what serves it: the layers the engine feeds
(``layout``), what the engine does with the draft's ids (``engine-rules``), the checkpoint
it loads (``draft-checkpoint``), the draft's config as trained and as served
(``draft-config``), its vocabulary map (``vocabulary``), the tokenizer, the serving target
against the training one (``target-identity``), the method and mode the engine really runs
(``method``) and the launch line and environment (``serving-args``).
Each runs the check families' own functions on the draft folder and the folders given,
under the user's contract or one made from the target's config.json, and ends ``pass``,
``warn``, ``fail`` or ``skipped`` (with the reason and what to give to run it). Seams are
listed failing first, then warning, each group in the order of what its failure costs
(:data:`SEAMS`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import EagleContractError, UsageError
from ..findings import NOT_RUN, Finding, RuleCode, finding, not_run

if TYPE_CHECKING:
    from ..contract.model import Contract

Status = Literal["pass", "warn", "fail", "skipped"]
STATUSES: tuple[Status, ...] = ("fail", "warn", "pass", "skipped")  # the order seams print in


@dataclass(frozen=True)
class Inputs:
    """What doctor was given: the draft's folder, and whatever else the user has."""

    draft: Path
    target_model: Path | None = None
    serving_target_model: Path | None = None
    engine: str | None = None
    version: str | None = None
    serving_args: str | None = None
    contract: Contract | None = None
    serving_env: dict[str, str] | None = None  # --serving-env's variables (EC517-EC520)
    serving_env_label: str = ""


class Skipped(Exception):
    """A seam that cannot run on what was given: why, and what to give."""

    def __init__(self, reason: str, fix: str) -> None:
        super().__init__(reason)
        self.reason, self.fix = reason, fix


@dataclass
class Setup:
    """The inputs resolved once for every seam. ``contract`` is the user's (with the draft,
    engine and folders given here in its place) or one made from the target's config.json
    (``made``: its findings carry no contract location); None when no target shape is known."""

    inputs: Inputs
    draft_dir: Path
    contract: Contract | None
    made: bool
    engine: str | None
    target_dir: Path | None
    serving_dir: Path | None
    no_target: str  # why there is no contract, when there is none
    kept: dict[str, list[Finding]] = field(default_factory=dict)

    @property
    def draft_config(self) -> Path:
        return self.draft_dir / "config.json"

    def serving_contract(self, seam: str) -> Contract:
        """The contract with a serving section, or :class:`Skipped` saying what is missing."""
        if self.contract is None:
            raise Skipped(
                f"{seam} needs the target's layer count and width: {self.no_target}",
                "pass --target-model DIR (or --contract C)",
            )
        if self.contract.serving is None or self.engine is None:
            raise Skipped(
                f"{seam} needs the serving engine",
                "pass --engine E [--version V] (or a contract with a serving section)",
            )
        return self.contract

    def layout(self, seam: str) -> list[Finding]:
        """The layout check's findings on this contract, run once (its codes are split
        between the layout, engine-rules and serving-args seams)."""
        contract = self.serving_contract(seam)
        if "layout" not in self.kept:
            from ..checks.layout import check_layout

            self.kept["layout"] = check_layout(
                contract,
                self.inputs.serving_args,
                serving_env=self.inputs.serving_env,
                env_label=self.inputs.serving_env_label,
            )
        return self.kept["layout"]


@dataclass(frozen=True)
class Seam:
    """One seam: its name, what its failure costs, the codes an unreadable input is
    reported under, and the function that checks it."""

    name: str
    costs: str
    unreadable: RuleCode
    run: Callable[[Setup], list[Finding]]


@dataclass(frozen=True)
class Verdict:
    """One seam's verdict."""

    name: str
    status: Status
    findings: tuple[Finding, ...] = ()
    reason: str = ""  # why it was skipped
    fix: str = ""  # the first problem's hint, or what to give a skipped seam

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "reason": self.reason,
            "fix": self.fix,
            "findings": [f.to_dict() for f in self.findings],
        }


@dataclass(frozen=True)
class Diagnosis:
    """Every seam's verdict, in print order, and the overall one."""

    verdicts: tuple[Verdict, ...]

    @property
    def verdict(self) -> Status:
        found = {v.status for v in self.verdicts}
        return "fail" if "fail" in found else "warn" if "warn" in found else "pass"

    @property
    def failed(self) -> bool:
        return self.verdict == "fail"

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "seams": [v.to_dict() for v in self.verdicts]}


# -- the seams ------------------------------------------------------------------------------

LAYOUT_CODES: frozenset[str] = frozenset(
    {"EC501", "EC502", "EC503", "EC504", "EC505", "EC506", "EC515"}
)
ENGINE_CODES: frozenset[str] = frozenset(
    {"EC507", "EC508", "EC510", "EC511", "EC514", "EC516", "EC522"}
)
METHOD_CODES: frozenset[str] = frozenset({"EC521", "EC523", "EC524", "EC527", "EC528"})
LAUNCH_CODES: frozenset[str] = frozenset({"EC512", "EC517", "EC518", "EC519", "EC520", "EC526"})


def _no_taps(contract: Contract) -> None:
    """Skip a tap seam for a method that reads no tap list (PARD, MTP: docs/methods.md)."""
    from ..methods import get_method

    m = get_method(contract.method)
    if not m.engines:
        raise Skipped(
            f"{m.title}: {m.tap_count}",
            "nothing to give: see docs/methods.md",
        )


def _layout(s: Setup) -> list[Finding]:
    contract = s.serving_contract("layout")
    _no_taps(contract)
    if contract.training is None:
        raise Skipped(
            "no training section: the layers the draft was trained on are unknown",
            "pass --contract C whose training.slots and fc_input name them",
        )
    return [f for f in s.layout("layout") if f.code in LAYOUT_CODES]


def _engine_rules(s: Setup) -> list[Finding]:
    _no_taps(s.serving_contract("engine-rules"))
    return [f for f in s.layout("engine-rules") if f.code in ENGINE_CODES]


def _method(s: Setup) -> list[Finding]:
    """The method and mode the engine will really run with this draft (issue 39 item 1):
    a draft config that turns the aux states off under EAGLE3 (EC521), mlx-vlm running the
    draft as another drafter kind (EC523) or dropping it (EC524), a DFlash draft's mask token
    (EC527) and tap list (EC528)."""
    return [f for f in s.layout("method") if f.code in METHOD_CODES]


def _serving_args(s: Setup) -> list[Finding]:
    contract = s.serving_contract("serving-args")
    assert contract.serving is not None
    if not (s.inputs.serving_args or contract.serving.launch or s.inputs.serving_env):
        raise Skipped(
            "no launch command line or serving environment",
            'pass --serving-args "..." (or set serving.launch) and --serving-env FILE',
        )
    return [f for f in s.layout("serving-args") if f.code in LAUNCH_CODES]


def _draft_checkpoint(s: Setup) -> list[Finding]:
    from ..checks.draft import DFLASH_FAMILY, check_draft
    from ..models.draft import weight_files

    contract = s.serving_contract("draft-checkpoint")
    if contract.method not in ("eagle3", *DFLASH_FAMILY):
        raise Skipped(
            f"EC90x read an EAGLE-3 or DFlash-family draft's fc, lm_head and d2t; a "
            f"{contract.method} draft's checkpoint is not read here (its taps are the layout, "
            "engine-rules, method and serving-args seams')",
            "nothing to pass: not built yet (issue 38)",
        )
    if not weight_files(s.draft_dir):
        return [
            _finding(
                s,
                "EC510",
                f"draft {s.draft_dir} holds no safetensors weights: the engine has nothing to load",
                "export the draft's weights (model.safetensors) beside its config.json",
            )
        ]
    embedding, notes = None, []
    if s.target_dir is not None and contract.serving is not None:
        if contract.serving.engine == "sglang":  # EC904 compares with the target's embedding
            from ..models.target import TargetModel

            try:
                embedding = TargetModel.open(s.target_dir).embedding
            except UsageError as exc:  # the target folder's own seam says what is wrong
                notes.append(not_run("draft-checkpoint's embedding check (EC904)", exc))
    return notes + check_draft(contract, embedding)


def _vocabulary(s: Setup) -> list[Finding]:
    from ..engines.draft_config import read_draft_config
    from ..models.draft import read_draft_weights

    draft = read_draft_config(s.draft_config)
    vocab = s.contract.target.vocab_size if s.contract is not None else None
    weights = read_draft_weights(s.draft_dir, vocab or draft.vocab_size, draft.draft_vocab_size)
    out = []
    if weights is not None and weights.d2t_problem:
        out.append(
            _finding(
                s,
                "EC509",
                f"draft vocabulary maps: {weights.d2t_problem}",
                "regenerate d2t/t2d from the same token frequencies, with the target's vocab_size",
            )
        )
    from ..checks.vocabulary import check_vocabulary

    return out + check_vocabulary(s.draft_dir, contract=s.contract, shard_paths=())


def _draft_config(s: Setup) -> list[Finding]:
    import shlex

    from ..checks.draft_config import check_draft_config

    args = shlex.split(s.inputs.serving_args or "")  # setup() refused one it cannot split
    version = s.contract.serving.version if s.contract and s.contract.serving else None
    return check_draft_config(
        s.draft_dir, contract=s.contract, engine=s.engine, version=version, serving_args=args
    )


def _tokenizer(s: Setup) -> list[Finding]:
    spec = s.contract.tokenizer if s.contract is not None else None
    folder = spec.path if spec is not None else None
    if folder is None:
        for candidate in (s.serving_dir, s.target_dir):
            if candidate is not None and any(
                (candidate / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")
            ):
                folder = candidate
                break
    if folder is None:
        raise Skipped(
            "no tokenizer folder (tokenizer.path, or tokenizer files in a target folder)",
            "pass --contract C with tokenizer.path, or a --target-model holding its tokenizer",
        )
    from ..checks.tokens import check_tokenizer

    return check_tokenizer(folder, contract=s.contract)


def _target_identity(s: Setup) -> list[Finding]:
    from ..models.identity import check_target_identity

    if s.target_dir is None or s.serving_dir is None:
        raise Skipped(
            "needs both the training target and the serving checkpoint",
            "pass --target-model DIR and --serving-target-model DIR",
        )
    training = s.contract.training if s.contract is not None else None
    layers = sorted({str(slot.layer) for slot in training.slots}) if training else None
    try:
        return check_target_identity(s.target_dir, s.serving_dir, layers=layers)
    except UsageError as exc:  # a layer the models do not have
        return [
            _finding(
                s,
                "EC620",
                f"the serving target {s.serving_dir} could not be compared: {exc}",
                "check target.num_hidden_layers against both models",
                key="serving.target_model",
            )
        ]


SEAMS: tuple[Seam, ...] = (
    Seam(
        "target-identity",
        "a serving checkpoint in another basis (rotated, another model) feeds every state "
        "wrong: acceptance near 1.0 whatever the layout",
        "EC620",
        _target_identity,
    ),
    Seam(
        "layout",
        "the fc fed other layers than it was trained on: acceptance collapses (EC501)",
        "EC510",
        _layout,
    ),
    Seam(
        "engine-rules",
        "the engine refuses the draft, or silently reads its default or moved ids",
        "EC510",
        _engine_rules,
    ),
    Seam(
        "method",
        "the engine runs another method or mode than the draft was trained for (an EAGLE-3 "
        "draft without its aux states; a DFlash draft's mask token or tap list): acceptance "
        "falls with no error",
        "EC510",
        _method,
    ),
    Seam(
        "draft-checkpoint",
        "an fc or lm_head of another shape fails to load or drafts from random weights",
        "EC510",
        _draft_checkpoint,
    ),
    Seam(
        "vocabulary",
        "a wrong d2t map turns every drafted token into another token",
        "EC509",
        _vocabulary,
    ),
    Seam(
        "tokenizer",
        "another tokenizer revision or template: the draft saw other tokens",
        "EC009",  # its own check says EC330 for a folder it cannot read
        _tokenizer,
    ),
    Seam(
        "draft-config",
        "positions, RoPE or flags served otherwise than trained: acceptance falls, most "
        "at long context",
        "EC510",
        _draft_config,
    ),
    Seam(
        "serving-args",
        "a launch setting the engine silently changes (fewer draft tokens than asked)",
        "EC512",
        _serving_args,
    ),
)
SEAM_NAMES: tuple[str, ...] = tuple(seam.name for seam in SEAMS)


def _finding(s: Setup, code: RuleCode, message: str, hint: str, key: str = "") -> Finding:
    contract = None if s.made else s.contract
    return finding(code, message, contract=contract, key=key or "serving.draft_config", hint=hint)


# -- the run --------------------------------------------------------------------------------


def setup(inputs: Inputs) -> Setup:
    """Resolve the inputs once: the draft folder, the engine, the contract every seam reads.
    A path that is not there, an engine that is a trainer or a version the engine cannot
    read is a :class:`UsageError`."""
    draft_dir = inputs.draft.parent if inputs.draft.name == "config.json" else inputs.draft
    if not draft_dir.is_dir():
        raise UsageError(f"--draft {inputs.draft}: no such folder")
    for option, path in (
        ("--target-model", inputs.target_model),
        ("--serving-target-model", inputs.serving_target_model),
    ):
        if path is not None and not path.is_dir():
            raise UsageError(f"{option} {path}: no such folder")
    given = inputs.contract
    serving = given.serving if given is not None else None
    engine = inputs.engine or (serving.engine if serving is not None else None)
    if inputs.version is not None and inputs.engine is None and serving is None:
        raise UsageError("--version goes with --engine (or a contract's serving.engine)")
    version = inputs.version if inputs.version is not None or inputs.engine else None
    if version is None and serving is not None and engine == serving.engine:
        version = serving.version
    if engine is not None:
        _check_engine(engine, version, given.method if given is not None else None)
    if inputs.serving_args is not None:
        import shlex

        try:
            shlex.split(inputs.serving_args)
        except ValueError as exc:  # an unclosed quote
            raise UsageError(f"--serving-args: {exc}") from None
    target_dir = inputs.target_model or (given.target.model if given is not None else None)
    serving_dir = inputs.serving_target_model or (
        serving.target_model if serving is not None else None
    )
    contract, no_target = _contract(given, draft_dir, engine, version, target_dir, serving_dir)
    if engine is not None and contract is not None:
        _check_method(engine, contract.method)
    return Setup(
        inputs,
        draft_dir,
        contract,
        given is None,
        engine,
        target_dir,
        serving_dir,
        no_target,
    )


def _check_engine(engine: str, version: str | None, method: str | None = None) -> None:
    from ..engines import method_engines
    from ..engines.matrix import serving_engines
    from ..engines.resolve import get_engine
    from ..methods import METHOD_ONLY_ENGINES

    if engine in METHOD_ONLY_ENGINES or (
        method is not None and method_engines.serves(engine, method)
    ):  # a contract's serving.engine of its method: that method's releases read
        try:
            if method is not None and method_engines.serves(engine, method):
                method_engines.versions(engine, method, version)
            else:
                method_engines.engine(engine).versions(version)
        except EagleContractError as exc:
            raise UsageError(f"--version {version}: {exc}") from None
        return
    side = get_engine(engine)
    if side not in serving_engines():
        raise UsageError(f"--engine {engine} is a trainer, not a serving engine")
    try:
        side.versions(version)
    except EagleContractError as exc:
        raise UsageError(f"--version {version}: {exc}") from None


def _check_method(engine: str, method: str) -> None:
    """A usage error where ``engine``'s rules for the draft's ``method`` are not read (a
    method engine asked for a method it does not serve, EAGLE-3 on onnxruntime-genai)."""
    from ..engines.method_engines import refusal
    from ..methods import METHOD_ENGINES, get_method

    if engine in METHOD_ENGINES and not get_method(method).serves(engine):
        why = refusal(engine, method)
        if why is not None:
            raise UsageError(f"--engine {engine}: {why}")


def _contract(
    given: Contract | None,
    draft_dir: Path,
    engine: str | None,
    version: str | None,
    target_dir: Path | None,
    serving_dir: Path | None,
) -> tuple[Contract | None, str]:
    """The contract the seams read, and why there is none."""
    from ..contract.model import Contract, ServingSpec, TargetSpec

    config = draft_dir / "config.json"
    serving = None
    if engine is not None:
        old = given.serving if given is not None else None
        arch, ids, dtype, launch = (
            (old.arch, old.aux_layer_ids, old.dtype, old.launch)
            if old is not None
            else (None, None, None, None)
        )  # what the contract's own serving section says, else nothing
        serving = ServingSpec(
            engine, version, arch, config, ids, dtype, launch, target_model=serving_dir
        )
    if given is not None:
        target = dataclasses.replace(given.target, model=target_dir)
        return dataclasses.replace(given, serving=serving, target=target), ""
    if target_dir is None:
        return None, "no --target-model or --contract gives it"
    from ..models.target import TargetModel

    model = TargetModel.open(target_dir)
    target = TargetSpec(
        arch=model.arch,
        num_hidden_layers=model.num_layers,
        hidden_size=model.hidden_size,
        vocab_size=model.vocab_size,
        dtype=_dtype(model.text_config),
        model=target_dir,
    )
    return Contract("doctor", config, target, None, serving, method=_method_of(config)), ""


def _method_of(config: Path) -> str:
    """The method the draft's config.json names (``methods.detect``: a DFlash draft is read
    by DFlash's tap rules, not EAGLE-3's), EAGLE-3 where it names none or cannot be read
    (the draft-config seam says why)."""
    from ..engines.draft_config import read_draft_json
    from ..methods import DEFAULT, detect

    try:
        return detect(read_draft_json(config)) or DEFAULT
    except EagleContractError:
        return DEFAULT


def _dtype(config: dict[str, Any]) -> str:
    value = config.get("torch_dtype") or config.get("dtype")
    return value if value in ("bfloat16", "float16", "float32") else "bfloat16"


def diagnose(inputs: Inputs, seams: Sequence[Seam] = SEAMS) -> Diagnosis:
    """Every seam's verdict: failing seams first, then warning, passing and skipped ones,
    each group in :data:`SEAMS`' order (what a failure costs, most first)."""
    s = setup(inputs)
    verdicts = [_verdict(s, seam) for seam in seams]
    rank = {status: i for i, status in enumerate(STATUSES)}
    order = sorted(range(len(verdicts)), key=lambda i: (rank[verdicts[i].status], i))
    return Diagnosis(tuple(verdicts[i] for i in order))


def _verdict(s: Setup, seam: Seam) -> Verdict:
    try:
        found = seam.run(s)
    except Skipped as skip:
        return Verdict(seam.name, "skipped", reason=skip.reason, fix=skip.fix)
    except EagleContractError as exc:  # a file the seam reads cannot be read
        said, hint = str(exc)[:400], "fix or replace the file the message names"
        found = [
            not_run(seam.name, said, hint=hint)
            if seam.unreadable == NOT_RUN
            else _finding(s, seam.unreadable, f"{seam.name}: {said}", hint)
        ]
    if s.made:  # made from the target's config: no contract file to point at
        found = [dataclasses.replace(f, contract="", line=None) for f in found]
    errors = [f for f in found if f.severity == "error"]
    warnings = [f for f in found if f.severity != "error"]
    status: Status = "fail" if errors else "warn" if warnings else "pass"
    first = (errors or warnings)[:1]
    return Verdict(seam.name, status, tuple(found), fix=first[0].hint if first else "")
