"""Fix suggestions for a layout mismatch (EC501's hint): per engine version, the draft ids
that make the engine feed the layers the trainer fed, as the config.json line to paste, or,
where no ids can, the nearest layers it can feed, to retrain on.

Versions are the engine's release strings, ``"any"`` for an unversioned engine (vLLM).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from ..layers import Layer
from .base import Engine, Resolution, depth

ANY = "any"


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


class Fixes:
    """What to set (or retrain on) per version of the contract's range, worked out once, on
    the first request. Where one id list serves the trained layers on several versions, it
    is the one suggested on each."""

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
        self._answers: dict[str, tuple[Resolution | None, bool]] = {}
        self._everywhere = False

    def _answer(self) -> None:
        found = {
            v: self.engine.reachable(
                self.trained, self.num_layers, self.arch, None if v == ANY else v
            )
            for v in self.versions
        }
        exact = {v: [r for r in rs if r.layers == self.trained] for v, rs in found.items()}
        served = [{r.ids for r in rs} for rs in exact.values() if rs]
        common = set.intersection(*served) if served else set()
        self._everywhere = bool(common) and len(served) == len(self.versions) > 1
        for v, rs in exact.items():
            best = next((r for r in rs if r.ids in common), rs[0] if rs else None)
            self._answers[v] = (best, True) if best else (next(iter(found[v]), None), False)

    def hint(self, versions: Sequence[str]) -> str:
        """The fix for ``versions`` (consecutive ones with the same answer said once)."""
        if not self._answers:
            self._answer()

        def key(version: str) -> object:
            res, exact = self._answers[version]
            return None if res is None else (res.ids, res.layers), exact

        return "; ".join(self._text(run) for run in runs(versions, key))

    def _text(self, run: list[str]) -> str:
        title = self.engine.title
        where = title if run == [ANY] else f"{title} {span_label(run)}"
        res, exact = self._answers[run[0]]
        trained = ", ".join(map(str, self.trained))
        if res is None or res.ids is None:
            return f"{where}: no ids near {trained} are served; capture the layers it feeds"
        line = f"set {self.engine.config_line(res.ids)} in the draft's config.json"
        if self.in_contract:
            line += f" and aux_layer_ids: {list(res.ids)} in serving"
        if exact:
            if self._everywhere:
                line += f" (the same ids on every {title} version in {self.spec})"
            return f"{where}: {line}"
        depths = [depth(x, self.num_layers) for x in self.trained]
        if any(a >= b for a, b in itertools.pairwise(depths)):
            why = f"it feeds each layer once, in ascending order, never {trained}"
        else:
            missing = [str(t) for t, n in zip(self.trained, res.layers) if t != n]
            why = f"no ids make it feed {', '.join(missing)}"
        nearest = ", ".join(map(str, res.layers))
        on = f" on {res.arch}" if res.arch else ""
        return f"{where}{on}: {why}; retrain on {nearest} (the nearest it can feed), then {line}"
