"""The ``tokens`` family (the shards' tokens, no model) and ``check_tokenizer`` (a tokenizer
folder against the contract's ``tokenizer`` section): EC330-EC338, docs/tokens.md.

On each shard: BOS exactly as ``tokenizer.bos`` says (EC334: a doubled BOS from tokenizing
a rendered template with special tokens added); each loss span right after the template's
assistant header (EC335) and no header under the loss mask (EC336); the think blocks
(empty, filled, absent) against ``tokenizer.thinking`` (EC337); ids the serving tokenizer
does not have (EC338).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..findings import RULES, Finding, RuleCode, finding
from .family import CheckFamily

if TYPE_CHECKING:
    from ..contract.model import Contract, TokenizerSpec
    from ..models.tokenizer import TokenizerFolder
    from ..shards.shard import Shard
    from .unit import Resources, Unit

EMPTY_THINK_MAX = 2  # tokens between <think> and </think> that count as an empty block
# (whitespace: Qwen3 writes "<think>\n\n</think>"); with a tokenizer folder, decoded instead
THINK = ("<think>", "</think>")  # the think tokens of every open reasoning family
PROBE = ({"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"})


def check_tokenizer(tokenizer_dir: Path, *, contract: Contract | None) -> list[Finding]:
    """The tokenizer folder against the contract's ``tokenizer`` section: fingerprint
    (EC331), chat template (EC332), vocabulary size and special ids (EC333), the BOS its
    template makes (EC334), the think tokens of the thinking mode (EC337). An unreadable
    folder is EC330, a template that will not render EC346; never an exception."""
    from ..errors import CodedError
    from ..models.tokenizer import read_tokenizer

    where = {"contract": contract, "key": "tokenizer", "file": str(tokenizer_dir)}
    try:
        tok = read_tokenizer(tokenizer_dir)
    except CodedError as exc:
        return [finding(exc.code, exc.message, hint=exc.hint, **where)]  # type: ignore[arg-type]
    spec = contract.tokenizer if contract is not None else None
    out: list[Finding] = []
    if spec is not None:
        out += _fingerprints(tok, spec, contract, where)
    try:
        first = _probe_ids(tok, spec)
    except CodedError as exc:
        return [*out, finding(exc.code, exc.message, hint=exc.hint, **where)]  # type: ignore[arg-type]
    if spec is not None and first is not None:
        out += _template_bos(tok, spec, first, contract)
    if spec is not None and spec.thinking in ("on", "mixed") and spec.think_token_ids:
        served = [tok.token_id(t) for t in THINK]
        if served != list(spec.think_token_ids):
            out.append(
                finding(
                    "EC337",
                    f"thinking mode {spec.thinking!r} but the serving tokenizer's think tokens "
                    f"are {served}",
                    contract=contract,
                    key="tokenizer.think_token_ids",
                    file=str(tokenizer_dir),
                    expected=f"think tokens {list(spec.think_token_ids)}",
                    found=f"{THINK[0]} {THINK[1]}: {served}",
                    hint="serve with the tokenizer the data was made with, or set thinking: off",
                )
            )
    return out


def _fingerprints(
    tok: TokenizerFolder, spec: TokenizerSpec, contract: Contract | None, where: dict[str, Any]
) -> list[Finding]:
    out: list[Finding] = []
    at = partial(finding, contract=contract, file=str(tok.path))
    fingerprints: list[tuple[RuleCode, str, str | None, str, str]] = [
        (
            "EC331",
            "files_sha256",
            spec.files_sha256,
            tok.files_sha256,
            "serve the tokenizer revision the shards were made with, or re-make the shards "
            "with this one (eagle-contract infer --tokenizer DIR)",
        ),
        (
            "EC332",
            "chat_template_sha256",
            spec.chat_template_sha256,
            tok.chat_template_sha256 or "no chat template",
            "serve with the data's template (--chat-template), or re-make the shards with "
            "the serving one; check --conversations shows where they differ",
        ),
    ]
    for code, key, recorded, served, hint in fingerprints:
        if recorded and recorded != served:  # the message: the rule's summary
            out.append(
                at(
                    code,
                    RULES[code].summary,
                    key=f"tokenizer.{key}",
                    expected=recorded,
                    found=served,
                    hint=hint,
                )
            )
    wanted: list[tuple[str, int | None, int | None]] = [
        ("vocab_size", spec.vocab_size, tok.vocab_size),
        ("bos_token_id", spec.bos_token_id, tok.special_ids.get("bos")),
        ("eos_token_id", spec.eos_token_id, tok.special_ids.get("eos")),
        ("pad_token_id", spec.pad_token_id, tok.special_ids.get("pad")),
    ]
    for key, expected, found in wanted:
        if expected is not None and expected != found:
            out.append(
                at(
                    "EC333",
                    f"{key} is {found} in {tok.path.name}, {expected} in the contract",
                    key=f"tokenizer.{key}",
                    expected=expected,
                    found=found,
                    hint="the serving tokenizer is another one than the data's: serve the "
                    "data's tokenizer or re-make the shards",
                )
            )
    return out


def _probe_ids(tok: TokenizerFolder, spec: TokenizerSpec | None) -> list[int] | None:
    """The ids of a two-turn probe conversation as the folder's template renders it."""
    from ..models.chat_template import render

    if tok.chat_template is None:
        return None
    text = render(
        tok.chat_template,
        PROBE,
        special=tok.special,
        kwargs=spec.template_kwargs if spec is not None else None,
    )
    return tok.encode(text)


