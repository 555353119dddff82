"""The contract's ``tokenizer`` section, drafted from a tokenizer folder (``infer
--tokenizer DIR``, by default the target model's folder) and the shards' tokens.

From the folder: the fingerprints, vocabulary size, special ids, the BOS policy its
template makes (a probe conversation rendered and counted), the assistant header (the
generation prompt, less a think block it opens) and the think tokens. From the shards: the
thinking mode (filled blocks in every shard: ``on``; in none: ``off``; else ``mixed``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import CodedError, UsageError

CENSUS_SHARDS = 16  # shards read for the thinking census


def tokenizer_lines(
    folder: Path,
    *,
    ref: str | None = None,
    shard_files: Sequence[Path] = (),
    format: str = "auto",
) -> list[str]:
    """The ``tokenizer:`` section's YAML lines. UsageError when the folder is unreadable."""
    section = draft_section(folder, shard_files=shard_files, format=format)
    out = [
        "tokenizer:  # what the data's tokenizer and chat template were (docs/tokens.md)",
        f"  path: {ref or folder}",
    ]
    for key, value in section.items():
        if isinstance(value, list):
            value = "[" + ", ".join(map(str, value)) + "]"
        elif value is None:
            value = "null"
        note = _NOTES.get(key, "")
        out.append(f"  {key}: {value}" + (f"  # {note}" if note else ""))
    if "thinking" not in section and "think_token_ids" in section:
        out.append("  # thinking: on  # on, off or mixed: what the assistant turns hold")
    return out


def drafted_lines(
    tokenizer: Path | None,
    tokenizer_ref: str | None,
    target_model: Path | None,
    model_ref: str | None,
    shard_files: Sequence[Path],
    format: str,
) -> list[str]:
    """``infer``'s tokenizer section: from ``--tokenizer`` (an unreadable folder is a usage
    error), else from the target model's folder when it holds a ``tokenizer.json`` (one it
    cannot read leaves a comment saying why, not a failed draft)."""
    if tokenizer is not None:
        return tokenizer_lines(tokenizer, ref=tokenizer_ref, shard_files=shard_files, format=format)
    if target_model is None or not (target_model / "tokenizer.json").is_file():
        return []
    try:
        return tokenizer_lines(target_model, ref=model_ref, shard_files=shard_files, format=format)
    except UsageError as exc:
        return [f"# tokenizer: not drafted from {target_model}: {exc}"]


_NOTES = {
    "bos": "the template's own BOS, counted on a rendered probe",
    "assistant_header": "the template's assistant header: loss spans start after it",
    "thinking": "from the shards' think blocks",
}


def draft_section(
    folder: Path, *, shard_files: Sequence[Path] = (), format: str = "auto"
) -> dict[str, Any]:
    """The section's values, drafted."""
    from ..checks.tokens import PROBE, THINK, leading, think_census
    from ..models.chat_template import render
    from ..models.tokenizer import read_tokenizer

    try:
        tok = read_tokenizer(folder)
    except CodedError as exc:
        raise UsageError(f"--tokenizer: {exc.message}") from None
    out: dict[str, Any] = {
        "files_sha256": tok.files_sha256,
    }
    if tok.chat_template_sha256:
        out["chat_template_sha256"] = tok.chat_template_sha256
    out["vocab_size"] = tok.vocab_size
    for name in ("bos", "eos", "pad"):
        if tok.special_ids.get(name) is not None:
            out[f"{name}_token_id"] = tok.special_ids[name]
    think = [tok.token_id(t) for t in THINK]
    think_ids = (think[0], think[1]) if think[0] is not None and think[1] is not None else None
    if tok.chat_template is not None:
        try:
            probe = tok.encode(render(tok.chat_template, PROBE, special=tok.special))
            user = [dict(PROBE[0])]
            bare = tok.encode(render(tok.chat_template, user, special=tok.special))
            asked = tok.encode(
                render(tok.chat_template, user, special=tok.special, add_generation_prompt=True)
            )
        except CodedError as exc:
            raise UsageError(f"--tokenizer {folder}: {exc.message}") from None
        bos = tok.special_ids.get("bos")
        out["bos"] = "once" if bos is not None and leading(probe, bos) == 1 else "none"
        if asked[: len(bare)] == bare and len(asked) > len(bare):
            header = asked[len(bare) :]
            if think_ids is not None and think_ids[0] in header:
                header = header[: header.index(think_ids[0])]
            if header:
                out["assistant_header"] = header[:64]
    if think_ids is not None:
        out["think_token_ids"] = list(think_ids)
        mode = _thinking(shard_files, format, think_ids, tok, think_census)
        if mode is not None:
            out["thinking"] = mode
    return out


def _thinking(
    files: Sequence[Path], format: str, think: tuple[int, int], tok: Any, census: Any
) -> str | None:
    from ..checks.tokens import as_list
    from ..errors import ShardReadError
    from ..shards.reading import read_sample

    filled = []
    for path in list(files)[:CENSUS_SHARDS]:
        try:
            sample = read_sample(path, format, arrays=True)
        except ShardReadError:
            continue
        if sample.ids is not None:
            filled.append(census(as_list(sample.ids), think, tok)["filled"] > 0)
    if not filled:
        return None
    return "on" if all(filled) else "off" if not any(filled) else "mixed"
