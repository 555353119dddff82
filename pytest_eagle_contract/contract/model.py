"""Load and validate contract files (YAML, version 1) into typed, frozen objects.

Every problem is reported with file, line, column and key path; unknown keys are errors.
Contracts are untrusted input: no YAML tag builds an object, and size, nesting, alias
expansion and the target's sizes are bounded (docs/security.md).
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from ..errors import ContractError, ContractProblem
from ..findings import RULES
from ..layers import Layer
from . import validated
from .safe_yaml import compose, join, read_text, short

SCHEMA_FILE = "contract-v1.schema.json"
DEFAULT_SEQUENCE_MAX = 1 << 20
MAX_PROBLEMS = 50  # problems listed in one error


@dataclass(frozen=True)
class NormBounds:
    """Accepted range of a slot's median per-token L2 norm."""

    low: float
    high: float

    @classmethod
    def from_yaml(cls, data: dict[str, Any]) -> NormBounds:
        if "median" in data and "rtol" in data:
            median, rtol = float(data["median"]), float(data["rtol"])
            low, high = median / (1.0 + rtol), median * (1.0 + rtol)
        else:
            low, high = 0.0, float("inf")
        if "min" in data:
            low = float(data["min"])
        if "max" in data:
            high = float(data["max"])
        return cls(low, high)

    def __contains__(self, value: float) -> bool:
        return self.low <= value <= self.high

    def __str__(self) -> str:
        return f"[{self.low:.6g}, {self.high:.6g}]"


@dataclass(frozen=True)
class SlotSpec:
    index: int
    layer: Layer
    dtype: str
    norm: NormBounds | None
    line: int


@dataclass(frozen=True)
class TargetSpec:
    arch: str | None
    num_hidden_layers: int
    hidden_size: int
    vocab_size: int | None
    dtype: str
    model: Path | None = None
    reference_capture: bool = False


@dataclass(frozen=True)
class DraftTrainingSpec:
    """``training.draft``: the draft as the trainer ran it (docs/draft-config.md). ``stated``
    holds the settings given here by name (rope_theta, ..., norm_output)."""

    config: Path | None = None  # the trainer's own draft config file
    stated: dict[str, Any] = field(default_factory=dict)
    vocab_tokenizer_sha256: str | None = None
    d2t_sha256: str | None = None
    min_vocab_coverage: float | None = None


@dataclass(frozen=True)
class TrainingSpec:
    format: str
    shards: Path | None
    slots: tuple[SlotSpec, ...]
    fc_input: tuple[int, ...]
    target_slot: int | None
    min_length: int
    max_length: int
    input_ids_dtype: str
    loss_mask_dtype: str
    allow_all_zero_loss_mask: bool
    extra_keys: frozenset[str]
    teacher_agreement_min: float | None = None
    draft: DraftTrainingSpec | None = None


@dataclass(frozen=True)
class ServingSpec:
    engine: str
    version: str | None
    arch: str | None
    draft_config: Path | None
    aux_layer_ids: tuple[int, ...] | None
    dtype: str | None
    launch: str | None
    min_accept_length: float | None = None  # the probe's floor (EC906)
    max_accept_drop: float | None = None  # the largest drop from the trainer's layout (EC907)
    target_model: Path | None = None  # the checkpoint served, beside target.model (EC62x)
    context_length: int | None = None  # the longest sequence served (EC923)


@dataclass(frozen=True)
class TokenizerSpec:
    """The ``tokenizer`` section: what the data's tokenizer and template were (docs/tokens.md)."""

    path: Path | None = None  # the serving tokenizer's folder
    files_sha256: str | None = None
    chat_template_sha256: str | None = None
    vocab_size: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    bos: str | None = None  # "once" or "none"
    thinking: str | None = None  # "on", "off" or "mixed"
    think_token_ids: tuple[int, int] | None = None
    assistant_header: tuple[int, ...] = ()
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    conversations: Path | None = None


