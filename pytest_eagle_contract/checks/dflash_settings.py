"""A DFlash draft's own settings against the launch line and the contract: block size and
draft length (EC526), the mask token (EC527), the tap list itself (EC528).

What each engine does with them, read from its released code (docs/dflash.md):

- Block size B: the draft sees the anchor (the verified token) and B - 1 masked positions, so
  one block drafts B - 1 tokens (speculators 0.9.0 ``models/dflash/core.py``: greedy
  ``speculative_tokens = block_size - 1`` unless ``sample_from_anchor``; the off-by-one fixed
  in speculators #456). SGLang 0.5.23 takes ``--speculative-num-draft-tokens`` (alias
  ``--speculative-dflash-block-size``) as B: given and unlike the draft's ``block_size`` it
  runs the launch's value with only a log warning (``speculative/dflash_worker_v2.py``: "DFLASH
  block size mismatch"); both given and unlike each other is a ValueError
  (``arg_groups/speculative_hook.py``); neither given and no ``block_size`` in the draft: 16.
  vLLM 0.34.0 drafts ``num_speculative_tokens`` tokens (k, not B) and does not compare it with
  the draft's ``block_size`` (``v1/worker/gpu/spec_decode/dflash/speculator.py``); other
  vLLM releases were not read for this. k <= 0 is refused at start-up by every release read,
  0.24.0 to 0.34.0 (``config/speculative.py``: ``Field(gt=0)`` and ``_verify_args``), as is
  SGLang's ``--speculative-dflash-block-size`` <= 0 (0.5.11, 0.5.18, 0.5.23).
- SGLang 0.5.11 and 0.5.18 (``server_args.py``/``speculative_hook.py``,
  ``dflash_worker.py``/``dflash_worker_v2.py``) do as 0.5.23 for the block and the mask token.
- Mask token: SGLang 0.5.23 reads ``dflash_config.mask_token_id``, then the top-level key;
  negative is a ValueError (``dflash_utils.py``), at or past the target's vocab_size a
  ValueError (``dflash_worker_v2.py`` ``_resolve_mask_token_id``); absent, it looks
  ``<|MASK|>`` (or ``mask_token``) up in the tokenizer and adds it when missing. vLLM 0.34.0
  (``v1/worker/gpu/spec_decode/utils.py`` ``get_parallel_drafting_token_id``) reads the same
  two keys and refuses a draft without one.
- Taps: SGLang refuses ids outside ``[0, L)``; a trainer reading ``hidden_states[t + 1]``
  (z-lab's ``extract_context_feature``, cited in speculators' DFlash converter) wraps a
  negative t onto a layer from the end. Duplicate taps (ModelOpt's formula on a shallow
  target, ``[1, 1, 1, 1]``) are concatenated k times by such a trainer while SGLang captures
  each layer once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..contract.model import Contract
    from ..engines.dflash_draft import DFlashDraft
    from .layout_types import LayoutReport

SGLANG_DEFAULT_BLOCK = 16
"""SGLang 0.5.23's DFlash block without a launch setting or a draft ``block_size``
(``arg_groups/speculative_hook.py``)."""


def check_settings(
    contract: Contract, report: LayoutReport, draft: DFlashDraft, command: str | None
) -> None:
    """EC526-EC528 for one DFlash draft config (``draft``) and its launch line."""
    _taps(contract, report, draft)
    _mask(contract, report, draft)
    if command or draft.speculative_tokens is not None:
        _block(contract, report, draft, command or "")


def _where(draft: DFlashDraft) -> str:
    return str(draft.path) if draft.path is not None else "the draft config"


def _taps(contract: Contract, report: LayoutReport, draft: DFlashDraft) -> None:
    from ..engines.dflash import zlab_formula
    from ..errors import Unservable

    L = contract.target.num_hidden_layers
    taps = draft.taps
    where = _where(draft)
    if taps is not None:
        dup = sorted({t for t in taps if taps.count(t) > 1})
        if dup:
            report.add(
                "EC528",
                f"{where}: {draft.tap_key} {list(taps)} names layer(s) {dup} more than once: "
                "a trainer reading hidden_states[t + 1] per tap concatenates the same state "
                "again, while SGLang captures each layer once (fewer states than the fc takes) "
                "and vLLM collapses duplicate ids",
                "serving.draft_config",
                hint="list each tap once; a formula that repeats layers on a shallow target "
                "(ModelOpt's [1, 1, 1, 1]) needs an explicit list",
                expected="distinct taps",
                found=str(list(taps)),
            )
        neg = [t for t in taps if t < 0]
        if neg:
            wrapped = ", ".join(f"{t} -> {_wrapped(t, L)}" for t in neg if L + t + 2 >= 0)
            report.add(
                "EC528",
                f"{where}: {draft.tap_key} {list(taps)} holds negative taps {neg}: a trainer "
                "indexing hidden_states[t + 1] wraps them onto layers from the end"
                + (f" ({wrapped})" if wrapped else "")
                + f", while SGLang refuses ids outside [0, {L}) at start-up",
                "serving.draft_config",
                hint="write the layer numbers the trainer really read, 0-based (tap t = the "
                "output of layer t = residual:t+1)",
                expected=f"taps in [0, {L})",
                found=str(neg),
            )
    stated = draft.num_target_layers
    if stated is None or stated == L:
        return
    if taps is None and draft.num_hidden_layers:
        n = draft.num_hidden_layers
        try:
            trained, served = zlab_formula(stated, n), zlab_formula(L, n)
        except Unservable:
            trained, served = None, None
        if trained is not None and trained != served:
            report.add(
                "EC528",
                f"{where}: num_target_layers is {stated}, the contract's target has {L} "
                f"layers; without a tap list a trainer builds the taps from {stated} "
                f"(build_target_layer_ids({stated}, {n}) = {trained}) and SGLang from the "
                f"served target (= {served}), with only a warning",
                "serving.draft_config",
                hint=f"write the trained taps into dflash_config.target_layer_ids: {trained}",
                expected=f"num_target_layers {L}",
                found=f"num_target_layers {stated}",
            )
            return
    report.add(
        "EC528",
        f"{where}: num_target_layers is {stated}, the contract's target has {L} layers: "
        "the draft was trained for a target of another depth (SGLang only logs a warning)",
        "serving.draft_config",
        hint="check that the draft belongs to this target (or fix num_target_layers)",
        expected=f"num_target_layers {L}",
        found=f"num_target_layers {stated}",
        severity="warning",
    )


def _wrapped(t: int, L: int) -> str:
    """What ``hidden_states[t + 1]`` of HF's L + 1 states is for a negative tap t."""
    i = t + 1
    if i >= 0:
        return "embed"
    j = L + 1 + i
    return "final_norm" if j == L else ("embed" if j == 0 else f"residual:{j}")


