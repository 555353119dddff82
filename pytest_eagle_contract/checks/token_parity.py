"""The ``token-parity`` family: the shards' ``input_ids`` against what the serving renderer
makes of the conversations they came from (EC340-EC348, docs/tokens.md).

Each shard is matched to its conversation by the row its file names (SpecForge's
``data_<i>``), else by its place in the shards' natural order. The conversation is
rendered with the serving tokenizer folder's own chat template (sandboxed, as transformers
renders it; models/chat_template.py) and tokenized without special tokens added, or sent
to a running engine's ``/tokenize`` (``--render-url``). A shard matches when its ids are
the served ids or a prefix of them (a sequence cut at max_length); for the first that
does not, the finding shows the first divergence token by token and names the cause: a
doubled BOS (EC341), a think block (EC342), the same text in other ids (EC343), else the
template (EC340). The exact-match rate closes the run (EC348, when below 1).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..findings import Finding, finding, not_run
from .family import CheckFamily
from .tokens import leading, tokenizer_dir
from .unit import COMPARED

if TYPE_CHECKING:
    from ..contract.model import Contract, TokenizerSpec
    from ..models.tokenizer import TokenizerFolder
    from .unit import Resources, Unit

PARITY_MAX_SHARDS = 64  # shards compared per run, the first in natural order
BEFORE, AFTER = 4, 12  # tokens shown around the first divergence
Renderer = Any  # (messages) -> ids


def check_parity(
    contract: Contract | None,
    pairs: Sequence[tuple[str, Sequence[int] | None, Any]],
    tok: TokenizerFolder,
    *,
    render_url: str | None = None,
    timeout: float = 60.0,
) -> list[Finding]:
    """``pairs``: (shard label, its ids, its conversation's messages or why there is none).
    Each shard's ids against the serving renderer's; the exact-match rate last."""
    from ..errors import CodedError

    spec = contract.tokenizer if contract is not None else None
    kwargs = dict(spec.template_kwargs) if spec is not None else {}
    out: list[Finding] = []
    matched = compared = 0
    for i, (label, ids, messages) in enumerate(pairs):
        if ids is None:
            continue
        if isinstance(messages, str):
            code = "EC344" if not messages.startswith("no conversation") else "EC345"
            out.append(
                finding(
                    code,  # type: ignore[arg-type]
                    f"{label}: {messages}",
                    contract=contract,
                    key="tokenizer.conversations",
                    file=label,
                    hint="give the JSONL the shards were made from, in the order made",
                )
            )
            continue
        try:
            served = _served(tok, messages, kwargs, render_url, timeout)
        except CodedError as exc:
            out.append(
                finding(
                    exc.code,
                    exc.message,
                    contract=contract,
                    key="tokenizer",
                    file=label,
                    hint=exc.hint,
                )
            )
            if exc.code in ("EC346", "EC347"):
                break  # the template or the endpoint fails every conversation alike
            continue
        compared += 1
        shard = list(ids)
        if _same(shard, served):
            matched += 1
            continue
        out.append(divergence(contract, label, i, shard, served, tok, spec))
    if compared and matched < compared:
        out.append(
            finding(
                "EC348",
                f"{matched} of {compared} shards match the serving renderer exactly "
                f"({100 * matched / compared:.0f} %)",
                contract=contract,
                key="tokenizer",
                expected=f"{compared} of {compared}",
                found=f"{matched} of {compared}",
                hint="each mismatch is its own finding, with the cause",
                severity="warning",
                extra={"matched": matched, "compared": compared},
            )
        )
    return out


def _served(
    tok: TokenizerFolder,
    messages: list[dict[str, Any]],
    kwargs: Mapping[str, Any],
    render_url: str | None,
    timeout: float,
) -> list[int]:
    from ..errors import CodedError

    if render_url is not None:
        from ..capture.render_client import served_ids

        return served_ids(render_url, messages, template_kwargs=kwargs, timeout=timeout)
    from ..models.chat_template import render

    if tok.chat_template is None:
        raise CodedError(
            "EC346",
            f"the serving tokenizer {tok.path} has no chat template",
            "give the folder the engine loads (with its chat_template), or --render-url",
        )
    return tok.encode(render(tok.chat_template, messages, special=tok.special, kwargs=kwargs))


def _same(shard: list[int], served: list[int]) -> bool:
    """Equal, or the shard a prefix of the served ids (cut at max_length)."""
    return bool(shard) and served[: len(shard)] == shard


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def divergence(
    contract: Contract | None,
    label: str,
    index: int,
    shard: list[int],
    served: list[int],
    tok: TokenizerFolder,
    spec: TokenizerSpec | None,
) -> Finding:
    """The finding for a shard whose ids part from the served ones: where, token by token,
    and why."""
    p = first_divergence(shard, served)
    lo = max(0, p - BEFORE)
    window = {
        "index": index,
        "position": p,
        "shard_tokens": shard[lo : p + AFTER],
        "served_tokens": served[lo : p + AFTER],
        "shard_text": tok.decode(shard[lo : p + AFTER]),
        "served_text": tok.decode(served[lo : p + AFTER]),
    }
    code, cause, hint = _cause(shard, served, tok, spec)
    rows = [f"token {'shard':>26} {'served':>26}"]
    for j in range(lo, min(max(len(shard), len(served)), p + AFTER)):
        mark = "  <- first divergence" if j == p else ""
        rows.append(f"{j:5d} {_piece(tok, shard, j):>26} {_piece(tok, served, j):>26}{mark}")
    return finding(
        code,  # type: ignore[arg-type]
        f"{label}: {cause} (first divergence at token {p} of {len(shard)})",
        contract=contract,
        key="tokenizer",
        file=label,
        expected=repr(window["served_text"]),
        found=repr(window["shard_text"]),
        hint=hint,
        details="\n".join(rows),
        extra=window,
    )


def _piece(tok: TokenizerFolder, ids: list[int], j: int) -> str:
    if j >= len(ids):
        return "-"
    text = repr(tok.decode([ids[j]]))
    return f"{ids[j]} {text if len(text) <= 18 else text[:17] + '…'}"


def _cause(
    shard: list[int], served: list[int], tok: TokenizerFolder, spec: TokenizerSpec | None
) -> tuple[str, str, str]:
    bos = tok.special_ids.get("bos")
    if bos is not None and leading(shard, bos) == leading(served, bos) + 1:
        if _same(shard[1:], served):
            return (
                "EC341",
                "the shard starts with one BOS more than the served sequence",
                "the pipeline tokenized the rendered template with special tokens added: "
                "tokenize with add_special_tokens=False",
            )
    shard_text, served_text = tok.decode(shard), tok.decode(served)
    other_files = spec is not None and spec.files_sha256 not in (None, tok.files_sha256)
    if served_text.startswith(shard_text) or other_files:
        return (
            "EC343",
            "the same text, tokenized into other ids"
            if not other_files
            else "the serving tokenizer's files differ from the data's (tokenizer.files_sha256)",
            "the tokenizer revision differs from the data's: serve the revision the shards "
            "were made with, or re-make them",
        )
    open_text, close_text = _think_texts(tok, spec)
    if open_text in shard_text + served_text:
        pattern = re.compile(re.escape(open_text) + r".*?" + re.escape(close_text) + r"\s*", re.S)
        if served_text.startswith(pattern.sub("", shard_text)) or pattern.sub(
            "", served_text
        ).startswith(pattern.sub("", shard_text)):
            return (
                "EC342",
                "the shard and the served sequence differ in a think block",
                "the thinking mode differs: pass the engine's enable_thinking to the data "
                "pipeline's template (tokenizer.template_kwargs), or serve the data's mode",
            )
    return (
        "EC340",
        "the serving template renders this conversation to other tokens",
        "train and serve with one chat template: serve the data's (--chat-template), or "
        "re-make the shards with the serving one",
    )


def _think_texts(tok: TokenizerFolder, spec: TokenizerSpec | None) -> tuple[str, str]:
    if spec is not None and spec.think_token_ids is not None:
        a, b = (tok.backend.id_to_token(i) for i in spec.think_token_ids)
        if a and b:
            return str(a), str(b)
    return "<think>", "</think>"


def run_parity(runner: Resources, unit: Unit) -> list[Finding]:
    return _parity(runner, unit)[0]


def compared(runner: Resources, unit: Unit) -> dict[str, Any]:
    """The shard files whose ids were compared (the run's summary counts them)."""
    return {COMPARED: _parity(runner, unit)[1]}


Parity = tuple[list[Finding], list[str]]  # the findings, and the shard files compared


def _parity(runner: Resources, unit: Unit) -> Parity:
    """Once per run: the check and the summary's count share it."""
    key = ("token-parity", unit.contract.path, unit.roots)
    return runner.once(key, lambda: _compare(runner, unit))


def _compare(runner: Resources, unit: Unit) -> Parity:
    """The shards the command names (``unit.roots``: else the contract's), the first
    :data:`PARITY_MAX_SHARDS` in natural order, against the serving renderer. A shard that
    cannot be read is its read error; a run that compared no shard says so (EC009)."""
    from ..errors import CodedError, UsageError
    from ..models.conversations import read_rows, row_index
    from ..models.tokenizer import read_tokenizer
    from ..shards.discovery import labelled as labelled_shards

    contract = unit.contract
    spec = contract.tokenizer
    folder = tokenizer_dir(runner, contract)
    conversations = runner.settings.conversations or (spec.conversations if spec else None)
    assert folder is not None and conversations is not None  # the planner's needs
    try:
        tok = read_tokenizer(folder)
    except CodedError as exc:
        return [not_run("token-parity", exc.message, contract=contract, key="tokenizer")], []
    assert contract.training is not None
    if not unit.roots:
        why = "no shards: set training.shards or pass shard paths"
        return [not_run("token-parity", why, contract=contract, key="training.shards")], []
    try:
        labelled = labelled_shards(unit.roots, contract.training.format)
    except UsageError as exc:
        return [not_run("token-parity", exc, contract=contract, key="training.shards")], []
    labelled = labelled[:PARITY_MAX_SHARDS]
    shards = [(path, label, runner.shard(contract, path, label)) for path, label in labelled]
    unread = [_unread(contract, label, s.error) for _, label, s in shards if s.error is not None]
    shards = [(path, label, s) for path, label, s in shards if s.error is None]
    formats = [s.sample.format.name for _, _, s in shards if s.sample is not None]
    rows = [
        (path, label, shard, n if (n := row_index(path.name.split(".")[0])) is not None else i)
        for i, (path, label, shard) in enumerate(shards)
    ]
    thinking = spec is not None and (
        spec.thinking in ("on", "mixed") or bool(spec.template_kwargs.get("enable_thinking"))
    )
    try:
        found = read_rows(
            conversations,
            [r for *_, r in rows],
            format=formats[0] if formats else contract.training.format,
            thinking=thinking,
        )
    except CodedError as exc:
        return [
            *unread,
            finding(
                exc.code,
                exc.message,
                contract=contract,
                key="tokenizer.conversations",
                file=str(conversations),
                hint=exc.hint,
            ),
        ], []
    pairs: list[tuple[str, Sequence[int] | None, Any]] = []
    with_ids: list[str] = []
    for path, label, shard, r in rows:
        ids = None if shard.sample is None or shard.sample.ids is None else shard.sample.ids
        messages = found.get(r, f"no conversation: row {r} is past the file's rows")
        if isinstance(messages, str) and r in found:
            messages = f"row {r}: {messages}"
        pairs.append((label, None if ids is None else _ints(ids), messages))
        if ids is not None and not isinstance(messages, str):
            with_ids.append(str(path))
    out = check_parity(
        contract,
        pairs,
        tok,
        render_url=runner.settings.render_url,
        timeout=runner.settings.timeout,
    )
    if not with_ids and not any(f.severity == "error" for f in [*unread, *out]):
        out.append(
            not_run(
                "token-parity",
                f"none of the {len(labelled)} shard(s) under "
                f"{', '.join(map(str, unit.roots))} has input ids to compare",
                contract=contract,
                key="training.shards",
            )
        )
    return [*unread, *out], with_ids


def _unread(contract: Contract, label: str, error: Any) -> Finding:
    """A shard token-parity could not read: its read error (EC001-EC003), as a shard
    unit's."""
    return finding(
        error.code,
        error.message,
        contract=contract,
        key="training.shards",
        file=label,
        hint=error.hint,
    )


def _ints(values: Any) -> list[int]:
    from .tokens import as_list

    return as_list(values)


FAMILY = CheckFamily(
    "token-parity",
    "contract",
    "the shards' ids against the serving renderer's for their conversations",
    codes=("EC340", "EC341", "EC342", "EC343", "EC344", "EC345", "EC346", "EC347", "EC348"),
    keys=("tokenizer",),
    run=run_parity,
    measure=compared,
    needs=frozenset({"training", "tokenizer-dir", "conversations"}),
)
