"""What an engine (or a trainer's capture) is, and what resolving its ids answers.

An :class:`Engine` owns everything known about one side: the releases it knows and how a
version spec expands to them, the draft ``config.json`` keys it reads its aux ids from, its
default ids, how many aux states it builds the draft's fc for, and ``resolve``: the side's
ids mapped onto canonical layers, in the order it concatenates them. ``fixes.inverse``
runs ``resolve`` backwards: which ids make it feed given layers.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from ..errors import EagleContractError, Problem
from ..layers import Layer

if TYPE_CHECKING:
    from .draft_config import DraftConfig


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
    problems: tuple[Problem, ...] = ()
    # what the answer takes about the launch, as (setting, value, why): vLLM's model runner
    assumed: tuple[tuple[str, str, str], ...] = ()

    @property
    def layers(self) -> tuple[Layer, ...]:
        return tuple(p.layer for p in self.positions)

    def to_dict(self) -> dict[str, object]:
        return {
            "engine": self.engine,
            "version": self.version,
            "arch": self.arch,
            "num_layers": self.num_layers,
            "ids": None if self.ids is None else list(self.ids),
            "layers": [str(x) for x in self.layers],
            "positions": [
                {"id": p.id, "capture": p.capture, "layer": str(p.layer)} for p in self.positions
            ],
            "source": self.source,
            "notes": list(self.notes),
            "problems": [{"code": p.code, "message": p.message} for p in self.problems],
            "assumed": {name: {"value": v, "why": why} for name, v, why in self.assumed},
        }


@dataclass
class Query:
    """One ``resolve`` call as an engine answers it: what was asked (the engine settles
    ``arch`` and ``version`` to what it answers for), and the notes and problems found."""

    engine: str
    num_layers: int
    ids: Sequence[int] | None
    arch: str | None
    version: str | None
    use_installed: bool = True
    notes: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    assumed: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def given(self) -> tuple[int, ...] | None:
        return None if self.ids is None else tuple(self.ids)

    def assume(self, version: str, package: str) -> str:
        """The version asked, else ``version`` (noted as assumed)."""
        if self.version is None:
            self.version = version
            self.notes.append(f"no version given: {package} {version} assumed")
        return self.version

    def note_order(self, ids: Sequence[int], how: str) -> None:
        """Note ``ids`` that are not ascending, and ``how`` the engine orders their states."""
        if list(ids) != sorted(ids):
            self.notes.append(f"ids {list(ids)} are not ascending: {how}")

    def answer(
        self, positions: tuple[Position, ...], source: str, read: Sequence[int] | None = None
    ) -> Resolution:
        """The resolution; ``read``: the ids the engine read, when not those asked."""
        ids = None if self.ids is None else tuple(read or self.ids)
        return Resolution(
            self.engine,
            self.version,
            self.arch,
            self.num_layers,
            ids,
            positions,
            source,
            tuple(self.notes),
            tuple(self.problems),
            tuple(self.assumed),
        )


def releases_for(spec: str, releases: Sequence[str], package: str) -> list[str]:
    """The releases a version (``"0.5.9"``, taken as given) or a specifier (``">=0.5.13"``)
    names, of the covered ``releases`` (oldest first)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import Version

    text = spec.strip()
    if text[:1].isdigit():
        return [text]
    try:
        wanted = SpecifierSet(text)
    except InvalidSpecifier:
        raise EagleContractError(
            f"serving.version {spec!r} is neither a version nor a specifier like '>={releases[-1]}'"
        ) from None
    found = [r for r in releases if Version(r) in wanted]
    if not found:
        raise EagleContractError(
            f"no {package} release from {releases[0]} to {releases[-1]} matches {spec!r}"
        )
    return found


