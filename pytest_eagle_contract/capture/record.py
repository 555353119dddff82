"""Recording from a live server: one capture file per shard, with the layers it resolves to."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EagleContractError, ShardReadError, UsageError
from ..layers import Layer
from .files import CaptureMeta, write_capture

if TYPE_CHECKING:
    import torch

    from ..contract.model import Contract
    from .sglang_client import ServerInfo


def server_aux_ids(contract: Contract, info: ServerInfo | None) -> tuple[int, ...] | None:
    """The aux layer ids the server was given: its own flag, else the contract's serving side.

    ``--return-aux-hidden-state-layer-ids`` is visible in /server_info (without it, aux
    mode captures the model's default: None); a draft's ``eagle_aux_hidden_state_layer_ids``
    is not, so the contract's ``serving`` says it.
    """
    if info is not None and (info.layer_ids is not None or info.mode == "aux"):
        return info.layer_ids  # aux mode without the flag: the model's EAGLE-3 default
    from ..engines.resolve import engine_aux_ids_or_none

    ids = engine_aux_ids_or_none(contract.serving, engine="sglang")
    return ids if ids is not None or contract.serving is None else contract.serving.aux_layer_ids


def resolve_layers(
    contract: Contract, arch: str | None, version: str | None, ids: Sequence[int] | None
) -> tuple[tuple[Layer, ...] | None, str]:
    """The canonical layers SGLang ``version`` captures for ``ids`` on ``arch`` (or why not).

    Without a version (a forward-hook file written where sglang's version was not known),
    every release ``serving.version`` covers is tried; they must agree.
    """
    from ..engines.resolve import resolve, sglang_versions

    serving = contract.serving
    arch = arch or (serving.arch if serving else None) or contract.target.arch
    if not arch:
        return None, "layers unresolved: the target architecture is unknown"
    try:
        versions = (
            [version]
            if version
            else sglang_versions(
                serving.version if serving and serving.engine == "sglang" else None
            )
        )
        found = {
            resolve(
                "sglang",
                contract.target.num_hidden_layers,
                None if ids is None else list(ids),
                arch,
                v,
            ).layers
            for v in versions
        }
    except EagleContractError as exc:
        return None, f"layers unresolved: {exc}"
    if len(found) != 1:
        return None, (
            f"layers unresolved: sglang {versions[0]}..{versions[-1]} capture "
            "different layers for these ids; record the server's version"
        )
    source = f"sglang {version}" if version else f"sglang {', '.join(versions)} (assumed)"
    return found.pop(), f"{source} on {arch}, ids {None if ids is None else list(ids)}"


def served_meta(contract: Contract, info: ServerInfo) -> CaptureMeta:
    """What a live server feeds the draft, as far as it says: its version and mode, the aux
    ids it was given and the layers they resolve to (how, in ``notes``)."""
    ids_sent = server_aux_ids(contract, info)
    layers, source = resolve_layers(contract, info.arch, info.version, ids_sent)
    return CaptureMeta(
        version=info.version,
        arch=info.arch,
        mode=info.mode,
        layer_ids=ids_sent,
        layers=layers,
        hidden_size=contract.target.hidden_size,
        n_aux=aux_count(contract),
        notes=(source, f"server mode: {info.mode}"),
    )


def aux_count(contract: Contract) -> int:
    """How many aux states the draft's fc takes: the contract's fc input."""
    if contract.training is None:
        raise EagleContractError(f"{contract.path}: the contract has no 'training' section")
    return len(contract.training.fc_input)


def token_ids(ids: torch.Tensor | None) -> list[int] | None:
    """A shard's input ids as a list to send, or None when they are not token ids (not an
    integer tensor, empty, or out of int32 range: the structure check reports those)."""
    import torch

    if (
        not isinstance(ids, torch.Tensor)
        or ids.is_floating_point()
        or ids.is_complex()
        or ids.dtype == torch.bool
    ):
        return None
    try:
        flat = ids.detach().to_dense().reshape(-1).to(torch.int64)
        if flat.numel() == 0 or int(flat.min()) < 0 or int(flat.max()) >= 2**31:
            return None
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        return None  # sparse, quantized, meta: not ids a shard writer stores
    return [int(i) for i in flat.tolist()]


def record(
    url: str, shard_paths: Iterable[Path], contract: Contract, out_dir: Path, timeout: float = 60.0
) -> list[Path]:
    """Capture what the server feeds the draft for each shard's input_ids; one file each.

    Raises :class:`~pytest_eagle_contract.errors.CaptureError` (EC702-EC705) at the first shard
    the server cannot answer, :class:`UsageError` for a bad URL, timeout or output folder,
    and :class:`EagleContractError` for an unreadable shard.
    """
    from ..shards.reading import read_sample
    from .sglang_client import capture, server_info, use_server

    url = use_server(url, timeout)
    paths = list(shard_paths)
    _check_out(out_dir, paths)
    info = server_info(url, timeout=min(timeout, 10.0))
    fmt = contract.training.format if contract.training else "auto"
    served = replace(served_meta(contract, info), arch=info.arch or contract.target.arch)
    written: list[Path] = []
    for path in paths:
        try:
            sample = read_sample(path, fmt)
        except ShardReadError as exc:
            raise EagleContractError(f"{path}: {exc.code} {exc.message}") from None
        raw, ids = sample.input_ids, token_ids(sample.input_ids)
        if raw is None or ids is None:
            raise EagleContractError(f"{path}: the shard has no usable input_ids")
        aux = capture(url, ids, aux_count(contract), contract.target.hidden_size, timeout)
        meta = replace(served, shard=path.name)
        try:
            written.append(write_capture(out_dir, raw, aux, meta))
        except OSError as exc:
            raise UsageError(f"-o {out_dir}: cannot write a capture file: {exc}") from None
    return written


def _check_out(out_dir: Path, shards: list[Path]) -> None:
    """Capture files go to a folder of their own: never over a shard or beside one."""
    out = out_dir.resolve()
    if out.exists() and not out.is_dir():
        raise UsageError(f"-o {out_dir} is a file, not a folder")
    for shard in shards:
        if out in (shard.resolve(), shard.resolve().parent):
            raise UsageError(
                f"-o {out_dir}: the folder of shard {shard.name}; write the "
                "capture files to a folder of their own"
            )
