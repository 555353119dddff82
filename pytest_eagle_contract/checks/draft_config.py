"""The ``draft-config`` family: the draft's config.json as trained and as served.

The draft's positions (RoPE theta, type, factor, original max position, max position),
sliding window, head dim, dtype and EAGLE-3.1 flags (``fc_norm``, ``norm_output``) are
resolved twice: as the trainer ran them (``training.draft``: its keys, or the trainer's own
config file it names) and as each reader parses the exported file (transformers 4 and 5,
and the serving engine's release, ``engines/draft_settings.py``). Findings when a reader
resolves another value than the trainer used, when the two layouts read differently with
nothing to say which is right, when max position is below the serving context, and when
the engine ignores a setting the draft was trained with (docs/draft-config.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..findings import Finding, RuleCode, finding
from .family import CheckFamily

if TYPE_CHECKING:
    from ..contract.model import Contract
    from ..engines.draft_settings import DraftSettings, Reading
    from .unit import Resources, Unit

TRAINED = "training.draft"
SERVED = "serving.draft_config"
# the code each setting's disagreement is reported under
CODE_OF: dict[str, RuleCode] = {
    "rope_theta": "EC921",
    "rope_type": "EC922",
    "rope_factor": "EC922",
    "original_max_position_embeddings": "EC922",
    "max_position_embeddings": "EC923",
    "sliding_window": "EC924",
    "head_dim": "EC925",
    "dtype": "EC926",
    "fc_norm": "EC927",
    "norm_output": "EC927",
}
HINTS: dict[str, str] = {
    "EC921": "export the theta the draft was trained with where every reader finds it: "
    "rope_theta at the top level and in rope_parameters (transformers 4 reads only the "
    "first, 5 only the second, and both fall back to 10000)",
    "EC922": "carry the trained rope scaling into the exported config (rope_scaling for "
    "transformers 4, rope_parameters for 5); a converter that drops it serves another RoPE",
    "EC923": "export max_position_embeddings at least the serving context (as trained), or "
    "serve a shorter context: past it the engine clamps or extrapolates the draft's RoPE",
    "EC924": "export sliding_window and layer_types as trained, or serve on an engine that "
    "applies the draft's window (or retrain with full attention)",
    "EC925": "export head_dim as trained: the attention reshapes q/k/v by it",
    "EC926": "export the dtype the draft was trained in, or serve it in that dtype",
    "EC927": "export fc_norm / norm_output as trained, and serve on a release that reads "
    "them (SGLang from 0.5.12, vLLM from 0.22.0); else the draft runs without the norm it learned",
    "EC928": "write both layouts (top-level rope_theta/rope_scaling and rope_parameters) with "
    "the same values, or record the trained values in training.draft",
}
CONTEXT_FLAGS = ("--context-length", "--max-model-len")


def context_length(contract: Contract | None, serving_args: Sequence[str]) -> int | None:
    """The serving context: ``--context-length`` / ``--max-model-len`` in the launch args
    (the given ones, else the contract's launch line), else ``serving.context_length``."""
    import shlex

    args = list(serving_args)
    if not args and contract is not None and contract.serving and contract.serving.launch:
        try:
            args = shlex.split(contract.serving.launch)
        except ValueError:
            args = []
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in CONTEXT_FLAGS:
            text = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            text = text.lower().replace("k", "000") if text[-1:].lower() == "k" else text
            if text.isdigit() and len(text) < 12:
                return int(text)
    serving = contract.serving if contract is not None else None
    return serving.context_length if serving is not None else None


def _trained(contract: Contract | None) -> tuple[DraftSettings | None, list[Finding]]:
    """What the trainer ran with: its config file's statements, overlaid by the keys of
    ``training.draft``; None when the contract says nothing."""
    from ..engines.draft_settings import BadField, DraftSettings, stated
    from ..errors import EagleContractError

    spec = contract.training.draft if contract and contract.training else None
    if spec is None:
        return None, []
    values: dict[str, Any] = {}
    if spec.config is not None:
        from ..limits import read_json_object

        try:
            data = read_json_object(spec.config, f"cannot read the trainer's config {spec.config}")
            values = {k: v for k, v in stated(data).items() if v is not None}
        except (EagleContractError, BadField) as exc:
            return None, [
                finding(
                    "EC920",
                    str(exc),
                    contract=contract,
                    key=f"{TRAINED}.config",
                    hint="point training.draft.config at the JSON config the trainer built "
                    "its draft from, or state the settings in training.draft",
                )
            ]
    values.update(spec.stated)
    if not values:
        return None, []
    if "rope_theta" in values:
        values["rope_theta"] = float(values["rope_theta"])
    if "rope_factor" in values:
        values["rope_factor"] = float(values["rope_factor"])
    return DraftSettings(**values), []


def _show(value: Any) -> str:
    return "unset" if value is None else str(value)


def _writer_major(data: dict[str, Any]) -> int | None:
    """The transformers major that wrote the file (its ``transformers_version``), 4 or 5."""
    version = data.get("transformers_version")
    head = version.split(".")[0] if isinstance(version, str) else ""
    return int(head) if head in ("4", "5") else None


def _readings(
    data: dict[str, Any], engine: str | None, version: str | None
) -> tuple[list[Reading], str | None]:
    """The file as transformers 4 and 5 and the engine (when known) read it; and why the
    engine's reading is unknown."""
    from ..engines.draft_settings import Reading, as_engine, as_transformers

    out = [Reading(f"transformers {m}", as_transformers(data, m)) for m in (4, 5)]
    unknown = None
    if engine is not None:
        served = as_engine(data, engine, version)
        if served is None:
            unknown = f"{engine} {version or ''}".strip()
        else:
            out.append(served)
    return out, unknown


def check_draft_config(
    draft_dir: Path,
    *,
    contract: Contract | None,
    engine: str | None,
    version: str | None,
    serving_args: Sequence[str] = (),
) -> list[Finding]:
    """Findings about the draft's config.json in ``draft_dir`` as trained and as served."""
    from ..engines.draft_config import read_draft_json
    from ..engines.draft_settings import BadField
    from ..errors import EagleContractError

    if engine is None and contract is not None and contract.serving is not None:
        engine = contract.serving.engine
        version = version or contract.serving.version
    path = draft_dir / "config.json" if draft_dir.is_dir() else draft_dir
    trained, out = _trained(contract)

    def add(code: RuleCode, message: str, key: str, **kw: Any) -> None:
        out.append(finding(code, message, contract=contract, key=key, hint=HINTS[code], **kw))

    try:
        data = read_draft_json(path)
        readings, unknown = _readings(data, engine, version)
    except (EagleContractError, BadField) as exc:
        text = str(exc) if str(path) in str(exc) else f"{path}: {exc}"
        out.append(
            finding(
                "EC920",
                text,
                contract=contract,
                key=SERVED,
                hint="export the draft's config.json as the trainer's exporter writes it "
                "(a JSON object; numbers as numbers)",
            )
        )
        return out
    served = readings[-1] if len(readings) > 2 else None
    if trained is not None:
        # what serves, when the engine is known; else both transformers majors
        compared = [served] if served is not None else readings[:2]
        for name, want in trained.items():
            if want is None or name not in CODE_OF:
                continue
            for reading in compared:
                got = getattr(reading.settings, name)
                if name in reading.ignores and want:
                    add(
                        CODE_OF[name],
                        f"{reading.reader} ignores {name}: the draft was trained with "
                        f"{name} = {want}",
                        TRAINED,
                        expected=want,
                        found=f"ignored by {reading.reader}",
                    )
                elif name not in reading.ignores and got != want:
                    add(
                        CODE_OF[name],
                        f"{reading.reader} reads {name} = {_show(got)} from {path.name}; "
                        f"the draft was trained with {want}",
                        TRAINED,
                        expected=want,
                        found=got,
                        severity="warning" if name == "dtype" else "error",
                    )
    else:
        writer = _writer_major(data)
        if writer is not None and served is not None:
            pairs = [(readings[writer - 4], served)]
        elif writer is None:
            pairs = [(readings[0], served or readings[1])]
        else:
            pairs = []
        for base, other in pairs:
            for name in ("rope_theta", "rope_type", "rope_factor"):
                a, b = getattr(base.settings, name), getattr(other.settings, name)
                if a != b:
                    wrote = f"written by transformers {writer}" if writer else "of no stated writer"
                    add(
                        "EC928",
                        f"{path.name} ({wrote}): {base.reader} reads {name} = {_show(a)}, "
                        f"{other.reader} reads {_show(b)}",
                        SERVED,
                        expected=a,
                        found=b,
                        severity="warning",
                    )
        if served is not None:
            for name in served.ignores:
                value = getattr(served.settings, name)
                if value:
                    add(
                        CODE_OF[name],
                        f"the draft config sets {name} = {value}, which {served.reader} ignores",
                        SERVED,
                        expected=value,
                        found=f"ignored by {served.reader}",
                    )
    context = context_length(contract, serving_args)
    limit = (served or readings[1]).settings.max_position_embeddings
    if context is not None and limit is not None and limit < context:
        add(
            "EC923",
            f"max_position_embeddings is {limit} ({(served or readings[1]).reader}), "
            f"below the serving context {context}",
            "serving.context_length" if not serving_args else SERVED,
            expected=f">= {context}",
            found=limit,
        )
    if unknown is not None and (trained is not None or context is not None):
        from ..findings import not_run

        out.append(
            not_run(
                "draft-config",
                f"how {unknown} reads a draft config is not known to this tool; "
                "compared with transformers 4 and 5 only",
                contract=contract,
                key=SERVED,
                hint="docs/draft-config.md lists the releases read",
            )
        )
    return out


def _run(runner: Resources, unit: Unit) -> list[Finding]:
    contract = unit.contract
    serving = contract.serving
    assert serving is not None
    if serving.draft_config is None:
        from ..findings import not_run

        return [
            not_run(
                "draft-config",
                "the contract names no serving.draft_config",
                contract=contract,
                key="serving",
                hint="set serving.draft_config to the draft's folder or config.json",
            )
        ]
    import shlex

    args = shlex.split(runner.settings.serving_args or "")
    return check_draft_config(
        serving.draft_config,
        contract=contract,
        engine=serving.engine,
        version=serving.version,
        serving_args=args,
    )


FAMILY = CheckFamily(
    "draft-config",
    "contract",
    "the draft's config.json as trained and as each reader parses it: RoPE, max position, "
    "sliding window, head dim, dtype, fc_norm / norm_output",
    codes=("EC920", "EC921", "EC922", "EC923", "EC924", "EC925", "EC926", "EC927", "EC928"),
    keys=("serving.draft_config", "training.draft", "serving.context_length"),
    run=_run,
    needs=frozenset({"serving"}),
    default=False,
)