def eagle3_default_ids(num_layers: int) -> list[int]:
    """The EAGLE-3 default ``[2, L//2, L-3]`` (SGLang, vLLM, SafeAILab)."""
    return [2, num_layers // 2, num_layers - 3]


@functools.cache
def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` when it is importable, else None (looked up
    once: ``reachable`` resolves hundreds of candidates)."""
    if importlib.util.find_spec(distribution) is None:
        return None
    from importlib import metadata  # 20 ms to import: only when a version is looked up

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def positions(
    ids: Sequence[int], captures: Sequence[int], layers: Sequence[Layer]
) -> tuple[Position, ...]:
    return tuple(Position(i, c, layer) for i, c, layer in zip(ids, captures, layers))


def depth(layer: Layer, num_layers: int) -> int:
    """Where a layer sits in the forward pass: embed 0, residual:k k, final_norm L + 1."""
    return num_layers + 1 if layer.is_final_norm else layer.index


def straight(ids: Sequence[int]) -> tuple[Position, ...]:
    """Positions where id k is capture index k is ``residual:k``."""
    return positions(ids, ids, [Layer(k) for k in ids])


class Engine(ABC):
    """One serving engine or trainer capture. Subclasses set ``name`` and ``_resolve``."""

    name: ClassVar[str]
    title: ClassVar[str]  # as people write it, for messages: "SGLang"
    # Dotted draft config.json keys the aux ids are read from, in the engine's order; () when
    # this side takes no draft config (a trainer's capture).
    id_keys: ClassVar[tuple[str, ...]] = ()

    def versions(self, spec: str | None) -> list[str | None]:
        """The releases a version or specifier names; an unversioned side takes it as given."""
        return [spec]

    def known_archs(self) -> frozenset[str]:
        """The architecture names this side's rules use (empty: it takes no architecture);
        ``resolve`` maps what a config.json holds (``architectures[0]`` or ``model_type``)
        onto them (``arch_names.pick``)."""
        return frozenset()

    def default_ids(self, num_layers: int) -> list[int] | None:
        """The ids this side uses when none are given (None: it needs them)."""
        return eagle3_default_ids(num_layers)

    def draft_ids(self, draft: DraftConfig) -> tuple[int, ...] | None:
        """The aux ids this side reads from the draft's config.json (None: its default): the
        first of its keys with a non-empty list, else what its last key holds."""
        found = [draft.aux_ids.get(key) for key in self.id_keys]
        return next((ids for ids in found if ids), found[-1] if found else None)

    def n_aux(self, draft: DraftConfig, version: str | None) -> int:
        """How many aux states the draft's fc is built for on this side."""
        return draft.num_aux_hidden_states or len(self.draft_ids(draft) or ()) or 3

    def resolve(
        self,
        num_layers: int,
        ids: Sequence[int] | None,
        arch: str | None,
        version: str | None,
        use_installed: bool = True,
    ) -> Resolution:
        """The side's layers for ``ids`` in its concatenation order. Raises Unservable.

        ``use_installed``: where the installed package can answer for itself (SGLang), let it.
        """
        q = Query(self.name, num_layers, ids, arch, version, use_installed)
        if arch:
            from .arch_names import pick

            q.arch, how = pick(arch, self.known_archs())
            if how:
                q.notes.append(how)
        return self._resolve(q)

    @abstractmethod
    def _resolve(self, q: Query) -> Resolution:
        """``resolve`` for one query: its notes and problems gathered in ``q``."""

    def config_line(self, ids: Sequence[int]) -> str:
        """``ids`` as the draft config.json entry this side reads first, ready to paste."""
        text = json.dumps(list(ids))
        if not self.id_keys:
            return text
        *outer, key = self.id_keys[0].split(".")
        text = f"{json.dumps(key)}: {text}"
        for name in reversed(outer):
            text = f"{json.dumps(name)}: {{{text}}}"
        return text


def version_order(version: str) -> tuple[int, ...]:
    """A release name as the numbers in it, to sort releases of any engine by."""
    import re

    return tuple(int(x) for x in re.findall(r"\d+", version))