@dataclass(frozen=True)
class Contract:
    name: str
    path: Path
    target: TargetSpec
    training: TrainingSpec | None
    serving: ServingSpec | None
    waivers: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    tokenizer: TokenizerSpec | None = None
    method: str = "eagle3"  # the drafting method (pytest_eagle_contract/methods.py)

    def line_of(self, key_path: str) -> int:
        """Line of ``key_path`` (``training.slots[0].norm``), else of its nearest parent."""
        while key_path:
            if key_path in self.lines:
                return self.lines[key_path]
            key_path = _parent(key_path)
        return 1


def _parent(key_path: str) -> str:
    if key_path.endswith("]"):
        return key_path[: key_path.rindex("[")]
    return key_path.rpartition(".")[0]


@cache
def schema() -> dict[str, Any]:
    """The JSON Schema every contract is validated against."""
    data: dict[str, Any] = json.loads(_schema_text())
    return data


@cache
def _schema_text() -> str:
    return schema_path().read_text("utf-8")


def schema_path() -> Path:
    """The shipped schema: a file in the package (the wheel installs it as one), read by
    path, not through importlib.resources (whose import costs every command 10-30 ms)."""
    return Path(__file__).with_name("schema") / SCHEMA_FILE


SCHEMA_MARK = b'"title": "pytest-eagle-contract contract'  # in the first 4 KiB of every copy


def schema_id() -> str:
    """The schema's ``$id``: the same in every copy, whatever folder it sits in."""
    import json

    return str(json.loads(schema_path().read_text("utf-8"))["$id"])


@cache
def _validator() -> Any:
    """Draft 2020-12, except that ``integer`` means a YAML int (16.0 and true are not)."""
    from jsonschema import Draft202012Validator, validators

    checker = Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, x: isinstance(x, int) and not isinstance(x, bool)
    )
    extend: Any = validators.extend  # untyped in the stubs
    return extend(Draft202012Validator, type_checker=checker)(schema())


def _schema_problems(
    data: Any,
    lines: dict[str, tuple[int, int]],
    file: str,
) -> list[ContractProblem]:
    problems = []
    errors = _validator().iter_errors(data)
    for error in sorted(errors, key=lambda e: list(map(str, e.path))):
        path = ""
        for part in error.absolute_path:
            path = join(path, part)
        message = error.message
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            allowed = list(error.schema.get("properties", {}))
            for extra in sorted(set(error.instance) - set(allowed)):
                child = join(path, extra)
                guess = difflib.get_close_matches(extra, allowed, n=1)
                hint = (
                    f" (did you mean {guess[0]!r}?)"
                    if guess
                    else f"; allowed: {', '.join(allowed)}"
                )
                line, col = lines.get(child, lines.get(path, (1, 1)))
                problems.append(
                    ContractProblem(file, line, col, child, f"unknown key {extra!r}{hint}")
                )
            continue
        if error.validator == "enum" and path == "method" and isinstance(error.instance, str):
            guess = difflib.get_close_matches(error.instance, error.validator_value, n=1)
            message = f"unknown method {error.instance!r}" + (
                f" (did you mean {guess[0]!r}?)"
                if guess
                else f"; one of {', '.join(error.validator_value)}"
            )
        elif error.validator == "anyOf" and path.endswith(".norm"):
            message = "norm needs 'median' with 'rtol', or 'min' and/or 'max'"
        elif (
            error.validator == "type"
            and isinstance(error.instance, float)
            and "integer" in str(error.validator_value)
        ):
            message += " (write a whole number without a decimal point)"
        elif error.validator == "maximum" and error.validator_value > 1:
            message += " (a plausibility bound: no real model comes near it; docs/security.md)"
        line, col = lines.get(path, (1, 1))
        problems.append(ContractProblem(file, line, col, path, message))
    return problems


def _error(problems: list[ContractProblem]) -> ContractError:
    """One error for ``problems``: messages shortened, at most ``MAX_PROBLEMS`` listed."""
    shown = [
        ContractProblem(p.file, p.line, p.column, short(p.path), short(p.message))
        for p in problems[:MAX_PROBLEMS]
    ]
    if len(problems) > MAX_PROBLEMS:
        last = shown[-1]
        shown.append(
            ContractProblem(
                last.file,
                last.line,
                last.column,
                "",
                f"and {len(problems) - MAX_PROBLEMS} more problems",
            )
        )
    return ContractError(shown)


