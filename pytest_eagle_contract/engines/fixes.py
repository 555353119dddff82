"""The inverse of ``resolve``: the ids that make an engine version feed given layers, or why
none exist; and EC501's hint built from it (:class:`Fixes`).

Nothing here knows an engine's rule. Candidate ids are tried through the engine's own
``resolve`` for that version, so every rule, sort, collapse and refusal of any registered
engine counts. Candidates: for each wanted layer, the ids within a few layers of it, and
``-1`` (an engine's name for the final state) near the top; the ids keep the wanted layers'
order (every known rule maps ids to layers monotonically), so an engine that sorts is asked
for the order the trainer used and the answer says when it cannot feed it. Where no list in
that order feeds them, every other order is tried too: a rule that looks at the first id
(SGLang's DeepSeek/Kimi from 0.5.13) reaches some layers only with the ids unsorted.

Versions are the engine's release strings, ``"any"`` for an unversioned engine.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from ..errors import EagleContractError
from ..layers import Layer
from .base import Engine, Resolution, depth

ANY = "any"
MAX_WANTED = 6  # layers one search takes: candidates grow as (window) ** layers
_BUDGET = 5000  # candidate id lists per search, at most


def runs(versions: Sequence[str], key: Callable[[str], object]) -> list[list[str]]:
    """Consecutive versions whose ``key`` is equal."""
    out: list[list[str]] = []
    last: object = None
    for version in versions:
        now = key(version)
        if out and now == last:
            out[-1].append(version)
        else:
            out.append([version])
        last = now
    return out


def span_label(versions: Sequence[str]) -> str:
    first, last = versions[0], versions[-1]
    return first if first == last else f"{first}..{last}"


def _asked(version: str) -> str | None:
    return None if version == ANY else version


def relabel(message: str, version: str | None, label: str) -> str:
    """``message`` with the release ``version`` in it written as ``label``."""
    if not version or version == ANY:
        return message
    return re.sub(rf"(?<![\d.]){re.escape(version)}(?!\d|\.\w)", label, message)


def layer_list(layers: Sequence[Layer]) -> str:
    return ", ".join(map(str, layers))


def config_key(engine: Engine) -> str | None:
    """The dotted key the engine reads its ids from (from its own ``config_line``)."""
    keys = re.findall(r'"?(\w+)"?\s*:\s*[{\[]', engine.config_line([0]))
    return ".".join(keys) or None


def set_where(engine: Engine) -> str:
    """Where the engine's ids go."""
    return "the draft's config.json" if engine.id_keys else f"the {engine.title} launch config"


def literal(wanted: Sequence[Layer]) -> tuple[int, ...]:
    """The ids that name ``wanted`` directly (id k for residual:k, -1 for final_norm)."""
    return tuple(-1 if x.is_final_norm else x.index for x in wanted)


def _cmp(a: int, b: int) -> int:
    return (a > b) - (a < b)


