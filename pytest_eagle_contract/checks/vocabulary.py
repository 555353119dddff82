"""The ``vocabulary`` family: where the draft's ``d2t``/``t2d`` came from and how much of
the data it covers.

SpecForge and speculators build the map the same way: count the target ids under
``loss_mask == 1``, keep the ``draft_vocab_size`` most frequent (ties by id; ids 0, 1, ...
fill a short count), sort them, and store ``d2t[i] = target_id - i`` (int64 offsets) and
``t2d`` as a bool mask over the target vocabulary. A map built from another tokenizer
revision, another corpus or a stale cache is consistent with itself (EC509 passes) and
wrong for the data: provenance is the tokenizer's fingerprint and the map's own hash,
recorded in ``training.draft``, and coverage is measured on the shards' loss-masked tokens,
byte and special tokens included (docs/draft-config.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..findings import Finding, finding, not_run
from .family import CheckFamily

if TYPE_CHECKING:
    import numpy as np

    from ..contract.model import Contract
    from .unit import Resources, Unit

KEY = "training.draft"
UNRECORDED_WARNING = 0.95  # with no floor recorded: a warning below it
UNRECORDED_ERROR = 0.5  # with no floor recorded: an error below it (no correct map holds so little)
MAX_SHARDS = 256  # the family reads at most this many of the run's shard files
_BYTE_TOKEN = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")


def read_maps(draft_dir: Path) -> tuple[np.ndarray[Any, Any] | None, np.ndarray[Any, Any] | None]:
    """``d2t`` (int64) and ``t2d`` (bool) from the draft's safetensors, each None if absent.
    Raises UsageError on a file that cannot be read."""
    import numpy as np
    from safetensors import SafetensorError, safe_open

    from ..errors import UsageError
    from ..models.draft import weight_files

    d2t = t2d = None
    folder = draft_dir if draft_dir.is_dir() else draft_dir.parent
    for file in weight_files(folder):
        try:
            with safe_open(str(file), framework="np") as f:
                for key in f.keys():
                    name = key.removeprefix("model.")
                    if name == "d2t":
                        d2t = np.asarray(f.get_tensor(key)).astype(np.int64).reshape(-1)
                    elif name == "t2d":
                        t2d = np.asarray(f.get_tensor(key)).astype(bool).reshape(-1)
        except (SafetensorError, OSError, ValueError, RuntimeError, TypeError) as exc:
            raise UsageError(f"draft {folder}: cannot read {file.name}: {exc}") from None
    return d2t, t2d


def d2t_sha256(d2t: np.ndarray[Any, Any]) -> str:
    """The map's fingerprint: sha256 of its int64 little-endian bytes."""
    import hashlib

    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(d2t, dtype="<i8").tobytes()).hexdigest()


def covered(
    d2t: np.ndarray[Any, Any] | None, t2d: np.ndarray[Any, Any] | None, targets: Any
) -> Any:
    """Which of ``targets`` (target ids) the draft vocabulary holds: ``t2d[id]`` or, without
    ``t2d``, membership in ``i + d2t[i]`` (no array as long as the largest id is made)."""
    import numpy as np

    if t2d is not None:
        inside = (targets >= 0) & (targets < t2d.size)
        hit = np.zeros(targets.size, dtype=bool)
        hit[inside] = t2d[targets[inside]]
        return hit
    assert d2t is not None
    with np.errstate(over="ignore"):
        mapped = np.arange(d2t.size, dtype=np.int64) + d2t
    return np.isin(targets, mapped)


def _tokens(contract: Contract | None) -> tuple[Any, str | None]:
    """The serving tokenizer folder read (or None) and its fingerprint (recorded or read)."""
    spec = contract.tokenizer if contract is not None else None
    if spec is None:
        return None, None
    folder = None
    if spec.path is not None:
        from ..errors import EagleContractError
        from ..models.tokenizer import read_tokenizer

        try:
            folder = read_tokenizer(spec.path)
        except EagleContractError:
            folder = None  # the tokenizer family reports it (EC330)
    sha = spec.files_sha256 or (folder.files_sha256 if folder is not None else None)
    return folder, sha


def _special_ids(contract: Contract | None, folder: Any) -> dict[int, str]:
    out: dict[int, str] = {}
    if folder is not None:
        out.update({i: text for text, i in folder.added_special.items()})
        for name, i in folder.special_ids.items():
            if i is not None:
                out.setdefault(i, folder.special.get(f"{name}_token", name))
    spec = contract.tokenizer if contract is not None else None
    if spec is not None:
        for name in ("bos", "eos", "pad"):
            i = getattr(spec, f"{name}_token_id")
            if i is not None:
                out.setdefault(i, f"{name} token")
    return out


