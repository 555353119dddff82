"""Findings (what a check found), the registry of stable rule codes, and the one builder
every check uses to make a finding located at a contract key."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypedDict, cast

Severity = Literal["error", "warning"]
RuleCode = Literal[
    "EC001",
    "EC002",
    "EC003",
    "EC009",
    "EC101",
    "EC102",
    "EC201",
    "EC202",
    "EC203",
    "EC204",
    "EC205",
    "EC206",
    "EC207",
    "EC301",
    "EC302",
    "EC303",
    "EC304",
    "EC310",
    "EC311",
    "EC312",
    "EC313",
    "EC330",
    "EC331",
    "EC332",
    "EC333",
    "EC334",
    "EC335",
    "EC336",
    "EC337",
    "EC338",
    "EC340",
    "EC341",
    "EC342",
    "EC343",
    "EC344",
    "EC345",
    "EC346",
    "EC347",
    "EC348",
    "EC401",
    "EC501",
    "EC502",
    "EC503",
    "EC504",
    "EC505",
    "EC506",
    "EC507",
    "EC508",
    "EC509",
    "EC510",
    "EC511",
    "EC512",
    "EC513",
    "EC514",
    "EC515",
    "EC516",
    "EC517",
    "EC518",
    "EC519",
    "EC520",
    "EC521",
    "EC522",
    "EC523",
    "EC524",
    "EC601",
    "EC602",
    "EC603",
    "EC604",
    "EC605",
    "EC620",
    "EC621",
    "EC622",
    "EC623",
    "EC624",
    "EC625",
    "EC701",
    "EC702",
    "EC703",
    "EC704",
    "EC705",
    "EC706",
    "EC707",
    "EC708",
    "EC709",
    "EC710",
    "EC711",
    "EC712",
    "EC713",
    "EC714",
    "EC715",
    "EC716",
    "EC720",
    "EC721",
    "EC722",
    "EC723",
    "EC724",
    "EC725",
    "EC726",
    "EC727",
    "EC801",
    "EC802",
    "EC901",
    "EC902",
    "EC903",
    "EC904",
    "EC905",
    "EC906",
    "EC907",
    "EC920",
    "EC921",
    "EC922",
    "EC923",
    "EC924",
    "EC925",
    "EC926",
    "EC927",
    "EC928",
    "EC930",
    "EC931",
    "EC932",
    "EC933",
    "EC934",
    "EC935",
]
"""Every rule code; the type checker refuses a code not listed (tests tie it to RULES)."""


@dataclass(frozen=True)
class Rule:
    code: RuleCode
    name: str
    summary: str

    @property
    def url(self) -> str:
        """The rule's section of docs/rules.md (``eagle-contract explain CODE`` prints it)."""
        from .version import RULES_URL

        return f"{RULES_URL}#{self.code.lower()}-{self.name}"