def _candidates(wanted: Sequence[int], num_layers: int) -> Iterator[tuple[int, ...]]:
    """Id lists near ``wanted`` (depths), in the same order as they; -1 ranks above all."""
    reach = next((r for r in (3, 2) if (2 * r + 2) ** len(wanted) <= _BUDGET), 1)
    windows = [
        [*range(max(0, d - reach), min(num_layers, d + reach) + 1)]
        + ([-1] if d + reach > num_layers else [])
        for d in wanted
    ]

    def rank(i: int) -> int:
        return num_layers + 1 if i < 0 else i

    def extend(prefix: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        n = len(prefix)
        if n == len(wanted):
            yield prefix
            return
        for i in windows[n]:
            if all(
                _cmp(rank(p), rank(i)) == _cmp(wanted[k], wanted[n]) for k, p in enumerate(prefix)
            ):
                yield from extend((*prefix, i))

    yield from extend(())


def _reordered(wanted: Sequence[int], num_layers: int) -> Iterator[tuple[int, ...]]:
    """:func:`_candidates` for every other order of the wanted layers (the ids for layer k
    moved to another position), at most ``_BUDGET`` lists."""
    n = len(wanted)
    budget = _BUDGET
    for order in itertools.islice(itertools.permutations(range(n)), 1, None):
        for ids in _candidates([wanted[i] for i in order], num_layers):
            if budget == 0:
                return
            budget -= 1
            yield ids


@dataclass(frozen=True)
class Inverse:
    """What one engine version can do about ``wanted``: ``exact`` (best first) are the
    resolutions of the tried ids that feed exactly it; otherwise ``refused`` says why none
    do, ``said`` is the engine's own refusal of the ids that name those layers directly
    (when it refused them), and ``nearest`` is the closest it feeds with as many states."""

    engine: Engine
    version: str | None
    arch: str | None
    num_layers: int
    wanted: tuple[Layer, ...]
    exact: tuple[Resolution, ...]
    nearest: Resolution | None
    refused: str | None
    said: str | None = None

    @property
    def ids(self) -> tuple[int, ...] | None:
        return self.exact[0].ids if self.exact else None

    def to_dict(self, best: Resolution | None = None) -> dict[str, object]:
        """As JSON; ``best``: the exact resolution to report (default: the best ranked)."""
        best = best if best in self.exact else next(iter(self.exact), None)
        ids = None if best is None or best.ids is None else list(best.ids)
        return {
            "engine": self.engine.name,
            "version": self.version,
            "arch": self.arch,
            "num_layers": self.num_layers,
            "want": [str(x) for x in self.wanted],
            "ids": ids,
            "config_key": config_key(self.engine),
            "config_line": None if ids is None else self.engine.config_line(ids),
            "problems": [] if best is None else [p.code for p in best.problems],
            "refused": self.refused,
            "engine_refusal": self.said,
            "nearest": None
            if self.nearest is None
            else {
                "ids": None if self.nearest.ids is None else list(self.nearest.ids),
                "layers": [str(x) for x in self.nearest.layers],
            },
        }


def inverse(
    engine: Engine,
    wanted: Sequence[Layer],
    num_layers: int,
    arch: str | None,
    version: str | None,
    use_installed: bool = True,
) -> Inverse:
    """The ids that make ``engine`` at ``version`` feed exactly ``wanted``, or why none do
    (``use_installed`` as for ``resolve``). Raises EagleContractError for a request no
    engine could take (too many layers, a layer beyond the target).

    Kept per process: one search tries up to thousands of id lists, and EC501's table and
    the self-test's mutations ask the same question of every engine release many times."""
    return _inverse(engine, tuple(wanted), num_layers, arch, version, use_installed)


@functools.lru_cache(maxsize=8192)
def _inverse(
    engine: Engine,
    wanted: tuple[Layer, ...],
    num_layers: int,
    arch: str | None,
    version: str | None,
    use_installed: bool,
) -> Inverse:
    if not 1 <= len(wanted) <= MAX_WANTED:
        raise EagleContractError(f"want 1 to {MAX_WANTED} layers, not {len(wanted)}")
    for layer in wanted:
        try:
            layer.check_bounds(num_layers)
        except ValueError as exc:
            raise EagleContractError(str(exc)) from None
    depths = [depth(x, num_layers) for x in wanted]
    fed: list[Resolution] = []
    said: dict[tuple[int, ...], str] = {}

    def attempt(candidates: Iterator[tuple[int, ...]]) -> None:
        for ids in candidates if num_layers >= 4 else ():
            if ids in said or ids in tried:
                continue
            tried.add(ids)
            try:
                fed.append(engine.resolve(num_layers, ids, arch, version, use_installed))
            except EagleContractError as exc:  # Unservable, or a version it does not know
                said[ids] = str(exc)

    tried: set[tuple[int, ...]] = set()
    attempt(_candidates(depths, num_layers))
    in_order = len(fed)  # the nearest is named from these: ids in the trainer's order
    if not any(r.layers == wanted for r in fed):
        # a rule may hang on the first id (SGLang DeepSeek/Kimi 0.5.13+: +1 only when it is
        # 1): ids in another order can reach layers no ascending list does
        attempt(_reordered(depths, num_layers))

    def key(res: Resolution) -> tuple[int, bool, int, tuple[int, ...]]:
        ids = res.ids or ()
        off = sum(abs(depth(a, num_layers) - b) for a, b in zip(res.layers, depths))
        moved = sum(abs(i - d) for i, d in zip(ids, depths) if i >= 0)
        return (off, bool(res.problems), moved, ids)

    ordered_fed = sorted(fed[:in_order], key=key)
    fed.sort(key=key)
    exact = tuple(r for r in fed if r.layers == wanted)
    nearest = next(
        (r for r in (ordered_fed or fed) if len(r.layers) == len(wanted)),
        next((r for r in fed if len(r.layers) == len(wanted)), None),
    )
    if exact:
        return Inverse(engine, version, arch, num_layers, wanted, exact, nearest, None)
    said_literal = said.get(literal(wanted))
    ordered = tuple(sorted(wanted, key=lambda x: depth(x, num_layers)))
    if ordered != wanted and len(set(wanted)) == len(wanted):
        found = inverse(engine, ordered, num_layers, arch, version, use_installed)
        if found.exact:  # it feeds these layers, only not in this order
            why = f"it feeds layers in ascending order, never {layer_list(wanted)}"
            return Inverse(
                engine, version, arch, num_layers, wanted, (), found.exact[0], why, said_literal
            )
    why = _why(wanted, fed, next(iter(said.values()), None), num_layers)
    return Inverse(engine, version, arch, num_layers, wanted, (), nearest, why, said_literal)


def _why(
    wanted: tuple[Layer, ...], fed: list[Resolution], first: str | None, num_layers: int
) -> str:
    if num_layers < 4:
        return f"num_layers {num_layers}: EAGLE-3 needs at least 4 layers"
    if not fed:
        return first or "no ids are served"
    reached = {x for r in fed for x in r.layers}
    missing = [x for x in wanted if x not in reached]
    if missing:
        return f"no ids make it feed {layer_list(missing)}"
    if len(set(wanted)) < len(wanted):
        return f"it feeds each layer once, never {layer_list(wanted)}"
    counts = sorted({len(r.layers) for r in fed})
    if len(wanted) not in counts:
        return f"it feeds {' or '.join(map(str, counts))} states, never {len(wanted)}"
    return f"no ids make it feed exactly {layer_list(wanted)}"


def common_ids(found: Sequence[Inverse]) -> tuple[int, ...] | None:
    """One id list that feeds the wanted layers on every one of ``found`` (the best on the
    first), else None."""
    if not found or not all(inv.exact for inv in found):
        return None
    common = set.intersection(*({r.ids for r in inv.exact} for inv in found))
    return next((r.ids for r in found[0].exact if r.ids in common), None)


def chosen(inv: Inverse, ids: tuple[int, ...] | None) -> Resolution | None:
    """The resolution of ``ids`` among ``inv``'s exact ones, else its best, else its nearest."""
    return next((r for r in inv.exact if r.ids == ids), next(iter(inv.exact), inv.nearest))


class Fixes:
    """EC501's hint per version of the contract's range, worked out once, on the first
    request. Where one id list serves the trained layers on several versions, it is the
    one suggested on each."""

    def __init__(
        self,
        engine: Engine,
        versions: Sequence[str],
        trained: Sequence[Layer],
        num_layers: int,
        arch: str | None,
        spec: str | None,
        in_contract: bool,
    ) -> None:
        self.engine, self.versions, self.trained = engine, list(versions), tuple(trained)
        self.num_layers, self.arch, self.spec = num_layers, arch, spec
        self.in_contract = in_contract  # the contract names aux_layer_ids: change them too
        self._answers: dict[str, tuple[Resolution | None, Inverse]] = {}
        self._everywhere = False

    def _answer(self) -> None:
        found = {
            v: inverse(self.engine, self.trained, self.num_layers, self.arch, _asked(v))
            for v in self.versions
        }
        pick = common_ids(list(found.values()))
        self._everywhere = pick is not None and len(self.versions) > 1
        if pick is None:  # one list for the versions that have one
            pick = common_ids([inv for inv in found.values() if inv.exact])
        for v, inv in found.items():
            self._answers[v] = (chosen(inv, pick), inv)

    def hint(self, versions: Sequence[str]) -> str:
        """The fix for ``versions`` (consecutive ones with the same answer said once)."""
        if not self._answers:
            self._answer()

        def key(version: str) -> object:
            res, inv = self._answers[version]
            return None if res is None else (res.ids, res.layers), inv.refused

        return "; ".join(self._text(run) for run in runs(versions, key))

    def _text(self, run: list[str]) -> str:
        title = self.engine.title
        where = title if run == [ANY] else f"{title} {span_label(run)}"
        res, inv = self._answers[run[0]]
        if res is None or res.ids is None:
            return f"{where}: {inv.refused}; retrain on layers it feeds (eagle-contract matrix)"
        line = f"set {self.engine.config_line(res.ids)} in {set_where(self.engine)}"
        if self.in_contract:
            line += f" and aux_layer_ids: {list(res.ids)} in serving"
        if inv.refused is None:
            if self._everywhere:
                line += f" (the same ids on every {title} version in {self.spec})"
            return f"{where}: {line}"
        nearest = layer_list(res.layers)
        on = f" on {res.arch}" if res.arch else ""
        return (
            f"{where}{on}: {inv.refused}; retrain on {nearest} (the nearest it can feed), "
            f"then {line}"
        )


def reachable(
    engine: Engine, layers: Sequence[Layer], num_layers: int, arch: str | None, version: str | None
) -> list[Resolution]:
    """What ``engine`` feeds for ids near ``layers`` (:func:`inverse`'s search), as many
    states as ``layers``: exact ones first, then the nearest."""
    found = inverse(engine, layers, num_layers, arch, version)
    return list(found.exact) or ([found.nearest] if found.nearest else [])


def ids_for(
    engine: Engine, layers: Sequence[Layer], num_layers: int, arch: str | None, version: str | None
) -> tuple[int, ...] | None:
    """Ids whose resolution under ``engine`` is exactly ``layers`` (None: no ids make it
    feed them)."""
    return inverse(engine, layers, num_layers, arch, version).ids