_DTYPE_DEFAULT = "bfloat16"


def load_contract(path: str | Path) -> Contract:
    """Read, validate and type a contract file. Raises :class:`ContractError`."""
    path = Path(path)
    return parse_contract(read_text(path), path)


def parse_contract(text: str, path: str | Path) -> Contract:
    """Validate and type contract ``text`` as if it were the file ``path`` (relative paths
    in it resolve against ``path``'s folder; errors name ``path``)."""
    path = Path(path)
    file = str(path)
    data, lines = compose(text, file)
    kept = validated.key(data, _schema_text())
    if kept is None or not validated.passed(kept):
        problems = _schema_problems(data, lines, file)
        if problems:
            raise _error(problems)
        if kept is not None:
            validated.remember(kept, path)
    return _build(data, path, {k: v[0] for k, v in lines.items()})


def target_limits() -> dict[str, int]:
    """Plausibility bounds on a target's sizes (the schema's maxima), shared with the
    model-folder reader."""
    props = schema()["properties"]["target"]["properties"]
    return {
        key: int(props[key]["maximum"])
        for key in ("num_hidden_layers", "hidden_size", "vocab_size")
    }


@dataclass
class _Reading:
    """A contract being built: where its relative paths resolve, its keys' lines, problems."""

    file: str
    base: Path
    lines: dict[str, int]
    problems: list[ContractProblem] = field(default_factory=list)

    def problem(self, key_path: str, message: str) -> None:
        line = self.lines.get(key_path, 1)
        self.problems.append(ContractProblem(self.file, line, 1, key_path, message))

    def path(self, key_path: str, value: str) -> Path:
        """``value`` relative to the contract's folder; a name no file system holds (a part
        past 255 bytes, the whole past 4,095, a NUL) is a problem, not an OSError later."""
        out = self.base / value
        raw = os.fsencode(str(out))
        if b"\0" in raw or len(raw) > 4095 or any(len(part) > 255 for part in raw.split(b"/")):
            self.problem(key_path, "not a path a file system can hold (a name past 255 bytes?)")
        return out


def _build(data: dict[str, Any], path: Path, lines: dict[str, int]) -> Contract:
    r = _Reading(str(path), path.parent, lines)
    problem = r.problem
    t = data["target"]
    target = TargetSpec(
        arch=t.get("arch"),
        num_hidden_layers=t["num_hidden_layers"],
        hidden_size=t["hidden_size"],
        vocab_size=t.get("vocab_size"),
        dtype=t.get("dtype", _DTYPE_DEFAULT),
        model=r.path("target.model", t["model"]) if "model" in t else None,
        reference_capture=t.get("reference_capture", False),
    )
    if target.reference_capture and target.model is None:
        problem("target.reference_capture", "reference_capture needs target.model")
    training = _training(data["training"], target, r) if "training" in data else None
    serving = _serving(data["serving"], training, r) if "serving" in data else None
    method = data.get("method", "eagle3")
    if serving is not None:
        _method_served(method, serving.engine, r)
    if training is not None and training.format != "auto":
        from ..methods import method_of_format

        made_for = method_of_format(training.format)
        if made_for is not None and made_for != method:
            r.problem(
                "training.format",
                f"{training.format} files are {made_for}'s: the contract needs method: "
                f"{made_for} (it says {method})",
            )
    waivers: dict[str, str] = {}
    for i, w in enumerate(data.get("waive", [])):
        if w["code"] not in RULES:
            problem(f"waive[{i}].code", f"unknown rule code {w['code']} (see docs/rules.md)")
        waivers[w["code"]] = w["reason"]
    tokenizer = _tokenizer(data["tokenizer"], r) if "tokenizer" in data else None
    if r.problems:
        raise _error(r.problems)
    return Contract(
        data["contract"],
        path,
        target,
        training,
        serving,
        waivers,
        lines,
        tokenizer=tokenizer,
        method=method,
    )