def _byte_level_chars() -> set[str]:
    """The 256 characters byte-level BPE (GPT-2's ``bytes_to_unicode``) spells bytes with:
    printable Latin-1 bytes as themselves, the other 68 as chr(256 + n) in byte order."""
    kept = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    shifted = [b for b in range(256) if b not in kept]
    return {chr(b) for b in kept} | {chr(256 + n) for n in range(len(shifted))}


def _byte_ids(folder: Any) -> set[int]:
    """Byte tokens: sentencepiece byte fallback (``<0xHH>``) and byte-level BPE's 256
    single-character tokens. A vocabulary is byte-level only where it holds all 256 of
    them (byte-level BPE starts from that alphabet): a character-level or word-level
    vocabulary's ``a`` or ``!`` is an ordinary token, not a byte."""
    if folder is None:
        return set()
    vocab: dict[str, int] = folder.backend.get_vocab(with_added_tokens=False)
    out = {i for text, i in vocab.items() if _BYTE_TOKEN.match(text)}
    if not out:
        chars = _byte_level_chars()
        singles = {text: i for text, i in vocab.items() if len(text) == 1 and text in chars}
        if len(singles) == len(chars):
            out = set(singles.values())
    return out


def _ints(values: Any, comparable: Any) -> Any:
    """Stored, torch or listed ids as one int64 numpy array (None: absent or not numbers)."""
    import numpy as np

    if values is None:
        return None
    if hasattr(values, "is_floating_point"):  # Stored or a torch tensor
        return comparable(values)
    try:
        return np.asarray(values, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError, OverflowError):
        return None


