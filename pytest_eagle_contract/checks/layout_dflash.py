"""The layout check for a DFlash contract (``method: dflash``): the draft's taps as the engine
resolves them (``engines/dflash.py``) against the layers the draft was trained on.

Trained layers: the contract's training slots picked by ``fc_input`` where it has a training
section with slots, else the taps of the trainer's own draft config
(``training.draft.config``), tap t being the output of layer t (``residual:t+1``).
A tap list the engine guesses (EC522) is a warning where nothing says what was trained, an
error where the trained layers differ from the guess, and nothing where they agree.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..layers import Layer

TAP_KEY = "dflash_config.target_layer_ids"  # the one key the method engines read

if TYPE_CHECKING:
    from ..contract.model import Contract
    from ..engines.base import Resolution
    from ..engines.dflash_draft import DFlashDraft
    from ..findings import Finding
    from .layout_types import LayoutReport


def _draft(report: LayoutReport) -> DFlashDraft | None:
    from ..engines.dflash import read_dflash_draft
    from ..engines.dflash_draft import TAP_KEYS, DFlashDraft
    from ..errors import EagleContractError

    serving = report.contract.serving
    assert serving is not None
    if serving.draft_config is not None:
        try:
            return read_dflash_draft(serving.draft_config)
        except EagleContractError as exc:
            report.add("EC510", str(exc), "serving.draft_config")
            return None
    if serving.aux_layer_ids is not None:
        return DFlashDraft(None, {TAP_KEYS[0]: serving.aux_layer_ids})
    report.add(
        "EC510",
        "a DFlash serving section needs serving.draft_config (the draft's tap list, or its "
        "num_hidden_layers for the engine's fallback) or serving.aux_layer_ids (its taps)",
        "serving",
    )
    return None


def trained_layers(report: LayoutReport) -> tuple[list[Layer], str, str] | None:
    """The layers the draft was trained on, where they come from, and the contract key."""
    from ..engines.dflash import read_dflash_draft
    from ..errors import EagleContractError

    training = report.contract.training
    if training is None:
        return None
    if training.slots:
        return (
            [training.slots[i].layer for i in training.fc_input],
            "the contract's training slots",
            "training.fc_input" if "training.fc_input" in report.contract.lines else "training",
        )
    trainer = training.draft.config if training.draft is not None else None
    if trainer is None:
        return None
    try:
        taps = read_dflash_draft(trainer).taps
    except EagleContractError as exc:
        report.add("EC920", str(exc), "training.draft.config")
        return None
    if taps is None:
        return None
    return (
        [Layer(t + 1) for t in sorted(set(taps))],
        f"the trainer's config {trainer.name}",
        ("training.draft.config"),
    )


def _every_engine(
    trained: list[Layer],
    L: int,
    arch: str | None,
    draft: DFlashDraft,
    engine: str,
    versions: Sequence[str | None],
    serving: object = None,
) -> tuple[str, list[dict[str, object]]]:
    """EC501's every-engine table for a DFlash draft (the DFlash rows of ``matrix``: each
    engine whose DFlash rules are read, what it feeds, the taps that fix it), as text and
    as data (``extra["matrix"]``)."""
    from ..engines.matrix import dflash_matrix, listing, summary

    own = (engine, [v or "" for v in versions])
    rows = dflash_matrix(trained, L, arch, draft, own) + method_rows(
        "dflash", trained, L, arch, serving, own
    )
    return summary(rows), listing(rows)


def method_rows(
    method: str,
    trained: Sequence[Layer],
    L: int,
    arch: str | None,
    serving: object,
    own: tuple[str, Sequence[str]] | None,
) -> list[Any]:
    """The method engines' rows of ``method`` (engines/method_engines.py) for a contract's
    serving section (none where its draft config cannot be read: EC510 says why)."""
    from ..engines import method_engines
    from ..errors import EagleContractError

    try:
        data, ids = method_engines.draft_of(serving) if serving is not None else (None, None)
    except EagleContractError:
        data, ids = None, None
    if data is None and ids is None:
        return []
    return method_engines.rows(method, trained, L, arch, data, ids, own)


def _method_fix(
    contract: Contract, L: int, trained: list[Layer], arch: str | None, version: str | None
) -> str:
    from ..engines import method_engines

    serving = contract.serving
    assert serving is not None
    data, _ = method_engines.draft_of(serving)
    taps = method_engines.taps_for(serving.engine, contract.method, L, trained, data, arch, version)
    key = method_engines.tap_key(serving.engine, contract.method, data)
    return f": {key}: {list(taps)}" if taps is not None else ""


def _family_table(
    method: str,
    trained: list[Layer],
    L: int,
    arch: str | None,
    contract: Contract,
    engine: str,
    versions: Sequence[str | None],
) -> tuple[str, list[dict[str, object]]]:
    """EC501's every-engine table for a DFlash2 / DSpark draft, from the method's own rules
    (``engines/dflash_family.py``, ``method_rules.json``): the rows ``matrix`` gives it."""
    from ..engines.dflash_family import family_matrix
    from ..engines.matrix import listing, summary

    own = (engine, [v or "" for v in versions])
    rows = family_matrix(method, trained, L, arch, contract.serving, own) + method_rows(
        method, trained, L, arch, contract.serving, own
    )
    return summary(rows), listing(rows)


def _fix(
    engine: str,
    L: int,
    trained: list[Layer],
    arch: str | None,
    version: str | None,
    draft: DFlashDraft,
) -> str:
    from ..engines.dflash import taps_for
    from ..engines.dflash_draft import TAP_KEYS

    taps = taps_for(engine, L, trained, arch, version, draft.num_hidden_layers)
    if taps is None:
        return ""
    if draft.speculators:  # vLLM reads its aux ids as they are: dflash_config's taps + 1
        return f": aux_hidden_state_layer_ids: {[t + 1 for t in taps]}"
    return f": {TAP_KEYS[0]}: {list(taps)}"


def _family_fix(
    method: str, engine: str, L: int, trained: list[Layer], arch: str | None, version: str | None
) -> str:
    from ..engines.dflash_family import taps_for

    taps = taps_for(method, engine, L, trained, arch, version)
    return f": {list(taps)}" if taps is not None else ""


def check_dflash(
    contract: Contract,
    report: LayoutReport,
    serving_args: str | None = None,
    serving_env: Mapping[str, str] | None = None,
    env_label: str = "",
    resolve: Callable[..., Resolution] | None = None,
    title: str = "DFlash",
) -> list[Finding]:
    """``resolve``: another DFlash-family method's resolver (engines/dflash_family.py), called
    as ``resolve_dflash`` is; ``title``: that method's name in the findings. DFlash's own
    settings (EC526-EC528) are DFlash's rules: they are checked for DFlash alone, not for a
    method served on its path whose settings were not read. The every-engine table and the
    fix come from each method's own rules (``dflash_matrix`` / ``family_matrix``)."""
    from ..engines import method_engines
    from ..engines.dflash import resolve_dflash
    from ..engines.dflash_draft import TAP_KEYS
    from ..engines.fixes import relabel, runs, span_label
    from ..engines.resolve import get_engine
    from ..errors import Unservable
    from .dflash_settings import check_settings
    from .layout_serving import lint_launch

    serving = contract.serving
    assert serving is not None
    command = serving_args or serving.launch
    # SGLang's launch lint (EC512, the rules that apply under DFLASH) and every engine's
    # acceptance-faking knobs (EC517-EC520), as the EAGLE-3 layout check runs them
    lint_launch(report, serving, serving_args, serving_env, env_label)
    draft = _draft(report)
    if draft is None:
        return report.findings
    if resolve is None:
        check_settings(contract, report, draft, command)
    L = contract.target.num_hidden_layers
    arch = serving.arch or contract.target.arch
    trained = trained_layers(report)
    own_rules = method_engines.serves(serving.engine, contract.method)
    versions = (
        method_engines.versions(serving.engine, contract.method, serving.version)
        if own_rules
        else get_engine(serving.engine).versions(serving.version)
    )
    answers: dict[str | None, Resolution | str] = {}
    for version in versions:
        try:
            answers[version] = (resolve or resolve_dflash)(serving.engine, L, draft, arch, version)
        except Unservable as exc:
            answers[version] = str(exc)

    def key(version: str | None) -> object:
        got = answers[version]
        if isinstance(got, str):
            return relabel(got, version, "\x00")
        return got.layers, tuple(
            (p.code, relabel(p.message, version, "\x00")) for p in got.problems
        )

    trained_list = trained[0] if trained else []
    table = functools.cache(
        lambda: (
            _every_engine(trained_list, L, arch, draft, serving.engine, versions, serving)
            if resolve is None or (own_rules and contract.method == "dflash")
            else _family_table(
                contract.method, trained_list, L, arch, contract, serving.engine, versions
            )
        )
    )
    for run in runs(list(versions), key):  # type: ignore[arg-type]
        label = span_label([v or "" for v in run])
        engine = f"{serving.engine} {label}" if run[0] else serving.engine
        got = answers[run[0]]
        if own_rules and not isinstance(got, str):  # a source snapshot says so
            engine = method_engines.named(serving.engine, label if run[0] else None, got.version)
        if isinstance(got, str):
            said = relabel(got, run[0], label)
            report.add("EC510", f"{engine} would not serve this {title} draft: {said}", "serving")
            continue
        res = got
        served = list(res.layers)
        shown = ", ".join(map(str, served))
        for p in res.problems:
            message = relabel(p.message, run[0], label)
            if p.code != "EC522":
                report.add(p.code, f"{engine}: {message}", "serving")
                continue
            taps = [pos.capture for pos in res.positions]
            hint = (
                f"write the taps the draft was trained on into its config.json under {TAP_KEYS[0]}"
            )
            if trained is None:
                report.add(
                    "EC522",
                    f"{engine}: {message}",
                    "serving.draft_config",
                    hint=hint + " (nothing in this contract says which they were)",
                    expected="the draft's own tap list",
                    found=f"a guess: {shown}",
                    severity="warning",
                    extra={"guessed_ids": taps},
                )
            elif trained[0] != served:
                report.add(
                    "EC522",
                    f"{engine}: {message}; {trained[1]} say {', '.join(map(str, trained[0]))}",
                    "serving.draft_config",
                    hint=hint + f": {[x.index - 1 for x in trained[0]]}",
                    expected=", ".join(map(str, trained[0])),
                    found=shown,
                    details=table()[0],
                    extra={"guessed_ids": taps, "matrix": table()[1]},
                )
        if trained is not None and "EC522" not in {p.code for p in res.problems}:
            if trained[0] != served:
                report.add(
                    "EC501",
                    f"{engine} feeds the {title} draft {shown}; {trained[1]} say "
                    f"{', '.join(map(str, trained[0]))}",
                    trained[2],
                    hint=(
                        "make the draft config's aux_hidden_state_layer_ids name the trained "
                        "layers (vLLM id k = residual:k)"
                        if draft.speculators
                        else "make the draft config's tap list name the trained layers (tap t "
                        "= the output of layer t = residual:t+1)"
                    )
                    + (
                        _method_fix(contract, L, trained[0], arch, run[0])
                        if own_rules
                        else _fix(serving.engine, L, trained[0], arch, run[0], draft)
                        if resolve is None
                        else _family_fix(
                            contract.method, serving.engine, L, trained[0], arch, run[0]
                        )
                    ),
                    expected=", ".join(map(str, trained[0])),
                    found=shown,
                    details=f"serving source: {res.source}\n" + table()[0],
                    extra={"matrix": table()[1]},
                )
    return report.findings