_TABLE = """
EC001 unreadable-file            the shard cannot be opened or is not in a known format
EC002 truncated-file             the shard is cut short or its container is corrupt
EC003 unsafe-file                the shard needs arbitrary code to load and was refused
EC009 check-not-run              a check that applies did not run; the message says why
EC101 missing-key                a key the format requires is absent
EC102 unexpected-key             the shard holds a key the contract does not allow
EC201 dtype-mismatch             a key or slot has another dtype than the contract says
EC202 length-mismatch            input_ids, loss_mask and the slots differ in length
EC203 width-mismatch             a hidden state is not n_slots * hidden_size wide
EC204 slot-count                 the shard holds another number of slots than the contract
EC205 sequence-length            the sequence is shorter or longer than the contract allows
EC206 dataset-row                a shard's token ids differ from its dataset row's input_ids
EC207 hc-width                   a state is hc_mult * hidden_size wide: hyper-connection streams
EC301 token-out-of-vocab         an input id lies outside [0, vocab_size)
EC302 loss-mask-values           loss_mask holds values other than 0 and 1
EC303 loss-mask-empty            loss_mask is all zero: the sample trains nothing
EC304 non-finite                 a hidden state holds NaN or Inf
-- EC31x: stored precision (FP8 states and their scales)
EC310 fp8-no-scale               FP8 hidden states stored without their scales
EC311 fp8-saturation             FP8 hidden states clipped at the format's largest value
EC312 fp8-scales                 the FP8 scales are unusable: shape, non-finite or not positive
EC313 fp8-coarse-scale           a slot's FP8 values underflow under a scale it shares
-- EC33x-EC34x: the tokens (tokenizer, chat template, serving renderer)
EC330 tokenizer-unreadable       the tokenizer folder or its chat template cannot be read
EC331 tokenizer-revision         the tokenizer files differ from the ones the data was made with
EC332 chat-template-differs      the chat template differs from the one the data was made with
EC333 special-ids                the vocabulary size or a special token id differs from the
                                 contract's
EC334 bos-policy                 a sequence starts with another number of BOS tokens than the policy
                                 says
EC335 header-tokens              an assistant span does not follow the template's assistant header
EC336 loss-mask-template         the loss mask covers tokens outside the assistant spans
EC337 thinking-mode              the thinking blocks differ from the contract's thinking mode
EC338 unknown-token              a token id the serving tokenizer does not have
EC340 render-mismatch            the serving renderer makes other tokens for the shard's
                                 conversation
EC341 render-bos-doubled         the shard holds a BOS more than the serving renderer makes
EC342 render-thinking            the shard and the serving renderer differ in the thinking block
EC343 render-revision            the same text tokenized into other ids: the tokenizer revision
                                 differs
EC344 conversations-unreadable   the conversations file, or a row of it, cannot be read
EC345 conversation-unmatched     a shard has no conversation to compare with
EC346 template-render-failed     the chat template cannot be rendered within the sandbox's bounds
EC347 render-endpoint            the engine's render endpoint gave no usable tokens
EC348 render-parity-rate         fewer shards than all match the serving renderer exactly
EC401 norm-out-of-bounds         a slot's median per-token L2 norm is outside its bounds
EC501 layout-mismatch            the trainer's fc input and the engine's aux layers differ
EC502 aux-count                  the trainer and the engine use another number of aux states
EC503 fc-width                   fc input width disagrees across contract, draft and engine
EC504 serving-dtype              shards are stored in another dtype than the engine serves
EC505 target-norm                the target slot is pre-norm where the trainer expects post-norm, or
                                 the reverse
EC506 unsorted-ids               aux ids are not ascending: the engine sorts, a trainer may not
EC507 default-ids                the engine will use its default aux ids, silently
EC508 ignored-ids                the draft config's ids sit where the engine does not read
EC509 draft-vocab                the draft's d2t / t2d vocabulary maps are inconsistent
EC510 unservable                 the engine would not serve this case
EC511 dropped-capture            the engine silently captures fewer layers than asked
EC512 serving-args               a launch setting the engine silently changes
EC513 missing-shards             the contract's shard location holds no shard
EC514 graph-default-ids          CUDA-graph passes capture the default layers, eager ones the
                                 draft's
EC515 ids-disagree               the contract's aux_layer_ids differ from the draft config
EC516 moved-id                   the engine silently captures another layer than the id names
-- benchmark knobs that fake acceptance (launch line, --serving-env)
EC517 sglang-simulated-acceptance  SGLANG_SIMULATE_ACC_LEN is set: SGLang fakes the accept length
EC518 vllm-synthetic-acceptance  vLLM's speculative config asks for synthetic rejection sampling
EC519 trtllm-forced-acceptance   TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS forces TensorRT-LLM's
                                 accepted tokens
EC520 sglang-jax-simulated-acceptance  SIMULATE_ACC_LEN is set: sglang-jax fakes the accept
                                 length
-- the method and mode a launch really runs
EC521 aux-states-off             the draft's use_aux_hidden_state: false runs an EAGLE-3 draft
                                 without its aux states
EC522 guessed-taps               the draft config has no tap list: the engine guesses the layers
                                 by a formula
EC523 draft-kind-fallback        mlx-vlm runs the draft as another drafter kind than the method
EC524 drafter-dropped            mlx-vlm drops an incompatible MTP drafter and decodes without
                                 speculation
-- EC6xx: evidence of what each slot is (reference capture, weights)
EC601 embed-identity             a slot is (or is declared but is not) the embedding rows
EC602 norm-kind                  a slot is post-norm where pre-norm is declared, or the reverse
EC603 teacher-agreement          lm_head of the target slot predicts the next token too rarely
EC604 slot-identity              a reference capture finds another layer than declared
EC605 target-model               the target model does not match the contract's target
-- EC62x: the serving target against the training target; the probe's target against the shards
EC620 serving-target-unreadable  a target folder cannot be read or run
EC621 serving-target-shape       the serving target has another shape
EC622 serving-target-drift       the serving target's states drift (quantized twin)
EC623 serving-target-basis       the serving target's states are in another basis
EC624 scaled-embedding           an embed slot lacks the normalizer (Gemma: sqrt(H))
EC625 probe-target-mismatch      the probe's target model is not the one the shards were made with
-- EC7xx: serving capture (live SGLang, capture files)
EC701 capture-mismatch           a shard's fc-input slot differs from the state the server feeds the
                                 draft at that position
EC702 aux-capture-off            the server returned no aux states: hidden-state return off, or the
                                 post-norm last layer
EC703 capture-rows               the server returned another number of prefill rows than the shard
                                 has tokens
EC704 capture-width              the captured states are not n_aux * hidden_size wide
EC705 server-unreachable         the SGLang server cannot be reached or did not answer /generate
EC706 capture-missing            no capture file holds this shard's input_ids
EC707 capture-invalid            a capture file is unreadable or inconsistent
-- topology parity (compare-captures): a production layout against a single-GPU reference
EC708 topology-mismatch          a production capture's state differs from the reference's at some
                                 tokens
EC709 topology-shape             a production capture holds another number of states, width or rows
                                 than the reference
EC710 topology-unpaired          a prompt was captured on one layout only
EC711 token-order                a production capture holds the reference's rows or ids in another
                                 token order
-- measured acceptance (measure): a running engine's own counters, the draft loaded
EC712 measured-below-floor       the engine's measured accept length is below the contract's floor
EC713 measure-no-counters        the engine reports no speculative counters: no draft loaded, or its
                                 metrics off
EC714 measure-counters-invalid   the engine's counters contradict each other
EC715 measure-unreachable        the engine cannot be reached or gave no usable answer
EC716 measure-no-prompts         no sampled shard gives a prompt (no loss mask marks a reply)
-- acceptance profiles (profile): ModelOpt's speculation_profile.json
EC720 profile-unreadable         the acceptance profile cannot be read or lacks a field it needs
EC721 profile-mean-length        1 + sum(marginal rates) differs from the mean accept length
EC722 profile-conditional        the conditional rates differ from the marginal ones' ratios
EC723 profile-histogram          the histogram disagrees with the rates or the mean accept length
EC724 profile-drift              a deploy-time profile accepts less than the training-time one
EC725 acceptance-saturated       acceptance is exactly 1.0 or exactly the maximum: nothing measured
EC726 draft-length-mismatch      the profile was measured at another draft length than served
EC727 profile-below-floor        a profile's mean accept length is below the contract's floor
-- EC8xx: contract sharpness (mutations)
EC801 not-sharp                  a class of pipeline bug passes the contract
EC802 baseline-fails             a shard built to the contract's own description fails it
-- EC9xx: the draft checkpoint itself
EC901 draft-fc-shape             fc.weight is not [hidden_size, n_aux * target hidden]
EC902 draft-lm-head              lm_head is missing or its rows differ from draft_vocab_size
EC903 draft-vocab-no-map         a compressed draft vocabulary has no d2t map
EC904 draft-embed                the draft's embed_tokens differ from the target's, which the engine
                                 uses
EC905 draft-norm-flag            a norm flag in the draft config the engine ignores
EC906 accept-length-below-floor  a served layout's estimated acceptance is low
EC907 accept-drop                a served layout accepts much less than the trainer's layout
EC920 draft-config-unreadable    the draft's or the trainer's config is unreadable
EC921 draft-rope-theta           a reader resolves another RoPE theta than trained
EC922 draft-rope-scaling         a reader resolves another RoPE type or scaling
EC923 draft-max-position         max position differs from trained or below the context
EC924 draft-sliding-window       the sliding window differs or the engine ignores it
EC925 draft-head-dim             a reader resolves another head dim than trained
EC926 draft-dtype                the exported dtype differs from the trained one
EC927 draft-eagle31-flags        fc_norm / norm_output differ or the engine ignores them
EC928 draft-config-layouts       transformers 4 and 5 read the config differently
EC930 vocab-tokenizer            d2t/t2d were built with another tokenizer than served
EC931 vocab-map-changed          the draft's d2t is not the map recorded
EC932 vocab-provenance           a compressed vocabulary with no provenance recorded
EC933 vocab-coverage             the draft vocabulary covers too little of the data
EC934 vocab-special-tokens       special tokens the data trains on are not in the map
EC935 vocab-byte-tokens          byte tokens the data trains on are not in the map
"""
"""Every rule, in order: its code, its name and its summary (a longer one goes on in the
summary's column on the next line); a line that starts with ``--`` heads a series. Parsed
once into RULES; tests/unit/test_architecture.py ties its codes to RuleCode."""


