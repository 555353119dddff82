"""Capture files: what the server fed the draft for one sequence, kept for offline checks.

One ``.safetensors`` file per sequence, named by the hash of its input ids:

    aux_hidden_states  [T, n_aux * H]   the draft's fc input, in the served dtype
    input_ids          [T] int64        the sequence sent

and one metadata entry, ``eagle_contract_capture``: a JSON object with ``engine``,
``version``, ``arch``, ``mode``, ``layer_ids`` (as sent to the engine), ``layers`` (the
canonical layers they resolve to), ``dtype``, ``hidden_size``, ``n_aux``, ``num_tokens``,
``ids_sha256``, ``source`` (``http`` or ``forward-hook``) and ``shard``. ``record`` and the
forward hook (``sglang_hooks``) write this layout; :class:`CaptureIndex` finds a file by the
ids it holds.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import CaptureFileError
from ..layers import Layer
from ..tree import files_matching

if TYPE_CHECKING:
    import torch

META_KEY = "eagle_contract_capture"
FORMAT_VERSION = 1
AUX_KEY, IDS_KEY = "aux_hidden_states", "input_ids"
SUFFIX = ".safetensors"
PREFIX = "capture_"
MAX_META_CHARS = 1 << 16  # the metadata entry (a capture's is under 2 KB)
MAX_HEADER_BYTES = 1 << 20  # the safetensors header: two tensors and the metadata
Default = TypeVar("Default")


def ids_key(input_ids: torch.Tensor | Sequence[int]) -> str:
    """sha256 of the ids as little-endian int64: the lookup key of a capture."""
    import torch

    values = torch.as_tensor(input_ids, dtype=torch.int64).reshape(-1).tolist()
    return hashlib.sha256(struct.pack(f"<{len(values)}q", *values)).hexdigest()


def plain(value: object) -> object:
    """A field as JSON holds it: tuples as lists, canonical layers as their names."""
    if isinstance(value, tuple):
        return [plain(x) for x in value]
    return str(value) if isinstance(value, Layer) else value


@dataclass(frozen=True)
class CaptureMeta:
    engine: str = "sglang"
    version: str | None = None
    arch: str | None = None
    mode: str = "unknown"
    layer_ids: tuple[int, ...] | None = None
    layers: tuple[Layer, ...] | None = None
    dtype: str = ""
    hidden_size: int | None = None
    n_aux: int | None = None
    num_tokens: int = 0
    ids_sha256: str = ""
    source: str = "http"
    shard: str = ""
    notes: tuple[str, ...] = ()

    def to_json(self) -> str:
        fields_ = {f.name: plain(getattr(self, f.name)) for f in fields(self)}
        return json.dumps({"format": FORMAT_VERSION, **fields_}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CaptureMeta:
        """The metadata entry as ``to_json`` writes it; ValueError for anything else."""
        if len(text) > MAX_META_CHARS:
            raise ValueError(f"{len(text)} characters (a capture's is under {MAX_META_CHARS})")
        try:
            d = json.loads(text)
        except RecursionError:
            raise ValueError("nested too deeply") from None
        if not isinstance(d, dict):
            raise ValueError("not a JSON object")
        if d.get("format", FORMAT_VERSION) != FORMAT_VERSION:
            raise ValueError(f"format {str(d['format'])[:20]}, this reader knows {FORMAT_VERSION}")
        ids = _list(d, "layer_ids", lambda x: type(x) is int and abs(x) < 2**31)
        layers = _list(d, "layers", lambda x: isinstance(x, str) and len(x) < 100)
        sha = _text(d, "ids_sha256", "")
        if sha and not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise ValueError("ids_sha256 is not a sha256 hex digest")
        return cls(
            engine=_text(d, "engine", "sglang"),
            version=_text(d, "version", None),
            arch=_text(d, "arch", None),
            mode=_text(d, "mode", "unknown"),
            layer_ids=None if ids is None else tuple(ids),
            layers=None if layers is None else tuple(Layer.parse(x) for x in layers),
            dtype=_text(d, "dtype", ""),
            hidden_size=_count(d, "hidden_size"),
            n_aux=_count(d, "n_aux"),
            num_tokens=_count(d, "num_tokens") or 0,
            ids_sha256=sha,
            source=_text(d, "source", "http"),
            shard=_text(d, "shard", ""),
            notes=tuple(_list(d, "notes", lambda x: isinstance(x, str)) or ()),
        )


def _text(d: dict[str, Any], key: str, default: Default) -> str | Default:
    value = d.get(key)
    if value is None:
        return default
    if not isinstance(value, str) or len(value) > 1000:
        raise ValueError(f"{key} is not a short string")
    return value


def _count(d: dict[str, Any], key: str) -> int | None:
    value = d.get(key)
    if value is not None and not (type(value) is int and 0 <= value < 2**40):
        raise ValueError(f"{key} {str(value)[:40]} is not a count")
    return value


def _list(d: dict[str, Any], key: str, ok: Callable[[Any], bool]) -> list[Any] | None:
    value = d.get(key)
    if value is not None and not (
        isinstance(value, list) and len(value) <= 1024 and all(ok(x) for x in value)
    ):
        raise ValueError(f"{key} {str(value)[:60]} is not a list of the right kind")
    return value


@dataclass(frozen=True)
class Capture:
    path: Path
    meta: CaptureMeta
    input_ids: torch.Tensor
    aux: torch.Tensor  # [T, n_aux * H]
    label: str = ""  # how reports name it; default the file name

    @property
    def name(self) -> str:
        return self.label or self.path.name

    def states(self, hidden_size: int) -> list[torch.Tensor]:
        """The aux concat split into [T, H] chunks, in the server's order."""
        width = int(self.aux.shape[-1])
        return [self.aux[:, j : j + hidden_size] for j in range(0, width, hidden_size)]

    def layer_of(self, position: int) -> str:
        layers = self.meta.layers
        if layers is None or position >= len(layers):
            return "layer unknown"
        return str(layers[position])