def _method_served(method: str, engine: str, r: _Reading) -> None:
    """A problem where no rules of ``engine`` for ``method`` are read here: its checks would
    otherwise resolve the draft's taps by another method's rules."""
    from ..methods import EAGLE3_ENGINES, METHOD_ENGINES, SOURCE_READ, contract_engines, get_method

    m = get_method(method)
    served = METHOD_ENGINES.get(engine, ())
    if method in served:  # engines/method_engines.py's rules
        return
    if engine in METHOD_ENGINES and not m.serves(engine):
        also = " and eagle3" if engine in EAGLE3_ENGINES else ""
        also += " and mtp (engines/mtp.py)" if get_method("mtp").serves(engine) else ""
        where = "source" if engine in SOURCE_READ else "wheels"
        why = None
        if engine in SOURCE_READ:  # the reason read from its source, where one is given
            from ..engines.source_methods import refusal

            why = refusal(engine, method)
        r.problem(
            "serving.engine" if "method" not in r.lines else "method",
            f"{engine} serves method {' / '.join(served)}{also} here (its rules for those are "
            f"read from its {where}, docs/layers.md); not {method}"
            + (
                " (the default: the contract has no method: line)"
                if "method" not in r.lines
                else ""
            )
            + (f" ({why})" if why else ""),
        )
        return
    if m.serves(engine):
        return
    takes = ", ".join(contract_engines(method))
    if m.engines and method == "mtp":
        r.problem(
            "serving.engine",
            f"{engine}: MTP not read: which target state it feeds an MTP head was not read "
            f"here; read for {takes} (docs/mtp.md)",
        )
    elif m.engines:
        r.problem(
            "serving.engine",
            f"{engine}: no {m.title} tap rules are read here; method {method} is resolved "
            f"for {takes} (docs/methods.md)",
        )
    else:
        r.problem("method", f"{m.title}: {m.rules_note}; give no serving section (docs/methods.md)")


def _training(tr: dict[str, Any], target: TargetSpec, r: _Reading) -> TrainingSpec:
    """The ``training`` section, typed; its problems go to ``r``."""
    problem, lines = r.problem, r.lines
    slots = []
    for i, s in enumerate(tr["slots"]):
        key = f"training.slots[{i}]"
        try:
            layer = Layer.parse(s["layer"])
            layer.check_bounds(target.num_hidden_layers)
        except ValueError as exc:  # past the layers, or past the digits Python reads
            layer = Layer(-1)
            problem(
                f"{key}.layer",
                str(exc)
                if len(s["layer"]) < 40
                else f"{s['layer'][:40]}... is beyond the target's "
                f"{target.num_hidden_layers} layers",
            )
        norm = NormBounds.from_yaml(s["norm"]) if "norm" in s else None
        if norm is not None and norm.low > norm.high:
            problem(f"{key}.norm", f"empty norm bounds {norm}")
        slots.append(SlotSpec(i, layer, s.get("dtype", target.dtype), norm, lines.get(key, 1)))
    n = len(slots)
    target_slot = tr.get("target_slot", n - 1 if n > 1 else None)
    if target_slot is not None and target_slot >= n:
        problem("training.target_slot", f"slot {target_slot} does not exist ({n} slots)")
    default_fc = [i for i in range(n) if i != target_slot]
    fc_input = tuple(tr.get("fc_input", default_fc))
    for j, i in enumerate(fc_input):
        if i >= n:
            problem(f"training.fc_input[{j}]", f"slot {i} does not exist ({n} slots)")
        elif i == target_slot:
            problem(f"training.fc_input[{j}]", f"slot {i} is the target slot")
    seq = tr.get("sequence", {})
    min_len, max_len = seq.get("min_length", 1), seq.get("max_length", DEFAULT_SEQUENCE_MAX)
    if min_len > max_len:
        problem("training.sequence", f"min_length {min_len} > max_length {max_len}")
    shards = tr.get("shards")
    spec = TrainingSpec(
        format=tr.get("format", "auto"),
        shards=r.path("training.shards", shards) if shards else None,
        slots=tuple(slots),
        fc_input=fc_input,
        target_slot=target_slot,
        min_length=min_len,
        max_length=max_len,
        input_ids_dtype=tr.get("input_ids", {}).get("dtype", "int64"),
        loss_mask_dtype=tr.get("loss_mask", {}).get("dtype", "int64"),
        allow_all_zero_loss_mask=tr.get("loss_mask", {}).get("allow_all_zero", False),
        extra_keys=frozenset(tr.get("extra_keys", ())),
        teacher_agreement_min=tr.get("teacher_agreement", {}).get("min"),
        draft=_draft(tr["draft"], r) if "draft" in tr else None,
    )
    if spec.teacher_agreement_min is not None and target.model is None:
        problem("training.teacher_agreement", "teacher_agreement needs target.model")
    return spec


