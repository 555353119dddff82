"""The draft side: its weight files and what they say about its fc input (the config is
``engines/draft_config.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError


def weight_files(directory: Path) -> list[Path]:
    """The draft's ``*.safetensors`` files; one that is not a regular file (a FIFO would
    block the reader, a device never ends) is a usage error."""
    files = sorted(directory.glob("*.safetensors"))
    for file in files:
        if not file.is_file():
            raise UsageError(f"draft {directory}: {file.name} is not a regular file")
    return files


@dataclass(frozen=True)
class DraftWeights:
    path: Path
    fc_shape: tuple[int, ...] | None
    d2t_problem: str | None


def read_draft_weights(
    directory: Path, vocab_size: int | None, draft_vocab_size: int | None
) -> DraftWeights | None:
    """fc.weight's shape and d2t/t2d consistency from the draft's safetensors files."""
    files = weight_files(directory)
    if not files:
        return None
    from safetensors import SafetensorError, safe_open

    fc_shape: tuple[int, ...] | None = None
    d2t = t2d = None
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as f:
                for key in f.keys():
                    name = key.removeprefix("model.")
                    if name == "fc.weight":
                        fc_shape = tuple(f.get_slice(key).get_shape())
                    elif name == "d2t":
                        d2t = f.get_tensor(key)
                    elif name == "t2d":
                        t2d = f.get_tensor(key)
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise UsageError(f"draft {directory}: cannot read {file.name}: {exc}") from None
    return DraftWeights(
        files[0].parent, fc_shape, _vocab_problem(d2t, t2d, vocab_size, draft_vocab_size)
    )


def _vocab_problem(
    d2t: Any, t2d: Any, vocab_size: int | None, draft_vocab_size: int | None
) -> str | None:
    import torch

    if d2t is None and t2d is None:
        return None
    if d2t is None or t2d is None:
        return "only one of d2t and t2d is present"
    if draft_vocab_size is not None and d2t.numel() != draft_vocab_size:
        return f"d2t has {d2t.numel()} entries, draft_vocab_size is {draft_vocab_size}"
    if vocab_size is not None and t2d.numel() != vocab_size:
        return f"t2d has {t2d.numel()} entries, the target vocab_size is {vocab_size}"
    if int(t2d.sum()) != d2t.numel():
        return f"t2d marks {int(t2d.sum())} target tokens, d2t maps {d2t.numel()}"
    target_ids = torch.arange(d2t.numel()) + d2t.long()
    if bool(((target_ids < 0) | (target_ids >= t2d.numel())).any()):
        return "d2t maps draft tokens outside the target vocabulary"
    if not bool(t2d.bool()[target_ids].all()):
        bad = int((~t2d.bool()[target_ids]).nonzero()[0, 0])
        return f"draft token {bad} maps to target {int(target_ids[bad])}, which t2d does not mark"
    return None
