"""What every covered serving engine version would feed the draft's fc, beside what the
trainer fed: one row per span of consecutive versions that resolve alike, ``DIFFERS`` where
they differ, ``refused`` where the engine would not serve it, and the ids that would fix a
row (``fixes.inverse``). Printed by ``eagle-contract matrix`` and under EC501.

Serving engines are the registered ones outside ``trainers.py``; their covered versions
are what ``versions(">=0")`` expands to (``any`` for an unversioned engine).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import EagleContractError
from ..layers import Layer
from ..render import MATRIX_HEADING, WIDTH
from .base import Engine, version_order
from .fixes import ANY, inverse, layer_list, relabel, runs, span_label

if TYPE_CHECKING:
    from .dflash_draft import DFlashDraft

_ALL = ">=0"
_V = "\x00"  # the version in a refusal, so that versions refused alike collapse


@dataclass(frozen=True)
class Row:
    engine: Engine
    versions: tuple[str, ...]
    ids: tuple[int, ...] | None  # the ids the engine reads (None: its default)
    feeds: tuple[Layer, ...] | None  # None: refused
    said: str | None  # why it is refused, the version written as _V
    problems: tuple[str, ...]  # rule codes of what the resolution warns about
    same: bool  # feeds exactly what the trainer fed
    fix: tuple[int, ...] | None  # ids that would make it feed that (when it does not)
    own: bool  # the contract's serving engine, in its version range
    stated: bool = True  # False: no engine read any ids and the draft states none ("-")

    @property
    def label(self) -> str:
        return span_label(self.versions)

    @property
    def refused(self) -> str | None:
        return None if self.said is None else self.said.replace(_V, self.label)

    @property
    def verdict(self) -> str:
        word = "refused" if self.feeds is None else "ok" if self.same else "DIFFERS"
        return " ".join((word, *self.problems))

    def to_dict(self) -> dict[str, object]:
        return {
            "engine": self.engine.name,
            "versions": list(self.versions),
            "ids": None if self.ids is None else list(self.ids),
            "feeds": None if self.feeds is None else [str(x) for x in self.feeds],
            "verdict": self.verdict.split()[0],
            "refused": self.refused,
            "problems": list(self.problems),
            "fix": None if self.fix is None else list(self.fix),
            "own": self.own,
        }


def serving_engines() -> list[Engine]:
    from . import resolve

    return [e for e in resolve.ENGINES.values() if not type(e).__module__.endswith(".trainers")]


def covered(engine: Engine) -> list[str]:
    """Every release of ``engine`` the tool knows (``[ANY]`` when it is unversioned)."""
    found = engine.versions(_ALL)
    return [ANY] if found in ([_ALL], [None]) else [v or ANY for v in found]


def matrix(
    trained: Sequence[Layer],
    num_layers: int,
    arch: str | None,
    ids_of: Callable[[Engine], tuple[int, ...] | None],
    own: tuple[str, Sequence[str]] | None,
) -> list[Row]:
    """The rows for every serving engine. ``ids_of``: the ids an engine reads; ``own``: the
    contract's engine name and its versions (``ANY`` for an unversioned one)."""
    trained = tuple(trained)
    rows: list[Row] = []
    for engine in serving_engines():
        ids = ids_of(engine)
        mine = list(own[1]) if own is not None and own[0] == engine.name else []
        versions = covered(engine)
        versions += [v for v in mine if v not in versions]  # a release the tool does not know
        cells = {v: _cell(engine, v, ids, trained, num_layers, arch, v in mine) for v in versions}
        rows += [
            Row(engine, tuple(run), ids, *cells[run[0]])
            for run in runs(list(cells), cells.__getitem__)
        ]
    return rows


_Cell = tuple[
    tuple[Layer, ...] | None, str | None, tuple[str, ...], bool, tuple[int, ...] | None, bool
]
"""One release's cell of a row: what it feeds, why it refuses, its problem codes, whether it
feeds the trained layers, the ids that would, and whether it is the contract's own release."""


def _cell(
    engine: Engine,
    version: str,
    ids: tuple[int, ...] | None,
    trained: tuple[Layer, ...],
    num_layers: int,
    arch: str | None,
    own: bool,
) -> _Cell:
    asked = None if version == ANY else version
    try:
        res = engine.resolve(num_layers, ids, arch, asked)
    except EagleContractError as exc:  # Unservable, or a version it does not know
        said = relabel(str(exc), asked, _V)
        return None, said, (), False, inverse(engine, trained, num_layers, arch, asked).ids, own
    problems = tuple(sorted({p.code for p in res.problems}))
    if res.layers == trained:
        return res.layers, None, problems, True, None, own
    fix = inverse(engine, trained, num_layers, arch, asked).ids
    return res.layers, None, problems, False, fix, own