def _parse(table: str) -> dict[RuleCode, Rule]:
    rows: list[list[str]] = []
    for line in table.splitlines():
        if line.startswith(" "):
            rows[-1][2] += " " + line.strip()
        elif line and not line.startswith("--"):
            rows.append(line.split(None, 2))
    return {
        cast(RuleCode, code): Rule(cast(RuleCode, code), name, text) for code, name, text in rows
    }


RULES: dict[RuleCode, Rule] = _parse(_TABLE)


def codes(series: str, *, but: tuple[RuleCode, ...] = ()) -> tuple[RuleCode, ...]:
    """The rule codes of a series (``"EC5"``: EC501, EC502, ...) in order, less ``but``: a
    check family names the series it owns instead of copying the codes."""
    return tuple(code for code in RULES if code.startswith(series) and code not in but)


UNREACHABLE = "server_unreachable"
"""The ``extra`` key of an EC705 finding whose server nothing answered at (refused, timed out,
no such host): a run with only these says nothing about the data (exit 69)."""

_TEXT_FIELDS = ("code", "message", "expected", "found", "file", "contract", "hint", "details")


@dataclass(frozen=True)
class Finding:
    """One thing wrong, located and explained like a compiler diagnostic."""

    code: RuleCode
    message: str
    expected: str = ""
    found: str = ""
    file: str = ""
    slot: int | None = None
    contract: str = ""
    line: int | None = None
    hint: str = ""
    details: str = ""
    severity: Severity = "error"
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.code not in RULES:
            raise ValueError(f"unknown rule code {self.code}")

    @property
    def rule(self) -> Rule:
        return RULES[self.code]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["rule"] = self.rule.name
        data["url"] = self.rule.url
        return data

    @classmethod
    def from_dict(cls, data: object) -> Finding:
        """The finding ``to_dict`` wrote, read back from a file this run did not write (a
        cache, a worker's report): TypeError or ValueError when it is not one."""
        if not isinstance(data, dict):
            raise TypeError("a finding is an object")
        fields = {k: v for k, v in data.items() if k not in ("rule", "url")}
        if not all(isinstance(fields.get(k, ""), str) for k in _TEXT_FIELDS):
            raise TypeError("a finding's text is a string")
        if not all(fields.get(k) is None or type(fields[k]) is int for k in ("slot", "line")):
            raise TypeError("a finding's slot and line are numbers")
        if fields.get("severity", "error") not in ("error", "warning"):
            raise ValueError("unknown severity")
        if not isinstance(fields.get("extra", {}), dict):
            raise TypeError("a finding's extra is an object")
        return cls(**fields)