def _masked_targets(
    contract: Contract | None, shard_paths: Sequence[Path], out: list[Finding]
) -> Any:
    """Every loss-masked token id of the shards (one int64 array), unreadable ones noted."""
    import numpy as np

    from ..errors import ShardReadError
    from ..shards.reading import comparable, read_sample

    fmt = contract.training.format if contract is not None and contract.training else "auto"
    parts = []
    for path in shard_paths:
        try:
            sample = read_sample(path, fmt, arrays=True)
        except ShardReadError as exc:
            out.append(not_run("vocabulary", f"{exc.code} {exc.message}", file=str(path)))
            continue
        ids, mask = _ints(sample.ids, comparable), _ints(sample.mask, comparable)
        if ids is None or mask is None or ids.shape != mask.shape:
            why = "no input_ids or loss_mask" if ids is None or mask is None else "lengths differ"
            out.append(not_run("vocabulary", f"coverage skips it: {why}", file=str(path)))
            continue
        parts.append(ids[mask != 0])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def check_vocabulary(
    draft_dir: Path,
    *,
    contract: Contract | None,
    shard_paths: Sequence[Path] = (),
    coverage: bool = False,
) -> list[Finding]:
    """Findings about the draft vocabulary map's provenance and its coverage of the
    shards' loss-masked tokens (``coverage``: a map whose coverage could not be measured,
    no shard or no loss-masked token, is said to be unchecked: EC009)."""
    import numpy as np

    from ..errors import EagleContractError

    out: list[Finding] = []
    try:
        d2t, t2d = read_maps(draft_dir)
    except EagleContractError as exc:
        return [not_run("vocabulary", exc, contract=contract, key="serving.draft_config")]
    if d2t is None and t2d is None:
        return []  # the whole target vocabulary: nothing to cover, nothing to trace
    spec = contract.training.draft if contract is not None and contract.training else None
    folder, serving_sha = _tokens(contract)
    if d2t is not None and spec is not None and spec.d2t_sha256:
        found = d2t_sha256(d2t)
        if found != spec.d2t_sha256:
            out.append(
                finding(
                    "EC931",
                    "the draft's d2t is not the map recorded in the contract",
                    contract=contract,
                    key=f"{KEY}.d2t_sha256",
                    expected=spec.d2t_sha256,
                    found=found,
                    hint="the exported map was rebuilt (another corpus, tokenizer or a stale "
                    "cache): export the map the draft was trained with, or retrain",
                )
            )
    if spec is not None and spec.vocab_tokenizer_sha256 and serving_sha:
        if spec.vocab_tokenizer_sha256 != serving_sha:
            out.append(
                finding(
                    "EC930",
                    "d2t/t2d were built with another tokenizer than the one served",
                    contract=contract,
                    key=f"{KEY}.vocab_tokenizer_sha256",
                    expected=serving_sha,
                    found=spec.vocab_tokenizer_sha256,
                    hint="rebuild the vocabulary map from token counts made with the serving "
                    "tokenizer (and retrain the draft's lm_head on it)",
                )
            )
    if (
        contract is not None
        and d2t is not None
        and (spec is None or not (spec.d2t_sha256 or spec.vocab_tokenizer_sha256))
    ):
        out.append(
            finding(
                "EC932",
                "the draft has a compressed vocabulary and the contract records nowhere "
                "it came from",
                contract=contract,
                key=KEY,
                found=f"d2t_sha256 {d2t_sha256(d2t)}",
                hint=f"record training.draft.d2t_sha256: {d2t_sha256(d2t)} and "
                "vocab_tokenizer_sha256 (the tokenizer the counts were made with)",
                severity="warning",
            )
        )
    if not shard_paths:
        if coverage:
            out.append(_uncovered(contract, "no shards: set training.shards or pass shard paths"))
        return out
    targets = _masked_targets(contract, shard_paths, out)
    if targets.size == 0:
        if coverage:
            why = f"no loss-masked token in the {len(shard_paths)} shard(s) read"
            out.append(_uncovered(contract, why))
        return out
    hit = covered(d2t, t2d, targets)
    share = float(hit.mean())
    recorded = spec.min_vocab_coverage if spec is not None else None
    warned = False  # no floor recorded and above half: the coverage is said, not judged
    if recorded is not None:
        floor, said = recorded, f"{recorded:.0%}"
    elif share < UNRECORDED_ERROR:
        floor, said = UNRECORDED_ERROR, "half (no correct map holds so little)"
    else:
        floor, said, warned = UNRECORDED_WARNING, f"the default {UNRECORDED_WARNING:.0%}", True
    if share < floor:
        out.append(
            finding(
                "EC933",
                f"the draft vocabulary holds {share:.1%} of the shards' {targets.size} "
                f"loss-masked tokens, below {said}",
                contract=contract,
                key=f"{KEY}.min_vocab_coverage",
                expected=f">= {floor}",
                found=round(share, 4),
                hint="a correct map's coverage is the pipeline's own, not a default: record "
                "the ratio your trainer printed when it built the map (SpecForge's \"top N "
                'token frequency ratio") less 0.05 as training.draft.min_vocab_coverage, '
                "which makes this an error"
                if warned
                else "rebuild d2t/t2d from these shards' token counts (or a larger "
                "draft_vocab_size): a token outside the draft vocabulary is never drafted",
                severity="warning" if warned else "error",
            )
        )
    missed = np.unique(targets[~hit])
    specials = _special_ids(contract, folder)
    lost = [int(i) for i in missed if int(i) in specials]
    if lost:
        names = ", ".join(f"{i} ({specials[i]})" for i in lost[:8])
        out.append(
            finding(
                "EC934",
                f"special tokens the data trains on are outside the draft vocabulary: {names}",
                contract=contract,
                key=KEY,
                found=lost[:8],
                hint="the draft can never propose them (an end of turn is never drafted): "
                "build the map with the special tokens forced in",
            )
        )
    byte_ids = _byte_ids(folder)
    lost_bytes = [int(i) for i in missed if int(i) in byte_ids]
    if lost_bytes:
        count = int(np.isin(targets, lost_bytes).sum())
        out.append(
            finding(
                "EC935",
                f"{len(lost_bytes)} byte tokens the data trains on ({count} occurrences) are "
                "outside the draft vocabulary",
                contract=contract,
                key=KEY,
                found=lost_bytes[:8],
                hint="text in other scripts or emoji falls back to byte tokens: build the "
                "map with the byte tokens forced in",
                severity="warning",
            )
        )
    return out


def _uncovered(contract: Contract | None, why: str) -> Finding:
    return not_run("vocabulary's coverage", why, contract=contract, key=KEY)


def _run(runner: Resources, unit: Unit) -> list[Finding]:
    from ..errors import UsageError
    from ..shards.discovery import labelled

    contract = unit.contract
    serving, training = contract.serving, contract.training
    if serving is None or serving.draft_config is None:
        return [
            not_run(
                "vocabulary",
                "the contract names no serving.draft_config",
                contract=contract,
                key="serving",
            )
        ]
    draft = serving.draft_config
    paths: list[Path] = []
    if training is not None and unit.roots:  # the shards the command names, else the contract's
        try:
            paths = [p for p, _ in labelled(unit.roots, training.format)][:MAX_SHARDS]
        except UsageError as exc:
            return [*check_vocabulary(draft, contract=contract), _uncovered(contract, str(exc))]
    return check_vocabulary(draft, contract=contract, shard_paths=paths, coverage=True)


FAMILY = CheckFamily(
    "vocabulary",
    "contract",
    "the draft's d2t/t2d: the tokenizer and map recorded, coverage of the shards' "
    "loss-masked tokens (byte and special tokens included)",
    codes=("EC930", "EC931", "EC932", "EC933", "EC934", "EC935"),
    keys=("training.draft", "serving.draft_config"),
    run=_run,
    needs=frozenset({"serving"}),
    default=False,
)