def _template_bos(
    tok: TokenizerFolder, spec: TokenizerSpec, ids: list[int], contract: Contract | None
) -> list[Finding]:
    bos = tok.special_ids.get("bos")
    if spec.bos is None:
        return []
    lead = leading(ids, bos) if bos is not None else 0
    want = 1 if spec.bos == "once" else 0
    if lead == want:
        return []
    return [
        finding(
            "EC334",
            f"the serving template starts a conversation with {lead} BOS; the data's "
            f"policy is {spec.bos!r}",
            contract=contract,
            key="tokenizer.bos",
            file=str(tok.path),
            expected=f"{want} BOS",
            found=f"{lead} BOS",
            hint="the serving template and the data pipeline add BOS differently: make "
            "tokenizer.bos say what the served sequences hold, and re-make the shards",
        )
    ]


def leading(ids: Sequence[int], token: int) -> int:
    """How many times ``token`` opens ``ids``."""
    n = 0
    while n < len(ids) and ids[n] == token:
        n += 1
    return n


def as_list(values: Any) -> list[int]:
    """A shard's stored 1-D ids or mask (torch, or the mapped reader's view) as ints."""
    from ..shards.reading import comparable

    array = comparable(values)
    return [] if array is None else [int(v) for v in array.reshape(-1).tolist()]


def spans(mask: Sequence[int]) -> list[tuple[int, int]]:
    """The loss mask's runs of ones, as [start, end)."""
    out: list[tuple[int, int]] = []
    start = None
    for i, m in enumerate(mask):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((start, i))
            start = None
    if start is not None:
        out.append((start, len(mask)))
    return out


def find_all(ids: Sequence[int], needle: Sequence[int]) -> list[int]:
    n = len(needle)
    if not n:
        return []
    first = needle[0]
    return [i for i, t in enumerate(ids) if t == first and list(ids[i : i + n]) == list(needle)]


def think_census(
    ids: Sequence[int], think: tuple[int, int], tok: TokenizerFolder | None = None
) -> dict[str, int]:
    """Think blocks in ``ids``: ``empty`` (whitespace only: decoded with ``tok``, else at
    most EMPTY_THINK_MAX tokens), ``filled``, and ``unclosed``."""
    open_id, close_id = think
    census = {"empty": 0, "filled": 0, "unclosed": 0}
    i = 0
    while i < len(ids):
        if ids[i] != open_id:
            i += 1
            continue
        j = i + 1
        while j < len(ids) and ids[j] != close_id:
            j += 1
        if j >= len(ids):
            census["unclosed"] += 1
            break
        inside = list(ids[i + 1 : j])
        if tok is not None:
            empty = not tok.decode(inside).strip()
        else:
            empty = len(inside) <= EMPTY_THINK_MAX
        census["empty" if empty else "filled"] += 1
        i = j + 1
    return census