class Located(Protocol):
    """What a finding needs of a contract: its path and the line of a key."""

    @property
    def path(self) -> Path: ...

    def line_of(self, key_path: str) -> int: ...


class Parts(TypedDict, total=False):
    """The parts of a finding a check's own ``add`` helper passes on to :func:`finding`
    (typed, so a misspelled part is a type error there too)."""

    file: str
    slot: int | None
    expected: object
    found: object
    details: str
    severity: Severity
    extra: dict[str, Any] | None


def finding(
    code: RuleCode,
    message: str,
    *,
    contract: Located | None = None,
    key: str = "",
    file: str = "",
    slot: int | None = None,
    expected: object = "",
    found: object = "",
    hint: str = "",
    details: str = "",
    severity: Severity = "error",
    extra: dict[str, Any] | None = None,
) -> Finding:
    """The one way to make a finding: ``key`` (``training.slots[0].norm``) locates it in
    ``contract`` (its line, else its nearest parent's), by default the ``slot``'s entry;
    ``file`` is the shard's label."""
    if not key and slot is not None:
        key = f"training.slots[{slot}]"
    return Finding(
        code,
        message,
        expected=str(expected),
        found=str(found),
        file=file,
        slot=slot,
        contract=str(contract.path) if contract is not None else "",
        line=contract.line_of(key) if contract is not None and key else None,
        hint=hint,
        details=details,
        severity=severity,
        extra=extra or {},
    )


NOT_RUN: RuleCode = "EC009"


def not_run(check: str, reason: object, **where: Any) -> Finding:
    """The warning that check family ``check`` did not run (on a shard, or at all) and why:
    a verdict is "ok" only when every check that applies ran (render.summary)."""
    return finding(
        NOT_RUN,
        f"{check} did not run: {reason}",
        severity="warning",
        hint=where.pop("hint", "") or "fix what the reason names; the shard's own checks report it",
        **where,
    )
