"""Capture files: what the server fed the draft for one sequence, kept for offline checks.

One ``.safetensors`` file per sequence, named by the hash of its input ids:

    aux_hidden_states  [T, n_aux * H]   the draft's fc input, in the served dtype
    input_ids          [T] int64        the sequence sent

and one metadata entry, ``eagle_contract_capture``: a JSON object with ``engine``,
``version``, ``arch``, ``mode``, ``layer_ids`` (as sent to the engine), ``layers`` (the
canonical layers they resolve to), ``dtype``, ``hidden_size``, ``n_aux``, ``num_tokens``,
``ids_sha256``, ``source`` (``http`` or ``forward-hook``) and ``shard``. The forward hook
(``sglang_hooks``) writes the same layout. ``verify_against_capture`` compares a shard's
fc-input slots with the server's states, position by position.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..contract.model import Contract
from ..errors import CaptureFileError, EagleContractError, NoCapture
from ..findings import Finding
from ..layers import Layer

if TYPE_CHECKING:
    import torch

    from ..checks.shard_checks import Shard
    from .sglang_client import ServerInfo

META_KEY = "eagle_contract_capture"
FORMAT_VERSION = 1
AUX_KEY, IDS_KEY = "aux_hidden_states", "input_ids"
SUFFIX = ".safetensors"
PREFIX = "capture_"
# A shard slot "equals" a server state when the median per-token relative L2 error is at
# most this: bf16 rounding alone is ~0.3 %, another kernel or batch shape a few tenths of a
# percent more; one layer of a trained model moves the residual by far more.
RTOL = 0.03
_ROWS = 256  # rows compared at a time (float32 working set ~ 256 * H * 8 bytes)




def ids_key(input_ids: torch.Tensor | Sequence[int]) -> str:
    """sha256 of the ids as little-endian int64: the lookup key of a capture."""
    import torch

    values = torch.as_tensor(input_ids, dtype=torch.int64).reshape(-1).tolist()
    return hashlib.sha256(struct.pack(f"<{len(values)}q", *values)).hexdigest()


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
        return json.dumps({
            "format": FORMAT_VERSION, "engine": self.engine, "version": self.version,
            "arch": self.arch, "mode": self.mode,
            "layer_ids": None if self.layer_ids is None else list(self.layer_ids),
            "layers": None if self.layers is None else [str(x) for x in self.layers],
            "dtype": self.dtype, "hidden_size": self.hidden_size, "n_aux": self.n_aux,
            "num_tokens": self.num_tokens, "ids_sha256": self.ids_sha256,
            "source": self.source, "shard": self.shard, "notes": list(self.notes)},
            sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CaptureMeta:
        d = json.loads(text)
        if not isinstance(d, dict):
            raise ValueError("metadata is not a JSON object")
        ids, layers = d.get("layer_ids"), d.get("layers")
        return cls(
            engine=str(d.get("engine", "sglang")), version=d.get("version"), arch=d.get("arch"),
            mode=str(d.get("mode", "unknown")),
            layer_ids=None if ids is None else tuple(int(i) for i in ids),
            layers=None if layers is None else tuple(Layer.parse(x) for x in layers),
            dtype=str(d.get("dtype", "")), hidden_size=d.get("hidden_size"),
            n_aux=d.get("n_aux"), num_tokens=int(d.get("num_tokens", 0)),
            ids_sha256=str(d.get("ids_sha256", "")), source=str(d.get("source", "http")),
            shard=str(d.get("shard", "")), notes=tuple(d.get("notes", ())))


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
        return [self.aux[:, j:j + hidden_size] for j in range(0, width, hidden_size)]

    def layer_of(self, position: int) -> str:
        layers = self.meta.layers
        if layers is None or position >= len(layers):
            return "layer unknown"
        return str(layers[position])


# -- Writing and reading ------------------------------------------------------------------


def write_capture(out_dir: Path, input_ids: torch.Tensor, aux: torch.Tensor,
                  meta: CaptureMeta) -> Path:
    """Write one capture file (named by the ids' hash) and return its path."""
    import dataclasses

    import torch
    from safetensors.torch import save_file

    ids = torch.as_tensor(input_ids, dtype=torch.int64).reshape(-1).contiguous()
    key = ids_key(ids)
    if aux.dim() != 2 or aux.shape[0] != ids.shape[0]:
        raise CaptureFileError(f"aux states {list(aux.shape)} do not match {ids.shape[0]} ids")
    meta = dataclasses.replace(meta, num_tokens=int(ids.shape[0]), ids_sha256=key,
                               dtype=str(aux.dtype).removeprefix("torch."))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{PREFIX}{key[:16]}{SUFFIX}"
    save_file({AUX_KEY: aux.contiguous(), IDS_KEY: ids}, str(path), metadata={
        META_KEY: meta.to_json()})
    return path


def read_capture(path: Path) -> Capture:
    """Read and validate one capture file. Raises :class:`CaptureFileError`."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            raw = (f.metadata() or {}).get(META_KEY)
            keys = set(f.keys())
            missing = {AUX_KEY, IDS_KEY} - keys
            if missing:
                hint = (" (a forward-hook file without input_ids: add the draft's "
                        "model.embed_tokens to target_modules)" if IDS_KEY in missing else "")
                raise CaptureFileError(f"{path}: no {', '.join(sorted(missing))}{hint}")
            aux, ids = f.get_tensor(AUX_KEY), f.get_tensor(IDS_KEY)
    except (SafetensorError, OSError) as exc:
        raise CaptureFileError(f"{path}: not a readable safetensors file: {exc}") from None
    try:
        meta = CaptureMeta.from_json(raw) if raw else CaptureMeta()
    except (ValueError, TypeError) as exc:
        raise CaptureFileError(f"{path}: bad {META_KEY} metadata: {exc}") from None
    ids = ids.reshape(-1)
    if aux.dim() != 2 or aux.shape[0] != ids.shape[0]:
        raise CaptureFileError(f"{path}: {AUX_KEY} {list(aux.shape)} beside "
                               f"{ids.shape[0]} input_ids")
    if meta.ids_sha256 and meta.ids_sha256 != ids_key(ids):
        raise CaptureFileError(f"{path}: input_ids do not hash to the recorded ids_sha256")
    return Capture(path, meta, ids, aux)


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
        newest = max(paths, key=lambda p: p.stat().st_mtime)
        return read_capture(newest)


def _key_of(path: Path) -> str:
    """The ids hash of a capture file, from its header only (no tensor is read)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        raw = (f.metadata() or {}).get(META_KEY)
    if raw:
        key = str(json.loads(raw).get("ids_sha256") or "")
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
        files = [base] if base.is_file() else sorted(base.rglob(f"*{SUFFIX}"))
        for path in files:
            try:
                index.by_key.setdefault(_key_of(path), []).append(path)
            except (CaptureFileError, ValueError, OSError, Exception) as exc:
                index.problems.append(f"{path}: {exc}")
    return index


# -- Recording from a live server -------------------------------------------------------


def serving_ids(contract: Contract, info: ServerInfo | None) -> tuple[int, ...] | None:
    """The aux layer ids the server was given: its own flag, else the contract's serving side.

    ``--return-aux-hidden-state-layer-ids`` is visible in /server_info (without it, aux
    mode captures the model's default: None); a draft's ``eagle_aux_hidden_state_layer_ids``
    is not, so the contract's ``serving`` says it.
    """
    if info is not None and (info.layer_ids is not None or info.mode == "aux"):
        return info.layer_ids  # aux mode without the flag: the model's EAGLE-3 default
    serving = contract.serving
    if serving is None:
        return None
    if serving.draft_config is not None:
        from ..models.draft import read_draft_config

        try:
            ids = read_draft_config(serving.draft_config).ids_for("sglang")
        except EagleContractError:
            ids = None
        if ids is not None:
            return ids
    return serving.aux_layer_ids


def resolve_layers(contract: Contract, arch: str | None, version: str | None,
                   ids: Sequence[int] | None) -> tuple[tuple[Layer, ...] | None, str]:
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
        versions = [version] if version else sglang_versions(
            serving.version if serving and serving.engine == "sglang" else None)
        found = {resolve("sglang", contract.target.num_hidden_layers,
                         None if ids is None else list(ids), arch, v).layers
                 for v in versions}
    except EagleContractError as exc:
        return None, f"layers unresolved: {exc}"
    if len(found) != 1:
        return None, (f"layers unresolved: sglang {versions[0]}..{versions[-1]} capture "
                      "different layers for these ids; record the server's version")
    source = f"sglang {version}" if version else f"sglang {', '.join(versions)} (assumed)"
    return found.pop(), f"{source} on {arch}, ids {None if ids is None else list(ids)}"


def _n_aux(contract: Contract) -> int:
    if contract.training is None:
        raise EagleContractError(f"{contract.path}: the contract has no 'training' section")
    return len(contract.training.fc_input)


def record(url: str, shard_paths: Iterable[Path], contract: Contract, out_dir: Path,
           timeout: float = 60.0) -> list[Path]:
    """Capture what the server feeds the draft for each shard's input_ids; one file each.

    Raises :class:`~pytest_eagle_contract.capture.sglang_client.CaptureError` (EC702-EC705) at the
    first shard the server cannot answer, and :class:`EagleContractError` for an
    unreadable shard.
    """
    from ..errors import ShardReadError
    from ..shards.reading import read_sample
    from .sglang_client import capture, server_info

    info = server_info(url, timeout=min(timeout, 10.0))
    fmt = contract.training.format if contract.training else "auto"
    hidden, n_aux = contract.target.hidden_size, _n_aux(contract)
    ids_sent = serving_ids(contract, info)
    layers, source = resolve_layers(contract, info.arch, info.version, ids_sent)
    notes = [source, f"server mode: {info.mode}"]
    written: list[Path] = []
    for path in shard_paths:
        try:
            sample = read_sample(path, fmt)
        except ShardReadError as exc:
            raise EagleContractError(f"{path}: {exc.code} {exc.message}") from None
        ids = sample.input_ids
        if ids is None:
            raise EagleContractError(f"{path}: the shard has no input_ids")
        aux = capture(url, [int(i) for i in ids.tolist()], n_aux, hidden, timeout)
        meta = CaptureMeta(
            version=info.version, arch=info.arch or contract.target.arch, mode=info.mode,
            layer_ids=ids_sent, layers=layers, hidden_size=hidden, n_aux=n_aux, source="http",
            shard=path.name, notes=tuple(notes))
        written.append(write_capture(out_dir, ids, aux, meta))
    return written


# -- Verifying a shard against a capture ------------------------------------------------


def _errors(slot: torch.Tensor, state: torch.Tensor) -> tuple[float, float]:
    """(median per-token relative L2 error, mean cosine) of ``slot`` against ``state``."""
    import torch

    rel: list[torch.Tensor] = []
    cos: list[torch.Tensor] = []
    for start in range(0, int(slot.shape[0]), _ROWS):
        a = slot[start:start + _ROWS].to(torch.float32)
        b = state[start:start + _ROWS].to(torch.float32)
        ref = b.norm(dim=-1).clamp_min(1e-12)
        rel.append((a - b).norm(dim=-1) / ref)
        cos.append(torch.nn.functional.cosine_similarity(a, b, dim=-1))
    if not rel:
        return math.nan, math.nan
    err = torch.cat(rel)
    err = torch.where(torch.isfinite(err), err, torch.full_like(err, math.inf))
    return float(err.median()), float(torch.cat(cos).nan_to_num(0.0).mean())


@dataclass(frozen=True)
class Match:
    """What one fc position of a shard equals among the server's positions."""

    position: int
    slot: int
    equals: int | None  # the server position, or None
    closest: int
    error: float
    cosine: float
    table: tuple[float, ...]  # relative error against every server position


def match_positions(slots: Sequence[torch.Tensor], states: Sequence[torch.Tensor],
                    fc_input: Sequence[int], rtol: float = RTOL) -> list[Match]:
    """For each fc position, the server position its slot equals (within ``rtol``), if any."""
    out = []
    for pos, (slot_index, slot) in enumerate(zip(fc_input, slots)):
        scores = [_errors(slot, state) for state in states]
        errors = tuple(e for e, _ in scores)
        closest = min(range(len(errors)), key=lambda j: errors[j])
        err, cosine = scores[closest]
        out.append(Match(pos, slot_index, closest if err <= rtol else None, closest, err,
                         cosine, errors))
    return out


def _finding(contract: Contract, shard: Shard, code: str, message: str, **kw: Any) -> Finding:
    return Finding(code, message, file=shard.label, contract=str(contract.path),
                   line=contract.line_of("training.fc_input"), **kw)


def verify_against_capture(contract: Contract, shard: Shard, index: CaptureIndex,
                           rtol: float = RTOL) -> list[Finding]:
    """Compare each fc-input slot of ``shard`` with the server's state at that position.

    Findings: EC701 per position whose slot is not the server's state there (naming the
    server position it does equal, if any), EC704 when the capture holds another number
    of states, EC706 (warning) when no capture has the shard's input_ids, EC707 when the
    capture file is broken. A shard that cannot be read or split gives no findings here
    (the structure check reports it).
    """
    spec = contract.training
    sample = shard.sample
    if spec is None or sample is None or sample.input_ids is None or shard.split_problems:
        return []
    ids = sample.input_ids
    try:
        cap = index.find(ids)
    except CaptureFileError as exc:
        return [_finding(contract, shard, "EC707", str(exc))]
    if cap is None:
        where = f" in {index.root}" if index.root else ""
        return [_finding(
            contract, shard, "EC706", f"no capture of this shard's {ids.shape[0]} input ids"
            f"{where}", severity="warning", found=f"ids sha256 {ids_key(ids)[:16]}",
            hint="record one: eagle-contract record CONTRACT SHARD --sglang-url URL "
                 f"--out {index.root or 'DIR'}")]
    return compare(contract, shard, cap, rtol)


_INFO: dict[str, ServerInfo] = {}  # server_info per URL, asked once per process


def verify_live(contract: Contract, shard: Shard, url: str, timeout: float = 60.0,
                rtol: float = RTOL) -> list[Finding]:
    """As :func:`verify_against_capture`, asking the server at ``url`` now.

    A server that cannot answer gives one finding with its code (EC702-EC705), located at
    the contract's ``serving`` key.
    """
    import dataclasses

    from ..errors import CaptureError
    from .sglang_client import capture, server_info

    sample = shard.sample
    if contract.training is None or sample is None or sample.input_ids is None:
        return []
    ids = sample.input_ids
    try:
        if url not in _INFO:
            _INFO[url] = server_info(url, timeout=min(timeout, 10.0))
        info = _INFO[url]
        aux = capture(url, [int(i) for i in ids.tolist()], _n_aux(contract),
                      contract.target.hidden_size, timeout)
    except CaptureError as exc:
        return [dataclasses.replace(
            _finding(contract, shard, exc.code, exc.message, hint=exc.hint),
            line=contract.line_of("serving"))]
    ids_sent = serving_ids(contract, info)
    layers, _ = resolve_layers(contract, info.arch, info.version, ids_sent)
    meta = CaptureMeta(version=info.version, arch=info.arch, mode=info.mode,
                       layer_ids=ids_sent, layers=layers, n_aux=_n_aux(contract),
                       hidden_size=contract.target.hidden_size)
    return compare(contract, shard, Capture(Path(), meta, ids, aux,
                                                 label=f"live from {info.url}"), rtol)


def compare(contract: Contract, shard: Shard, cap: Capture,
            rtol: float = RTOL) -> list[Finding]:
    """EC701 / EC704 findings of ``shard``'s fc input against one capture of its ids."""
    spec = contract.training
    if spec is None or shard.sample is None or shard.split_problems:
        return []
    cap = _with_layers(contract, cap)
    hidden = contract.target.hidden_size
    slots = shard.slots
    if any(i >= len(slots) for i in spec.fc_input):
        return []
    fc = [slots[i].tensor for i in spec.fc_input]
    if any(t.dim() != 2 or t.shape[-1] != hidden or t.shape[0] != cap.aux.shape[0] for t in fc):
        return []
    states = cap.states(hidden)
    problems: list[Finding] = []
    if cap.aux.shape[-1] % hidden or len(states) != len(fc):
        problems.append(_finding(
            contract, shard, "EC704", f"the capture holds {cap.aux.shape[-1] / hidden:g} states "
            f"of H={hidden}, the contract's fc input {len(fc)}",
            expected=f"{len(fc)} * {hidden} = {len(fc) * hidden}",
            found=f"{cap.aux.shape[-1]} ({cap.name})",
            hint="the server was launched with another number of aux layer ids than the "
                 "draft's fc takes"))
        if cap.aux.shape[-1] % hidden:
            return problems
    matches = match_positions(fc, [s for s in states if s.shape[-1] == hidden],
                              spec.fc_input, rtol)
    details = _table(matches, cap)  # shown once per shard, on its first mismatch
    for m in matches:
        if m.equals == m.position:
            continue
        problems.append(_mismatch(contract, shard, m, cap, details, rtol))
        details = ""
    return problems


def _with_layers(contract: Contract, cap: Capture) -> Capture:
    """Fill in the canonical layers of a capture that names its ids but not its layers."""
    import dataclasses

    if cap.meta.layers is not None or cap.meta.layer_ids is None:
        return cap
    layers, _ = resolve_layers(contract, cap.meta.arch, cap.meta.version, cap.meta.layer_ids)
    return dataclasses.replace(cap, meta=dataclasses.replace(cap.meta, layers=layers))


def _mismatch(contract: Contract, shard: Shard, m: Match, cap: Capture, details: str,
              rtol: float) -> Finding:
    assert contract.training is not None
    declared = contract.training.slots[m.slot].layer
    there = (f"server position {m.position} = {cap.layer_of(m.position)}"
             if m.position < len(cap.states(contract.target.hidden_size))
             else f"no server position {m.position}")
    if m.equals is not None:
        found = (f"slot {m.slot} equals server position {m.equals} = {cap.layer_of(m.equals)} "
                 f"(rel. error {m.error:.2g}, cosine {m.cosine:.4f})")
        hint = (f"the shard's slot {m.slot} holds what the server feeds at position "
                f"{m.equals} ({cap.layer_of(m.equals)}): slots swapped or layers shifted "
                "between the capture that wrote the shards and this server")
    else:
        found = (f"slot {m.slot} equals no server position (closest: position {m.closest} = "
                 f"{cap.layer_of(m.closest)}, rel. error {m.error:.2g} > {rtol:g})")
        hint = (f"slot {m.slot} was captured from a layer this server does not feed the draft "
                "(a one-layer shift between conventions or versions?), or in another dtype or "
                "model")
    return _finding(
        contract, shard, "EC701", f"fc position {m.position} (slot {m.slot}, declared "
        f"{declared}) is not what the server feeds the draft there",
        slot=m.slot, expected=there, found=found, hint=hint, details=details,
        extra={"capture": cap.label or str(cap.path), "equals": m.equals, "closest": m.closest,
               "error": m.error, "errors": list(m.table)})


def _table(matches: Sequence[Match], cap: Capture) -> str:
    if not matches:
        return ""
    n = len(matches[0].table)
    head = ["fc pos / slot"] + [f"server {j} ({cap.layer_of(j)})" for j in range(n)]
    rows = [head] + [[f"{m.position} / slot {m.slot}"] + [f"{e:.3g}" for e in m.table]
                     for m in matches]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["median relative error, shard slot vs server state "
             f"({cap.name}, {cap.meta.engine} {cap.meta.version or '?'}):"]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


# -- The eagle_capture fixture's core ----------------------------------------------------




def aux_for_shard(contract: Contract, path: Path, url: str | None = None,
                  captures: Path | Sequence[Path] | CaptureIndex | None = None,
                  timeout: float = 60.0) -> torch.Tensor:
    """The server's aux states ``[T, n_aux * H]`` for the shard at ``path``.

    Live from ``url`` when given (errors raise
    :class:`~pytest_eagle_contract.capture.sglang_client.CaptureError`), else from the capture
    files under ``captures``; raises :class:`NoCapture` with the reason when neither has it.
    """
    from ..errors import ShardReadError
    from ..shards.reading import read_sample
    from .sglang_client import capture

    fmt = contract.training.format if contract.training else "auto"
    try:
        ids = read_sample(path, fmt).input_ids
    except ShardReadError as exc:
        raise NoCapture(f"{path}: {exc.code} {exc.message}") from None
    if ids is None:
        raise NoCapture(f"{path}: the shard has no input_ids")
    if url:
        return capture(url, [int(i) for i in ids.tolist()], _n_aux(contract),
                       contract.target.hidden_size, timeout)
    if captures is None or (isinstance(captures, (list, tuple)) and not captures):
        raise NoCapture("no SGLang URL (--eagle-sglang-url) and no capture files "
                        "(--eagle-captures) given")
    index = captures if isinstance(captures, CaptureIndex) else load_captures(captures)
    found = index.find(ids)
    if found is None:
        where = index.root or "the capture files"
        raise NoCapture(f"no capture of {path.name}'s {ids.shape[0]} input ids in {where}")
    return found.aux