def check_tokens(
    contract: Contract, shard: Shard, tok: TokenizerFolder | None = None
) -> list[Finding]:
    """The shard's tokens against the contract's ``tokenizer`` section (and the serving
    tokenizer ``tok``, when there is one)."""
    spec = contract.tokenizer
    assert shard.sample is not None, shard.error
    raw_ids = shard.sample.ids
    if raw_ids is None:
        return []  # the structure family reports a shard without ids (EC201)
    ids = as_list(raw_ids)
    raw_mask = shard.sample.mask
    mask = as_list(raw_mask) if raw_mask is not None else None
    label = shard.label
    out: list[Finding] = []
    if spec is not None:
        out += _bos(contract, spec, ids, label)
        if mask is not None and len(mask) == len(ids) and spec.assistant_header:
            out += _header_and_mask(contract, spec, ids, mask, label)
        if spec.thinking and spec.think_token_ids:
            out += _thinking(contract, spec, ids, label, tok)
    out += _unknown(contract, spec, ids, label, tok)
    return out


def _bos(contract: Contract, spec: TokenizerSpec, ids: list[int], label: str) -> list[Finding]:
    if spec.bos is None or spec.bos_token_id is None:
        return []
    lead = leading(ids, spec.bos_token_id)
    want = 1 if spec.bos == "once" else 0
    if lead == want:
        return []
    doubled = lead > 1
    return [
        finding(
            "EC334",
            f"the sequence starts with {lead} BOS (id {spec.bos_token_id})"
            + ("; a doubled BOS" if doubled else ""),
            contract=contract,
            key="tokenizer.bos",
            file=label,
            expected=f"{want} BOS ({spec.bos})",
            found=f"{lead} BOS",
            hint="the pipeline tokenized the rendered template with special tokens added: "
            "tokenize it with add_special_tokens=False (the template writes BOS itself)"
            if doubled
            else "make the pipeline's BOS match tokenizer.bos (what the engine serves)",
        )
    ]


def _header_and_mask(
    contract: Contract, spec: TokenizerSpec, ids: list[int], mask: list[int], label: str
) -> list[Finding]:
    header = list(spec.assistant_header)
    h = len(header)
    out: list[Finding] = []
    at = partial(finding, contract=contract, key="tokenizer.assistant_header", file=label)
    masked_header = next((p for p in find_all(ids, header) if any(mask[p : p + h])), None)
    if masked_header is not None:
        out.append(
            at(
                "EC336",
                f"the loss mask covers the assistant header at token {masked_header}",
                expected="loss on the assistant's content only",
                found=f"mask {mask[masked_header : masked_header + h]} on header {header}",
                hint="the loss mask must start after the template's assistant header: check "
                "the pipeline's assistant pattern against the chat template",
                extra={"position": masked_header},
            )
        )
    for start, _end in spans(mask):
        if start >= h and ids[start - h : start] == header:
            continue
        if any(ids[p : p + h] == header for p in range(max(0, start - h + 1), start + 1)):
            continue  # a span from inside a header: reported as a covered header
        out.append(
            at(
                "EC335",
                f"the loss span at token {start} does not follow the assistant header",
                expected=f"header {header} right before the span",
                found=f"{ids[max(0, start - h) : start]} before it",
                hint="the loss mask covers tokens the template does not give the assistant: "
                "check the pipeline's assistant pattern against the chat template",
                extra={"position": start},
            )
        )
        break  # the first is enough to name the cause
    return out


