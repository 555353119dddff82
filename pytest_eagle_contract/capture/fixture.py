"""The ``eagle_capture`` fixture's core: the server's aux states for one shard."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import NoCapture, ShardReadError
from .files import CaptureIndex, load_captures
from .record import aux_count, token_ids

NO_SOURCE = (
    "no capture source: pass --eagle-captures DIR (capture files, as `eagle-contract record` "
    "writes them) or --eagle-sglang-url URL (a running server)"
)

if TYPE_CHECKING:
    import torch

    from ..contract.model import Contract


def aux_for_shard(
    contract: Contract,
    path: Path,
    url: str | None = None,
    captures: Path | Sequence[Path] | CaptureIndex | None = None,
    timeout: float = 60.0,
) -> torch.Tensor:
    """The server's aux states ``[T, n_aux * H]`` for the shard at ``path``.

    Live from ``url`` when given (errors raise
    :class:`~pytest_eagle_contract.errors.CaptureError`), else from the capture files under
    ``captures``; raises :class:`NoCapture` with the reason when neither has it.
    """
    from ..shards.reading import read_sample
    from .sglang_client import capture

    if not url and (captures is None or (isinstance(captures, list | tuple) and not captures)):
        raise NoCapture(NO_SOURCE)  # said before the shard is read: nothing to compare with
    fmt = contract.training.format if contract.training else "auto"
    try:
        ids = read_sample(path, fmt).input_ids
    except ShardReadError as exc:
        raise NoCapture(f"{path}: {exc.code} {exc.message}") from None
    sent = token_ids(ids)
    if ids is None or sent is None:
        raise NoCapture(f"{path}: the shard has no usable input_ids")
    if url:
        return capture(url, sent, aux_count(contract), contract.target.hidden_size, timeout)
    assert captures is not None
    index = captures if isinstance(captures, CaptureIndex) else load_captures(captures)
    found = index.find(ids)
    if found is None:
        where = index.root or "the capture files"
        raise NoCapture(f"no capture of {path.name}'s {ids.shape[0]} input ids in {where}")
    return found.aux