# -- Writing and reading ------------------------------------------------------------------


def write_capture(
    out_dir: Path, input_ids: torch.Tensor, aux: torch.Tensor, meta: CaptureMeta
) -> Path:
    """Write one capture file (named by the ids' hash) and return its path."""
    import dataclasses

    import torch
    from safetensors.torch import save_file

    ids = torch.as_tensor(input_ids, dtype=torch.int64).reshape(-1).contiguous()
    key = ids_key(ids)
    if aux.dim() != 2 or aux.shape[0] != ids.shape[0]:
        raise CaptureFileError(f"aux states {list(aux.shape)} do not match {ids.shape[0]} ids")
    meta = dataclasses.replace(
        meta,
        num_tokens=int(ids.shape[0]),
        ids_sha256=key,
        dtype=str(aux.dtype).removeprefix("torch."),
    )
    from ..outputs import atomic

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{PREFIX}{key[:16]}{SUFFIX}"
    with atomic(path, "") as tmp:  # a link in out_dir is replaced, never written through
        tensors = {AUX_KEY: aux.contiguous(), IDS_KEY: ids}
        save_file(tensors, str(tmp), metadata={META_KEY: meta.to_json()})
    return path


def read_capture(path: Path) -> Capture:
    """Read and validate one capture file. Raises :class:`CaptureFileError` (EC707) for
    anything that is not a capture as :func:`write_capture` writes it."""
    import torch

    raw, tensors = _open(path, tensors=True)
    try:
        meta = CaptureMeta.from_json(raw) if raw else CaptureMeta()
    except ValueError as exc:
        raise CaptureFileError(f"{path}: bad {META_KEY} metadata: {exc}") from None
    aux, ids = tensors[AUX_KEY], tensors[IDS_KEY]
    if not aux.is_floating_point() or aux.dim() != 2:
        raise CaptureFileError(
            f"{path}: {AUX_KEY} is {str(aux.dtype).removeprefix('torch.')} "
            f"{list(aux.shape)}, not [T, n_aux * H] floats"
        )
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool or ids.dim() != 1:
        raise CaptureFileError(
            f"{path}: {IDS_KEY} is {str(ids.dtype).removeprefix('torch.')} "
            f"{list(ids.shape)}, not [T] integers"
        )
    if aux.shape[0] != ids.shape[0] or meta.num_tokens not in (0, ids.shape[0]):
        raise CaptureFileError(
            f"{path}: {AUX_KEY} {list(aux.shape)} beside "
            f"{ids.shape[0]} input_ids (metadata: {meta.num_tokens})"
        )
    if meta.ids_sha256 and meta.ids_sha256 != ids_key(ids):
        raise CaptureFileError(f"{path}: input_ids do not hash to the recorded ids_sha256")
    return Capture(path, meta, ids, aux)


