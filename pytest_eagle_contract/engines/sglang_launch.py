"""Lint an SGLang launch command line for settings SGLang silently changes."""

from __future__ import annotations

import shlex

from ..errors import Problem


def parse_flags(command: str) -> dict[str, str]:
    """``--name value`` and ``--name=value`` pairs; a bare flag maps to ``""``."""
    words = shlex.split(command)
    flags: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            if "=" in word:
                name, value = word.split("=", 1)
            elif i + 1 < len(words) and not words[i + 1].startswith("--"):
                name, value = word, words[i + 1]
                i += 1
            else:
                name, value = word, ""
            flags[name[2:].replace("_", "-")] = value
        i += 1
    return flags


def _int(flags: dict[str, str], name: str) -> int | None:
    try:
        return int(flags[name]) if name in flags else None
    except ValueError:
        return None


OWN_HANDLERS = ("DFLASH", "DSPARK", "UNO", "FROZEN_KV_MTP", "NGRAM")
"""The speculative algorithms SGLang 0.5.23 settles in a handler of their own rather than
``_handle_eagle_family`` (``speculative/spec_info.py``): the EAGLE family's topk-1 reset of
the draft-token count is not theirs (DFLASH forces steps and topk to 1 and takes the count as
its block, ``arg_groups/speculative_hook.py``)."""

DFLASH_METHODS = ("dflash", "dflash2", "dspark")
"""The contract methods served on SGLang's DFlash-family paths, not as EAGLE-3 drafts."""


def lint_sglang(command: str, method: str = "eagle3") -> list[Problem]:
    """SGLang's silently changed launch settings (EC512) for a draft of ``method``: an
    unparsable line; the EAGLE family's topk-1 reset (not under the algorithms with a
    handler of their own); EAGLE without aux states for an EAGLE-3 draft (not a DFlash one)."""
    try:
        flags = parse_flags(command)
    except ValueError as exc:
        return [
            Problem(
                "EC512", f"the launch command cannot be parsed: {exc}", "quote it as a shell would"
            )
        ]
    out = []
    algorithm = flags.get("speculative-algorithm", "").upper()
    topk = _int(flags, "speculative-eagle-topk")
    steps = _int(flags, "speculative-num-steps")
    tokens = _int(flags, "speculative-num-draft-tokens")
    eagle_family = algorithm not in OWN_HANDLERS
    if (
        eagle_family
        and topk == 1
        and steps is not None
        and tokens is not None
        and tokens != steps + 1
    ):
        out.append(
            Problem(
                "EC512",
                f"--speculative-eagle-topk 1 makes SGLang reset --speculative-num-draft-tokens "
                f"{tokens} to --speculative-num-steps + 1 = {steps + 1}, with only a warning",
                f"set --speculative-num-steps {tokens - 1} to draft {tokens} tokens, or raise "
                "--speculative-eagle-topk (srt/arg_groups/speculative_hook.py; older: "
                "server_args.py)",
            )
        )
    eagle3_draft = method not in DFLASH_METHODS
    if eagle3_draft and algorithm == "EAGLE" and "speculative-draft-model-path" in flags:
        out.append(
            Problem(
                "EC512",
                "--speculative-algorithm EAGLE captures no aux hidden states: an EAGLE-3 "
                "draft then receives the last hidden state only",
                "use --speculative-algorithm EAGLE3 for EAGLE-3 drafts",
            )
        )
    return out


def served_dtype(command: str) -> str | None:
    try:
        value = parse_flags(command).get("dtype")
    except ValueError:
        return None  # lint_sglang reports the unparsable line
    aliases = {
        "bf16": "bfloat16",
        "half": "float16",
        "fp16": "float16",
        "float": "float32",
        "fp32": "float32",
    }
    if not value or value == "auto":
        return None
    return aliases.get(value, value)