def _mask(contract: Contract, report: LayoutReport, draft: DFlashDraft) -> None:
    serving = contract.serving
    assert serving is not None
    where = _where(draft)
    mask = draft.mask_token_id
    vocab = contract.target.vocab_size or draft.vocab_size
    if mask is None:
        if draft.path is None:
            return  # taps given in the contract: no draft config to read
        if serving.engine == "vllm":
            report.add(
                "EC527",
                f"{where}: no mask_token_id (dflash_config.mask_token_id nor top level): vLLM "
                "0.34.0 refuses the draft at start-up (get_parallel_drafting_token_id; older "
                "releases not read for it)",
                "serving.draft_config",
                hint="write the mask token id the draft was trained with under "
                "dflash_config.mask_token_id",
                expected="dflash_config.mask_token_id",
                found="none",
            )
        elif serving.engine == "sglang":
            report.add(
                "EC527",
                f"{where}: no mask_token_id: SGLang looks '<|MASK|>' (or mask_token) up in "
                "the target's tokenizer and adds it when absent, an id the trainer may not "
                "have used for the masked positions",
                "serving.draft_config",
                hint="write the trainer's mask token id under dflash_config.mask_token_id",
                expected="dflash_config.mask_token_id",
                found="none",
                severity="warning",
            )
        return
    if mask < 0:
        report.add(
            "EC527",
            f"{where}: mask_token_id {mask} is negative: SGLang refuses it at start-up, and "
            "an embedding lookup in the trainer wraps it onto a row from the end",
            "serving.draft_config",
            expected="a token id in the vocabulary",
            found=str(mask),
        )
    elif vocab is not None and mask >= vocab:
        report.add(
            "EC527",
            f"{where}: mask_token_id {mask} lies outside the vocabulary of {vocab} tokens: "
            "SGLang refuses it at start-up (mask_token_id outside the target vocab size) and "
            "the draft's embedding has no such row",
            "serving.draft_config",
            expected=f"a token id below {vocab}",
            found=str(mask),
        )


VLLM_TOKEN_FLAGS = ("spec-tokens", "num-speculative-tokens")
"""vLLM's flags for ``num_speculative_tokens`` outside ``--speculative-config``:
``--spec-tokens`` (0.24.0 to 0.34.0 ``engine/arg_utils.py``, merged into the speculative
config), and ``--num-speculative-tokens``, which this check read before (no release read
here, 0.24.0 to 0.34.0, has it)."""


def _number(flags: Mapping[str, str], name: str) -> int | None:
    """``--name N`` as an integer; None when absent or not one."""
    try:
        return int(flags[name]) if name in flags else None
    except ValueError:
        return None