def check_small_header(path: Path, kind: str, whose: str) -> None:
    """Refuse, before safetensors parses it, anything but a regular file whose safetensors
    header is small enough to be ``kind``'s (a FIFO, a device or a huge header, unread)."""
    if not path.is_file():
        raise CaptureFileError(f"{path}: not a regular file")
    with path.open("rb") as fh:
        head = fh.read(8)
    size = int.from_bytes(head, "little") if len(head) == 8 else -1
    if not 2 <= size <= MAX_HEADER_BYTES:
        raise CaptureFileError(
            f"{path}: not {kind} (a safetensors header of "
            f"{size} bytes; {whose} is under {MAX_HEADER_BYTES})"
        )


def _open(path: Path, tensors: bool) -> tuple[str | None, dict[str, torch.Tensor]]:
    """The metadata entry and, when asked, the two tensors; EC707 for anything unreadable
    (the header is checked first: :func:`check_small_header`)."""
    from safetensors import SafetensorError, safe_open

    try:
        check_small_header(path, "a capture file", "a capture's")
        with safe_open(str(path), framework="pt") as f:
            raw = (f.metadata() or {}).get(META_KEY)
            if not tensors:
                return raw, {}
            missing = {AUX_KEY, IDS_KEY} - set(f.keys())
            if missing:
                hint = (
                    " (a forward-hook file without input_ids: add the draft's "
                    "model.embed_tokens to target_modules)"
                    if IDS_KEY in missing
                    else ""
                )
                raise CaptureFileError(f"{path}: no {', '.join(sorted(missing))}{hint}")
            return raw, {key: f.get_tensor(key) for key in (AUX_KEY, IDS_KEY)}
    except (SafetensorError, OSError, ValueError, TypeError, RuntimeError) as exc:
        raise CaptureFileError(f"{path}: not a readable safetensors file: {exc}") from None


@dataclass
class CaptureIndex:
    """Capture files found under a directory, looked up by the hash of the input ids."""

    root: Path | None
    by_key: dict[str, list[Path]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_key.values())

    def find(self, input_ids: torch.Tensor | Sequence[int]) -> Capture | None:
        """The capture of exactly these ids (the newest file when several), else None."""
        paths = self.by_key.get(ids_key(input_ids))
        if not paths:
            return None
        try:
            newest = max(paths, key=lambda p: p.stat().st_mtime)
        except OSError as exc:
            raise CaptureFileError(f"capture file gone since it was indexed: {exc}") from None
        return read_capture(newest)


def _key_of(path: Path) -> str:
    """The ids hash of a capture file, from its header only (no tensor is read)."""
    raw, _ = _open(path, tensors=False)
    if raw:
        try:
            key = CaptureMeta.from_json(raw).ids_sha256
        except ValueError as exc:
            raise CaptureFileError(f"{path}: bad {META_KEY} metadata: {exc}") from None
        if key:
            return key
    return ids_key(read_capture(path).input_ids)


def load_captures(root: Path | str | Iterable[Path | str]) -> CaptureIndex:
    """Index every ``*.safetensors`` capture file under ``root`` (a file, a folder, or several).

    Files that are not captures are listed in ``problems`` (rule EC707), not raised;
    a root that does not exist raises :class:`CaptureFileError`.
    """
    roots = [Path(root)] if isinstance(root, (str, Path)) else [Path(r) for r in root]
    index = CaptureIndex(roots[0] if len(roots) == 1 else None)
    for base in roots:
        if not base.exists():
            raise CaptureFileError(f"capture path {base} does not exist")
        try:
            named = files_matching(base, [f"*{SUFFIX}"], regular=False)
            files = sorted(named) if base.is_dir() else [base]
        except OSError as exc:
            index.problems.append(f"{base}: cannot list the capture files: {exc}")
            continue
        for path in files:
            try:
                index.by_key.setdefault(_key_of(path), []).append(path)
            except CaptureFileError as exc:
                index.problems.append(exc.message)
    return index
