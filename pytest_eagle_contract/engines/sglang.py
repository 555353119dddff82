"""SGLang: its capture rules per release (``sglang_table``), or the installed sglang's own.

When the installed sglang is the version asked for, its ``set_eagle3_layers_to_capture``
answers (``sglang_native``); otherwise the built-in table. ``source`` says which.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import EagleContractError, Problem, Unservable
from ..layers import Layer
from . import sglang_table as table
from .base import (
    Engine,
    Position,
    Query,
    Resolution,
    eagle3_default_ids,
    installed_version,
    releases_for,
)
from .sglang_native import native_layers_to_capture

if TYPE_CHECKING:
    from .draft_config import DraftConfig


def installed_sglang() -> str | None:
    return installed_version("sglang")


def _capture(
    arch: str, version: str, num_layers: int, ids: Sequence[int] | None, use_installed: bool
) -> tuple[list[int], table.Row, str]:
    """Capture indices as ``set_eagle3_layers_to_capture`` leaves them, and the source."""
    row = table.row_for(arch, version)
    if row is None:
        raise Unservable(_absent(arch, version))
    if row.rule == "unfollowed":
        raise Unservable(
            f"sglang {version} {row.method_in} delegates to the model it loads at start-up; "
            "give that model's architecture"
        )
    if row.index0 == "none":
        raise Unservable(
            f"sglang {version}: {arch} inherits set_eagle3_layers_to_capture but its forward "
            f"({row.forward_in}) never captures: a draft or MTP class, not an EAGLE-3 target"
        )
    installed = installed_sglang() if use_installed else None
    if installed is not None and table.parse_version(installed) == table.parse_version(version):
        capture = native_layers_to_capture(arch, num_layers, ids)
        return (
            capture,
            row,
            (
                f"installed sglang {installed}: its own "
                f"set_eagle3_layers_to_capture on a stub ({row.source})"
            ),
        )
    found = table.apply_rule(row.rule, ids, num_layers)
    if found is None:
        raise Unservable(
            f"sglang {version} {row.source}: id + 1 >= {num_layers} raises "
            "IndexError at start-up (the inner model flags layers[id + 1])"
        )
    return found, row, f"built-in table: sglang {row.source}, rule {row.rule}"


def _span(row: table.Row) -> str:
    return f"{row.since} <= v < {row.until}" if row.until else f">={row.since}"


def _absent(arch: str, version: str) -> str:
    if arch in table.NO_CAPTURE:
        return f"{arch}: {table.NO_CAPTURE[arch]}"
    if arch not in table.KNOWN_ARCHS:
        import difflib
        import textwrap

        names = sorted(table.SERVED_ARCHS)
        near = difflib.get_close_matches(arch, names, n=2)
        return "\n".join(
            [
                f"{arch} is not in the built-in table: no sglang release "
                f"{table.ALL_RELEASES[0]} to {table.NEWEST} captures for it"
                + (f" (did you mean {' or '.join(near)}?)" if near else "")
                + "; install that sglang to use its own rules. The "
                f"{len(names)} architectures that do:",
                *textwrap.wrap(", ".join(names), 100, break_on_hyphens=False),
            ]
        )
    first = min((r.since for r in table.ROWS if arch in r.archs), key=table.parse_version)
    return f"sglang {version} has no EAGLE-3 capture for {arch} (from {first} on)"


def _check_version(version: str) -> table.Version:
    v = table.parse_version(version)
    if not v:
        raise EagleContractError(f"{version!r} is not an sglang version (e.g. 0.5.14)")
    if v < table.parse_version(table.FIRST_EAGLE3):
        raise Unservable(f"sglang {version} has no EAGLE-3 (first in {table.FIRST_EAGLE3})")
    if (
        v > table.parse_version(table.NEWEST)
        and table.parse_version(installed_sglang() or "0") != v
    ):
        raise Unservable(
            f"sglang {version} is newer than the built-in table (up to "
            f"{table.NEWEST}); install it so its own rules are used"
        )
    return v


def _ids_by_capture(ids: Sequence[int] | None, capture: Sequence[int]) -> dict[int, int]:
    if ids is None or len(ids) != len(capture):
        return {}
    out: dict[int, int] = {}
    for i, c in zip(ids, capture):
        out.setdefault(c, i)
    return out


class SGLang(Engine):
    name = "sglang"
    title = "SGLang"
    id_keys = ("eagle_config.eagle_aux_hidden_state_layer_ids",)

    def known_archs(self) -> frozenset[str]:
        return table.KNOWN_ARCHS

    def versions(self, spec: str | None) -> list[str | None]:
        return list(sglang_versions(spec))

    def n_aux(self, draft: DraftConfig, version: str | None) -> int:
        v = table.parse_version(version or "")
        if v and v < (0, 5, 12):
            return 3  # hard-coded hidden * 3
        return super().n_aux(draft, version)

    def _resolve(self, q: Query) -> Resolution:
        if not q.arch:
            raise Unservable("sglang rules depend on the architecture: give --arch")
        q.arch = table.canonical_arch(q.arch)
        ids, num_layers, notes = q.ids, q.num_layers, q.notes
        default = eagle3_default_ids(num_layers)
        version = q.assume(installed_sglang() or table.NEWEST, "sglang")
        _check_version(version)
        if ids is not None and any(i < 0 for i in ids):
            raise Unservable(f"negative ids {list(ids)}: SGLang would index from the end")
        capture, row, source = _capture(q.arch, version, num_layers, ids, q.use_installed)
        notes.append(
            f"sglang {_span(row)}: captures at {row.site} (index 0: {row.index0}, "
            f"index >= L: {row.beyond})"
        )
        if ids is None:
            shifted = "no +1" if capture == default else f"{row.method_in} adds 1 to it"
            notes.append(f"no ids: SGLang's default {default}, captured as {capture} ({shifted})")
        elif row.rule == "default-only":
            notes.append(f"sglang {version} ignores the draft's ids: default capture used")
        if 0 in capture and row.index0 != "embed":
            raise Unservable(
                "capture index 0 (before layer 0, where residual is None): "
                f"{row.forward_in}'s forward adds None; not a served case"
            )
        if 0 in capture:
            notes.append(f"capture index 0 is the embedding output ({row.site})")
        limit = num_layers if row.final_boundary else num_layers - 1
        dropped = sorted({c for c in capture if c > limit})
        kept = sorted({c for c in capture if c <= limit})
        if dropped:
            if row.beyond == "raises":
                raise Unservable(
                    f"capture index {dropped} is never reached; sglang {version} "
                    f"fails at the first forward ('captured {len(kept)} of "
                    f"{len(set(capture))} aux hidden states')"
                )
            q.problems.append(
                Problem(
                    "EC511",
                    f"capture index {dropped} is never reached by the "
                    f"layer loop (L = {num_layers}): SGLang silently feeds "
                    f"{len(kept)} states, not {len(set(capture))}",
                )
            )
        if len(set(capture)) != len(capture):
            notes.append("duplicate ids collapse: each layer is captured once")
        if ids is not None and list(ids) != sorted(ids):
            notes.append(f"ids {list(ids)} are not ascending: SGLang concatenates in layer order")
        graphs = table.graph_default(version)
        if ids is not None and graphs is not None and kept != default:
            q.problems.append(
                Problem(
                    "EC514",
                    "CUDA graphs are captured before the draft's ids "
                    f"are applied: decode and verify passes get the default "
                    f"{default}, prefill gets {kept} (fixed in "
                    f"{graphs[1] or 'no release yet'}); use "
                    "--disable-cuda-graph or upgrade",
                )
            )
        by_capture = _ids_by_capture(ids, capture)
        return q.answer(tuple(Position(by_capture.get(c), c, Layer(c)) for c in kept), source)


def sglang_versions(spec: str | None) -> list[str]:
    """The covered releases a version or specifier (">=0.5.13", "0.5.9") names."""
    if spec is None:
        return [installed_sglang() or table.NEWEST]
    return releases_for(spec, table.RELEASES, "sglang")