def _block(contract: Contract, report: LayoutReport, draft: DFlashDraft, command: str) -> None:
    from ..engines.knobs import _count
    from ..engines.sglang_launch import parse_flags

    serving = contract.serving
    assert serving is not None
    try:
        flags = parse_flags(command)
    except ValueError:
        return  # EC512 names an unparsable launch line
    B = draft.block_size
    where = _where(draft)
    if serving.engine == "sglang":
        if not command:
            return  # no launch line: what SGLang would run is not known here
        tokens = _count(flags, "speculative-num-draft-tokens")
        given = _number(flags, "speculative-dflash-block-size")
        if given is not None and given <= 0:
            report.add(
                "EC526",
                f"--speculative-dflash-block-size {given}: SGLang refuses the launch (DFLASH "
                "requires it to be positive, arg_groups/speculative_hook.py)",
                "serving.launch",
                hint=f"launch with --speculative-dflash-block-size {B}"
                if B is not None
                else "leave it out (SGLang then reads the draft's block_size) or give the "
                "trained block",
                expected="a positive block size",
                found=str(given),
            )
            return
        block = _count(flags, "speculative-dflash-block-size")
        if tokens and block and tokens != block:
            report.add(
                "EC526",
                f"--speculative-num-draft-tokens {tokens} and --speculative-dflash-block-size "
                f"{block} differ: SGLang refuses the launch (they must match for DFLASH)",
                "serving.launch",
                expected=f"{block} and {block}",
                found=f"{tokens} and {block}",
            )
            return
        asked = block or tokens
        if asked and B is not None and asked != B:
            flag = "--speculative-dflash-block-size" if block else "--speculative-num-draft-tokens"
            more = asked > B
            report.add(
                "EC526",
                f"{flag} {asked} is SGLang's DFlash block; {where} was trained on blocks of "
                f"{B} ({B - 1} drafted tokens): SGLang runs blocks of {asked} with only a log "
                "warning ('DFLASH block size mismatch')"
                + (f", asking for positions {B}..{asked - 1} it never learned" if more else ""),
                "serving.launch",
                hint=f"launch with {flag} {B} (or leave it out: SGLang then reads block_size)",
                expected=f"{B}",
                found=f"{asked}",
                severity="error" if more else "warning",
            )
        elif not asked and B is None:
            report.add(
                "EC526",
                f"{where} states no block_size and the launch sets none: SGLang drafts blocks "
                f"of {SGLANG_DEFAULT_BLOCK} (speculative_hook.py), whatever block the draft "
                "was trained on",
                "serving.launch",
                hint="write the trained block_size into the draft config (or pass "
                "--speculative-dflash-block-size)",
                expected="the trained block size",
                found=f"{SGLANG_DEFAULT_BLOCK} (SGLang's default)",
                severity="warning",
            )
        return
    if serving.engine != "vllm":
        return
    from ..engines.knobs import speculative_config

    config, _ = speculative_config(flags)
    k = config.get("num_speculative_tokens") if config is not None else None
    said = f"vLLM num_speculative_tokens {k}"
    if not (isinstance(k, int) and not isinstance(k, bool)):
        k = None
        for name in VLLM_TOKEN_FLAGS:
            k = _number(flags, name)
            if k is not None:
                said = f"vLLM --{name} {k}"
                break
    if k is None and draft.speculative_tokens is not None:
        # vLLM 0.34.0 takes a speculators config's speculative_tokens where the launch
        # gives none (transformers_utils/config.py maybe_override_with_speculators)
        k = draft.speculative_tokens
        said = (
            f"the speculators config's speculative_tokens {k} (vLLM's num_speculative_tokens "
            "where the launch sets none)"
        )
    if k is None:
        return
    if k <= 0:
        report.add(
            "EC526",
            f"{said}: vLLM refuses the launch (SpeculativeConfig takes num_speculative_tokens "
            "greater than zero only: 'Expected num_speculative_tokens to be greater than zero', "
            "config/speculative.py, 0.24.0 to 0.34.0 read)",
            "serving.launch",
            hint="set num_speculative_tokens to the draft's block_size - 1"
            + (f" ({B - 1})" if B is not None else ""),
            expected="at least 1",
            found=str(k),
        )
        return
    if B is None:
        return
    most = B if draft.sample_from_anchor else B - 1
    if k > most:
        report.add(
            "EC526",
            f"{said}; {where} was trained on blocks of {B}: the "
            f"anchor then {B - 1} masked positions, {most} drafted tokens (speculators #456: "
            f"block_size 8 drafts 7). vLLM 0.34.0 does not compare them: positions past "
            f"{most} are drafted by a model never trained on them",
            "serving.launch",
            hint=f"set num_speculative_tokens to {most} (block_size - 1) or fewer"
            + (
                " (speculators before #456 wrote speculative_tokens = block_size: re-export, "
                "or override it in --speculative-config)"
                if draft.speculative_tokens == k
                else ""
            ),
            expected=f"at most {most}",
            found=f"{k}",
        )