def _table(rows: Sequence[Row], width: int | None = None) -> str:
    from ..tables import table

    return table(
        ["engine", "versions", "ids", "fc gets", "vs trainer", "ids that fix"],
        [
            [
                r.engine.title,
                r.label,
                ("default" if r.stated else "-") if r.ids is None else list(r.ids),
                "-" if r.feeds is None else layer_list(r.feeds),
                r.verdict,
                "-" if r.same else "none" if r.fix is None else list(r.fix),
            ]
            for r in rows
        ],
        marks=["*" if r.own else " " for r in rows],
        width=width,
    )


def render(rows: Sequence[Row], trained: Sequence[Layer]) -> str:
    """The matrix as a table, then why each refused row is refused."""
    lines = [f"the trainer feeds the fc {layer_list(trained)} (* the contract's serving)"]
    lines.append(_table(rows, WIDTH))  # the terminal's: list cells wrap to fit
    for r in rows:
        if r.refused is not None:
            where = "" if r.label in r.refused else f" {r.engine.title} {r.label}:"
            lines.append(f"refused:{where} {r.refused}")
    if any(v == "main" or v.startswith("main@") for r in rows for v in r.versions):
        lines.append(
            "main@<sha>: that commit of the engine's main branch, read from source; main: "
            "TensorRT-LLM's main read\n  through a code index; no release checked for either "
            "(docs/layers.md, 'Methods read from source')"
        )
    return "\n".join(lines)


def summary(rows: Sequence[Row]) -> str:
    """The table without the contract's own rows (for EC501's details: the findings already
    give those, one per span)."""
    others = [r for r in rows if not r.own]
    return MATRIX_HEADING + "\n" + _table(others)


def listing(rows: Sequence[Row]) -> list[dict[str, object]]:
    """Every row as data, with its labels as printed: EC501's ``extra["matrix"]`` (in the
    JSON report too), from which the terminal's short view picks (:func:`short_table`)."""
    return [
        {**r.to_dict(), "title": r.engine.title, "label": r.label, "shown": r.verdict} for r in rows
    ]


def dflash_matrix(
    trained: Sequence[Layer],
    num_layers: int,
    arch: str | None,
    draft: DFlashDraft,
    own: tuple[str, Sequence[str]] | None,
) -> list[Row]:
    """The rows of a DFlash draft (``method: dflash``) on every engine whose DFlash rules are
    read (``engines/dflash.py``), each release read; ``fix``: the taps that would make a row
    feed the trained layers (tap t = residual:t+1 where the engine maps so)."""
    from . import dflash
    from .resolve import get_engine

    trained = tuple(trained)
    rows: list[Row] = []
    for name in dflash.ENGINES:
        mine = newest_for_any(own, name, dflash.releases(name))
        versions = [v for v in dflash.releases(name) if v not in mine] + mine
        versions = sorted(set(versions), key=version_order)
        cells = {
            v: _dflash_cell(name, v, draft, trained, num_layers, arch, v in mine) for v in versions
        }
        rows += [
            Row(get_engine(name), tuple(run), draft.taps, *cells[run[0]])
            for run in runs(list(cells), cells.__getitem__)
        ]
    return rows


def newest_for_any(
    own: tuple[str, Sequence[str]] | None, name: str, read: Sequence[str]
) -> list[str]:
    """The contract's releases of ``name`` in a method's rows, ``ANY`` (no serving.version)
    taken as the newest release ``read``, as resolving without a version assumes (not a
    release called 'any', which every engine refuses)."""
    mine = list(own[1]) if own is not None and own[0] == name else []
    return [read[-1] if v == ANY and read else v for v in mine]


def _dflash_cell(
    name: str,
    version: str,
    draft: DFlashDraft,
    trained: tuple[Layer, ...],
    num_layers: int,
    arch: str | None,
    own: bool,
) -> _Cell:
    from .dflash import resolve_dflash, taps_for

    def fix() -> tuple[int, ...] | None:
        return taps_for(name, num_layers, trained, arch, version, draft.num_hidden_layers)

    try:
        res = resolve_dflash(name, num_layers, draft, arch, version)
    except EagleContractError as exc:
        return None, relabel(str(exc), version, _V), (), False, fix(), own
    problems = tuple(sorted({p.code for p in res.problems}))
    if res.layers == trained:
        return res.layers, None, problems, True, None, own
    return res.layers, None, problems, False, fix(), own
