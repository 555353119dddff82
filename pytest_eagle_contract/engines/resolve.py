"""Map each side's layer ids onto canonical layers, in the order that side concatenates them.

Engines: ``sglang`` (built-in table in ``sglang_table``, or the installed sglang's own
methods), ``vllm``; trainers' captures: ``specforge`` (SGLang at the version SpecForge
pinned), ``speculators-v1``, ``speculators``, ``eagle`` (SafeAILab EAGLE-3) and ``hf``
(``output_hidden_states`` indices). See docs/layers.md for every rule and its source.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import EagleContractError, Unservable
from ..layers import Layer
from . import sglang_table as table

ENGINES = ("sglang", "vllm", "specforge", "speculators-v1", "speculators", "eagle", "hf")
SPECFORGE_SGLANG = "0.5.14"  # the sglang SpecForge pins for prepare_hidden_states.py




@dataclass(frozen=True)
class Position:
    """One fc input position: the side's own id, the engine's capture index, the layer."""

    id: int | None
    capture: int
    layer: Layer


@dataclass(frozen=True)
class Resolution:
    engine: str
    version: str | None
    arch: str | None
    num_layers: int
    ids: tuple[int, ...] | None
    positions: tuple[Position, ...]
    source: str
    notes: tuple[str, ...] = ()
    problems: tuple[tuple[str, str], ...] = field(default=())  # (rule code, message)

    @property
    def layers(self) -> tuple[Layer, ...]:
        return tuple(p.layer for p in self.positions)

    def to_dict(self) -> dict[str, object]:
        return {
            "engine": self.engine, "version": self.version, "arch": self.arch,
            "num_layers": self.num_layers, "ids": None if self.ids is None else list(self.ids),
            "layers": [str(x) for x in self.layers],
            "positions": [{"id": p.id, "capture": p.capture, "layer": str(p.layer)}
                          for p in self.positions],
            "source": self.source, "notes": list(self.notes),
            "problems": [{"code": c, "message": m} for c, m in self.problems],
        }


def default_ids(num_layers: int) -> list[int]:
    return [2, num_layers // 2, num_layers - 3]


# -- SGLang -------------------------------------------------------------------------------


def installed_sglang() -> str | None:
    if importlib.util.find_spec("sglang") is None:
        return None
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def _apply_rule(rule: str, ids: Sequence[int] | None, num_layers: int) -> list[int]:
    if ids is None or rule == "default-only":
        return default_ids(num_layers)
    if rule == "deepseek":
        return [i + 1 for i in ids] if ids and ids[0] == 1 else list(ids)
    if rule == "gpt-oss":
        return list(ids) if ids and max(ids) == num_layers else [i + 1 for i in ids]
    return [i + 1 for i in ids]  # plus1, plus1-flag


def _sglang_capture(arch: str, version: str, num_layers: int, ids: Sequence[int] | None,
                    use_installed: bool = True) -> tuple[list[int], table.Row, str]:
    """Capture indices as ``set_eagle3_layers_to_capture`` leaves them, and the source."""
    row = table.row_for(arch, version)
    if row is None:
        raise Unservable(_absent(arch, version))
    installed = installed_sglang() if use_installed else None
    if installed is not None and table.parse_version(installed) == table.parse_version(version):
        from .sglang_native import native_layers_to_capture

        capture = native_layers_to_capture(arch, num_layers, ids)
        return capture, row, (f"installed sglang {installed}: its own "
                              f"set_eagle3_layers_to_capture on a stub ({row.source})")
    if ids is not None and row.rule == "plus1-flag" and any(i + 1 >= num_layers for i in ids):
        raise Unservable(f"sglang {version} {row.source}: id + 1 >= {num_layers} raises "
                         "IndexError at start-up (the inner model flags layers[id + 1])")
    capture = _apply_rule(row.rule, ids, num_layers)
    return capture, row, f"built-in table: sglang {_span(row)} {row.source}, rule {row.rule}"


def _span(row: table.Row) -> str:
    return f"{row.since} <= v < {row.until}" if row.until else f">={row.since}"


def _absent(arch: str, version: str) -> str:
    if arch in table.NO_CAPTURE:
        return f"{arch}: {table.NO_CAPTURE[arch]}"
    if arch not in table.KNOWN_ARCHS:
        return (f"{arch} is not in the built-in table ({', '.join(sorted(table.KNOWN_ARCHS))}); "
                "install that sglang to use its own rules")
    first = min((r.since for r in table.ROWS if arch in r.archs), key=table.parse_version)
    return f"sglang {version} has no EAGLE-3 capture for {arch} (from {first} on)"


def resolve_sglang(arch: str, num_layers: int, ids: Sequence[int] | None,
                   version: str | None = None, use_installed: bool = True) -> Resolution:
    arch = table.canonical_arch(arch)
    notes: list[str] = []
    problems: list[tuple[str, str]] = []
    if version is None:
        version = installed_sglang() or table.NEWEST
        notes.append(f"no version given: sglang {version} assumed")
    v = table.parse_version(version)
    if not v:
        raise EagleContractError(f"{version!r} is not an sglang version (e.g. 0.5.14)")
    if v < table.parse_version(table.FIRST_EAGLE3):
        raise Unservable(f"sglang {version} has no EAGLE-3 (first in {table.FIRST_EAGLE3})")
    if v > table.parse_version(table.NEWEST) and table.parse_version(
            installed_sglang() or "0") != v:
        raise Unservable(f"sglang {version} is newer than the built-in table (up to "
                         f"{table.NEWEST}); install it so its own rules are used")
    if ids is not None and any(i < 0 for i in ids):
        raise Unservable(f"negative ids {list(ids)}: SGLang would index from the end")
    capture, row, source = _sglang_capture(arch, version, num_layers, ids, use_installed)
    if ids is None:
        notes.append(f"no ids: SGLang's default capture {default_ids(num_layers)} (no +1)")
    elif row.rule == "default-only":
        notes.append(f"sglang {version} ignores the draft's ids: default capture used")
    if 0 in capture:
        raise Unservable("capture index 0 (before layer 0, where residual is None): "
                         f"{row.source}'s forward adds None; not a served case")
    limit = num_layers if row.final_boundary else num_layers - 1
    dropped = sorted({c for c in capture if c > limit})
    kept = sorted({c for c in capture if c <= limit})
    if dropped:
        if row.rule == "deepseek" and v >= table.parse_version(table.MISSING_CAPTURE_RAISES):
            raise Unservable(f"capture index {dropped} is never reached; sglang {version} "
                             f"fails at the first forward ('captured {len(kept)} of "
                             f"{len(set(capture))} aux hidden states')")
        problems.append(("EC511", f"capture index {dropped} is never reached by the layer loop "
                         f"(L = {num_layers}): SGLang silently feeds {len(kept)} states, "
                         f"not {len(set(capture))}"))
    if len(set(capture)) != len(capture):
        notes.append("duplicate ids collapse: each layer is captured once")
    if ids is not None and list(ids) != sorted(ids):
        notes.append(f"ids {list(ids)} are not ascending: SGLang concatenates in layer order")
    low, high = (table.parse_version(x) for x in table.CUDA_GRAPH_DEFAULT_BUG)
    if ids is not None and low <= v < high and kept != default_ids(num_layers):
        problems.append(("EC514", "CUDA graphs are captured before the draft's ids are "
                         f"applied: decode and verify passes get the default "
                         f"{default_ids(num_layers)}, prefill gets {kept} (fixed in "
                         f"{table.CUDA_GRAPH_DEFAULT_BUG[1]}); use --disable-cuda-graph or "
                         "upgrade"))
    by_capture = _ids_by_capture(ids, capture)
    positions = tuple(Position(by_capture.get(c), c, Layer(c)) for c in kept)
    return Resolution("sglang", version, arch, num_layers,
                      None if ids is None else tuple(ids), positions, source,
                      tuple(notes), tuple(problems))


def _ids_by_capture(ids: Sequence[int] | None, capture: Sequence[int]) -> dict[int, int]:
    if ids is None or len(ids) != len(capture):
        return {}
    out: dict[int, int] = {}
    for i, c in zip(ids, capture):
        out.setdefault(c, i)
    return out


def sglang_versions(spec: str | None) -> list[str]:
    """The covered releases a version or specifier (">=0.5.13", "0.5.9") names."""
    if spec is None:
        return [installed_sglang() or table.NEWEST]
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import Version

    text = spec.strip()
    if text[:1].isdigit():
        return [text]
    try:
        wanted = SpecifierSet(text)
    except InvalidSpecifier:
        raise EagleContractError(f"serving.version {spec!r} is neither a version nor a "
                                 "specifier like '>=0.5.13'") from None
    found = [r for r in table.RELEASES if Version(r) in wanted]
    if not found:
        raise EagleContractError(f"no sglang release from {table.RELEASES[0]} to "
                                 f"{table.NEWEST} matches {spec!r}")
    return found


# -- Other engines and trainers ---------------------------------------------------------


def _positions(ids: Sequence[int], captures: Sequence[int], layers: Sequence[Layer],
               ) -> tuple[Position, ...]:
    return tuple(Position(i, c, layer) for i, c, layer in zip(ids, captures, layers))


def resolve_vllm(num_layers: int, ids: Sequence[int] | None, arch: str | None = None,
                 version: str | None = None) -> Resolution:
    notes = []
    given = None if ids is None else tuple(ids)
    if ids is None:
        ids = default_ids(num_layers)
        notes.append(f"no ids: vLLM's default {list(ids)} (get_eagle3_default_aux_hidden_"
                     "state_layers); a known silent failure (vllm PR #50170)")
    if any(i < 0 or i > num_layers for i in ids):
        raise Unservable(f"vLLM ids must lie in [0, {num_layers}]: {list(ids)}")
    kept = sorted(set(ids))
    if len(kept) != 3:
        raise Unservable(f"vLLM's llama_eagle3.py builds fc as target_hidden_size * 3: "
                         f"{len(kept)} aux states crash at load")
    return Resolution("vllm", version, arch, num_layers, given,
                      _positions(kept, kept, [Layer(k) for k in kept]),
                      "built-in rule: vLLM id k = input to layer k (llama.py, deepseek_v2.py); "
                      "sorted, duplicates collapse", tuple(notes))


def resolve_specforge(arch: str, num_layers: int, ids: Sequence[int] | None,
                      version: str | None = None) -> Resolution:
    """SpecForge captures through SGLang at prep time; its default ids are [1, L//2-1, L-4]."""
    L = num_layers
    used = list(ids) if ids is not None else [1, L // 2 - 1, L - 4]
    inner = resolve_sglang(arch, L, used, version or SPECFORGE_SGLANG)
    notes = ((f"SpecForge default aux ids {used}",) if ids is None else ()) + inner.notes + (
        "target (hidden_state) = final_norm",)
    return Resolution("specforge", inner.version, inner.arch, L,
                      None if ids is None else tuple(ids), inner.positions,
                      f"SpecForge prepare_hidden_states.py via {inner.source}", notes,
                      inner.problems)


def resolve_speculators_v1(num_layers: int, ids: Sequence[int] | None) -> Resolution:
    L = num_layers
    used = list(ids) if ids is not None else [2, L // 2, L - 3, L - 1]
    if any(i < 0 or i >= L for i in used):
        raise Unservable(f"speculators v1 captures after decoder layers [0, {L}): {used}")
    layers = [Layer(i + 1) for i in used]
    return Resolution("speculators-v1", None, None, L, None if ids is None else tuple(ids),
                      _positions(used, [i + 1 for i in used], layers),
                      "speculators v1 custom_worker.py: captured after layer k = residual:k+1; "
                      "list order (torch.cat(hidden_states[:-1]))",
                      ("the last entry is the pre-norm target",))


def resolve_speculators(num_layers: int, ids: Sequence[int] | None) -> Resolution:
    L = num_layers
    used = list(ids) if ids is not None else [2, L // 2, L - 3, L]
    if any(i < 0 or i > L for i in used):
        raise Unservable(f"speculators (vLLM capture) ids must lie in [0, {L}]: {used}")
    kept = sorted(set(used))
    return Resolution("speculators", None, None, L, None if ids is None else tuple(ids),
                      _positions(kept, kept, [Layer(k) for k in kept]),
                      "speculators data generation through vLLM: id k = residual:k, sorted",
                      ("the last entry is the pre-norm target",))


def resolve_eagle(num_layers: int, ids: Sequence[int] | None) -> Resolution:
    if ids is not None:
        raise Unservable("SafeAILab EAGLE-3 has no configurable layer ids: it captures before "
                         "layers {2, L//2, L-3}")
    kept = default_ids(num_layers)
    return Resolution("eagle", None, None, num_layers, None,
                      _positions(kept, kept, [Layer(k) for k in kept]),
                      "SafeAILab EAGLE-3 modeling_llama_kv.py: states before layers "
                      "{2, L//2, L-3}, concatenated in that order")


def resolve_hf(num_layers: int, ids: Sequence[int] | None) -> Resolution:
    if ids is None:
        raise Unservable("hf needs --ids: indices into output_hidden_states")
    if any(i < 0 or i > num_layers for i in ids):
        raise Unservable(f"output_hidden_states has indices 0..{num_layers}: {list(ids)}")
    layers = [Layer(-1) if i == num_layers else Layer(i) for i in ids]
    return Resolution("hf", None, None, num_layers, tuple(ids), _positions(ids, ids, layers),
                      "transformers output_hidden_states: [k] = residual:k for k < L, "
                      "[L] = final_norm (post-norm)")


def resolve(engine: str, num_layers: int, ids: Sequence[int] | None = None,
            arch: str | None = None, version: str | None = None,
            use_installed: bool = True) -> Resolution:
    """One side's layers in its concatenation order. Raises :class:`Unservable`.

    For sglang, the installed sglang's own method answers when its version is the one
    asked for (``use_installed``); otherwise the built-in table. ``source`` says which.
    """
    if num_layers < 4:
        raise Unservable(f"num_layers {num_layers}: EAGLE-3 defaults need at least 4 layers")
    if engine == "sglang":
        if not arch:
            raise Unservable("sglang rules depend on the architecture: give --arch")
        return resolve_sglang(arch, num_layers, ids, version, use_installed)
    if engine == "specforge":
        if not arch:
            raise Unservable("SpecForge captures through sglang, whose rules depend on the "
                             "architecture: give --arch")
        return resolve_specforge(arch, num_layers, ids, version)
    if engine == "vllm":
        return resolve_vllm(num_layers, ids, arch, version)
    if engine == "speculators-v1":
        return resolve_speculators_v1(num_layers, ids)
    if engine == "speculators":
        return resolve_speculators(num_layers, ids)
    if engine == "eagle":
        return resolve_eagle(num_layers, ids)
    if engine == "hf":
        return resolve_hf(num_layers, ids)
    raise EagleContractError(f"unknown engine {engine!r}: one of {', '.join(ENGINES)}")