_DRAFT_META = ("config", "vocab_tokenizer_sha256", "d2t_sha256", "min_vocab_coverage")


def _draft(dr: dict[str, Any], r: _Reading) -> DraftTrainingSpec:
    """``training.draft``, typed; its config path resolves against the contract's folder."""
    return DraftTrainingSpec(
        config=r.path("training.draft.config", dr["config"]) if "config" in dr else None,
        stated={k: v for k, v in dr.items() if k not in _DRAFT_META},
        vocab_tokenizer_sha256=dr.get("vocab_tokenizer_sha256"),
        d2t_sha256=dr.get("d2t_sha256"),
        min_vocab_coverage=dr.get("min_vocab_coverage"),
    )


def _serving(sv: dict[str, Any], training: TrainingSpec | None, r: _Reading) -> ServingSpec:
    """The ``serving`` section, typed; its problems go to ``r``."""
    problem = r.problem
    spec = ServingSpec(
        engine=sv["engine"],
        version=sv.get("version"),
        arch=sv.get("arch"),
        draft_config=(
            r.path("serving.draft_config", sv["draft_config"]) if "draft_config" in sv else None
        ),
        aux_layer_ids=tuple(sv["aux_layer_ids"]) if "aux_layer_ids" in sv else None,
        dtype=sv.get("dtype"),
        launch=sv.get("launch"),
        min_accept_length=sv.get("min_accept_length"),
        max_accept_drop=sv.get("max_accept_drop"),
        target_model=(
            r.path("serving.target_model", sv["target_model"]) if "target_model" in sv else None
        ),
        context_length=sv.get("context_length"),
    )
    floors = [k for k in ("min_accept_length", "max_accept_drop") if k in sv]
    if floors and spec.draft_config is None:
        problem(f"serving.{floors[0]}", "the acceptance probe needs serving.draft_config")
    if "max_accept_drop" in sv and training is None:
        problem("serving.max_accept_drop", "a drop from the trainer's layout needs training")
    return spec


_THINKING: dict[Any, str] = {True: "on", False: "off"}  # YAML 1.1 reads a bare on/off so


def _tokenizer(tk: dict[str, Any], r: _Reading) -> TokenizerSpec:
    """The ``tokenizer`` section, typed; its paths resolve against the contract's folder."""
    think = tk.get("think_token_ids")
    return TokenizerSpec(
        path=r.path("tokenizer.path", tk["path"]) if "path" in tk else None,
        files_sha256=tk.get("files_sha256"),
        chat_template_sha256=tk.get("chat_template_sha256"),
        vocab_size=tk.get("vocab_size"),
        bos_token_id=tk.get("bos_token_id"),
        eos_token_id=tk.get("eos_token_id"),
        pad_token_id=tk.get("pad_token_id"),
        bos=tk.get("bos"),
        thinking=_THINKING.get(tk.get("thinking"), tk.get("thinking")),
        think_token_ids=(int(think[0]), int(think[1])) if think else None,
        assistant_header=tuple(tk.get("assistant_header", ())),
        template_kwargs=dict(tk.get("template_kwargs", {})),
        conversations=(
            r.path("tokenizer.conversations", tk["conversations"])
            if "conversations" in tk
            else None
        ),
    )