def _thinking(
    contract: Contract,
    spec: TokenizerSpec,
    ids: list[int],
    label: str,
    tok: TokenizerFolder | None,
) -> list[Finding]:
    assert spec.think_token_ids is not None
    census = think_census(ids, spec.think_token_ids, tok)
    found = (
        f"{census['filled']} filled, {census['empty']} empty"
        + (f", {census['unclosed']} unclosed" if census["unclosed"] else "")
        if any(census.values())
        else "no think block"
    )
    if spec.thinking == "on" and not census["filled"]:
        bad = "thinking on, but no filled think block"
        hint = (
            "the data was re-templated without its reasoning (empty think blocks injected: "
            "SpecForge#296) or made with thinking off: re-make it with the reasoning kept, "
            "or set tokenizer.thinking to what the engine serves"
        )
    elif spec.thinking == "off" and census["filled"]:
        bad = "thinking off, but a filled think block"
        hint = (
            "a draft trained on reasoning and served without it accepts far less (dflash#60): "
            "make the data's mode the served one (enable_thinking), or set thinking: on"
        )
    else:
        return []
    return [
        finding(
            "EC337",
            f"{bad}: {found}",
            contract=contract,
            key="tokenizer.thinking",
            file=label,
            expected=f"thinking {spec.thinking}",
            found=found,
            hint=hint,
            extra={"census": census},
        )
    ]


def _unknown(
    contract: Contract,
    spec: TokenizerSpec | None,
    ids: list[int],
    label: str,
    tok: TokenizerFolder | None,
) -> list[Finding]:
    if tok is not None:
        vocab, whose, key = tok.vocab_size, f"the serving tokenizer {tok.path}", "tokenizer.path"
        bad = next((i for i in ids if not tok.knows(i)), None)
    elif spec is not None and spec.vocab_size is not None:
        vocab, whose, key = spec.vocab_size, "the contract's tokenizer", "tokenizer.vocab_size"
        bad = next((i for i in ids if not 0 <= i < vocab), None)
    else:
        return []
    if bad is None:
        return []
    count = sum(1 for i in ids if not 0 <= i < vocab) or 1
    return [
        finding(
            "EC338",
            f"token id {bad} is not in {whose} ({vocab} tokens)",
            contract=contract,
            key=key,
            file=label,
            expected=f"ids in [0, {vocab})",
            found=f"id {bad} ({count} such)",
            hint="the shards were made with a tokenizer that has tokens the serving one lacks "
            "(added special tokens?): serve the data's tokenizer or re-make the shards",
        )
    ]


def _serving_tokenizer(runner: Resources, contract: Contract) -> TokenizerFolder | None:
    """The serving tokenizer folder, read once per run; None when none is given or it cannot
    be read (the ``tokenizer`` family reports that, EC330)."""
    from ..errors import CodedError
    from ..models.tokenizer import read_tokenizer

    path = tokenizer_dir(runner, contract)
    if path is None:
        return None

    def read() -> TokenizerFolder | None:
        try:
            return read_tokenizer(path)
        except CodedError:
            return None

    return runner.once(("tokenizer", path), read)


def tokenizer_dir(runner: Resources, contract: Contract) -> Path | None:
    """``--tokenizer DIR``, else the contract's ``tokenizer.path``."""
    given = runner.settings.tokenizer
    return given or (contract.tokenizer.path if contract.tokenizer else None)


def run_tokens(runner: Resources, unit: Unit) -> list[Finding]:
    return check_tokens(
        unit.contract, runner.shard_of(unit), _serving_tokenizer(runner, unit.contract)
    )


def run_tokenizer(runner: Resources, unit: Unit) -> list[Finding]:
    path = tokenizer_dir(runner, unit.contract)
    assert path is not None  # the planner runs the family only with one
    return check_tokenizer(path, contract=unit.contract)


FAMILY = CheckFamily(
    "tokens",
    "shard",
    "the shards' tokens: BOS policy, assistant header, loss mask, think blocks, unknown ids",
    codes=("EC334", "EC335", "EC336", "EC337", "EC338"),
    keys=("tokenizer",),
    run=run_tokens,
    needs=frozenset({"training", "tokenizer"}),
)

TOKENIZER_FAMILY = CheckFamily(
    "tokenizer",
    "contract",
    "the serving tokenizer folder against the contract's fingerprint, ids and BOS policy",
    codes=("EC330", "EC331", "EC332", "EC333"),
    keys=("tokenizer",),
    run=run_tokenizer,
    needs=frozenset({"tokenizer-dir"}),
)
