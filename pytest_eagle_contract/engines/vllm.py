"""vLLM: its EAGLE-3 rules per release and model runner (``vllm_rules``, from its code).

A release reads the draft's ids from the config.json keys its runner reads (0.8.5-0.11.0:
none, always the default), captures them in its layer loop (ascending, each layer once; an
id the loop never reaches is dropped) and builds the draft fc for a fixed number of states:
any other count, or an id 0 its loop adds ``None`` to, fails at start-up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EagleContractError, Problem, Unservable
from ..layers import Layer
from . import vllm_rules as rules
from .base import Engine, Position, Query, Resolution, eagle3_default_ids, releases_for
from .draft_config import read_draft_json

if TYPE_CHECKING:
    from .draft_config import DraftConfig

RUNNERS = ("v1", "v2")  # v1/worker/gpu_model_runner.py, v1/worker/gpu/model_runner.py
AUTO = "auto"  # the runner the release starts by default for the architecture
ENV = "VLLM_USE_V2_MODEL_RUNNER"
_LLAMA = "LlamaForCausalLM"


class DraftIds(tuple[int, ...]):
    """The ids the newest vLLM reads from a draft's config.json, carrying every id list the
    config holds under a key some release reads (``found``) and its ``num_aux_hidden_states``,
    so each release resolves what it itself would read."""

    found: dict[str, tuple[int, ...]]
    num_aux: int | None

    def __new__(
        cls, ids: Iterable[int], found: Mapping[str, tuple[int, ...]], num_aux: int | None
    ) -> DraftIds:
        self = super().__new__(cls, ids)
        self.found, self.num_aux = dict(found), num_aux
        return self


def _id_list(value: object) -> tuple[int, ...] | None:
    if isinstance(value, list) and value and all(type(i) is int for i in value):
        return tuple(value)
    return None


def read_draft_ids(path: str | Path) -> DraftIds | None:
    """Every id list under a key some vLLM release reads, from a draft's config.json (None:
    there are none)."""
    data = read_draft_json(Path(path))
    found = {}
    for key in rules.eagle_keys():
        outer, _, inner = key.rpartition(".")
        holder = data.get(outer) if outer else data
        if isinstance(holder, dict) and (ids := _id_list(holder.get(inner))) is not None:
            found[key] = ids
    if not found:
        return None
    num_aux = data.get("num_aux_hidden_states")
    newest = rules.release(rules.releases()[-1])
    read = _pick(found, newest.runners.get(newest.default_runner, ()))
    return DraftIds(read[0] if read else (), found, num_aux if type(num_aux) is int else None)


def _pick(
    found: Mapping[str, tuple[int, ...]], keys: Sequence[tuple[str, int]]
) -> tuple[tuple[int, ...], str] | None:
    """The ids a runner reading ``keys`` (in order, + shift) takes, and the key."""
    for key, shift in keys:
        if key in found:
            return tuple(i + shift for i in found[key]), key
    return None


def _arch(arch: str | None, version: str, notes: list[str]) -> tuple[str, rules.Capture]:
    if not arch:
        notes.append(f"no --arch: the {_LLAMA} loop's rule")
        arch = _LLAMA
    known = rules.known_archs()
    if arch not in known:
        from .sglang_table import canonical_arch

        lower = {a.lower(): a for a in known}
        arch = lower.get(canonical_arch(arch).lower(), lower.get(arch.lower(), arch))
    found = rules.capture(arch, version)
    if found is not None and found.via == "text_config":
        raise Unservable(
            f"{arch} passes the ids to the language model its checkpoint's "
            f"text_config.architectures names ({found.wrapper}): resolve with that "
            "architecture and the text config's num_hidden_layers"
        )
    if found is not None:
        if found.via:
            notes.append(
                f"{arch} ({found.wrapper}) passes the ids to its language model "
                f"{found.via}: L is the text config's num_hidden_layers"
            )
        return arch, found
    if arch in known:
        raise Unservable(
            f"{arch} has no EAGLE-3 capture in this vLLM release (served in "
            f"{', '.join(rules.spans_of(arch))})"
        )
    raise Unservable(
        f"{arch[:80]} has no EAGLE-3 capture in any vLLM {rules.releases()[0]} to "
        f"{rules.releases()[-1]} (not SupportsEagle3, or a multimodal wrapper: give its "
        "language model's architecture)"
    )


def _fc_width(rel: rules.Release, ids: Sequence[int] | None) -> int:
    if isinstance(ids, DraftIds):
        for key in rel.fc_from:
            if key == "num_aux_hidden_states" and ids.num_aux is not None:
                return ids.num_aux
            if key.startswith("len:") and key[4:] in ids.found:
                return len(ids.found[key[4:]])
    return rel.fc_default


class VLLM(Engine):
    name = "vllm"
    title = "vLLM"
    id_keys = ("eagle_aux_hidden_state_layer_ids", "eagle_config.eagle_aux_hidden_state_layer_ids")

    def __init__(self, runner: str | None = None) -> None:
        if runner is not None and runner not in (AUTO, *RUNNERS):
            raise EagleContractError(
                f"unknown vLLM runner {runner!r}: one of {', '.join((AUTO, *RUNNERS))}"
            )
        self.runner = None if runner == AUTO else runner

    def versions(self, spec: str | None) -> list[str | None]:
        return [None] if spec is None else list(releases_for(spec, rules.releases(), "vLLM"))

    def known_archs(self) -> frozenset[str]:
        return rules.known_archs()

    def draft_ids(self, draft: DraftConfig) -> tuple[int, ...] | None:
        return read_draft_ids(draft.path)

    def n_aux(self, draft: DraftConfig, version: str | None) -> int:
        rel = rules.release(version or rules.releases()[-1])
        return _fc_width(rel, self.draft_ids(draft))

    def _resolve(self, q: Query) -> Resolution:
        if q.num_layers < 4:
            raise Unservable(f"num_layers {q.num_layers}: EAGLE-3 defaults need at least 4 layers")
        rel = rules.release(q.assume(rules.releases()[-1], "vLLM"))
        q.arch, cap = _arch(q.arch, rel.version, q.notes)
        runner, why = self._runner(rel, q.arch)
        q.assumed.append(("runner", runner, why))
        used = self._read(q, rel, runner)
        self._other_runner(q, rel, runner)
        default = eagle3_default_ids(q.num_layers)
        if used is None:
            q.notes.append(f"no ids read: vLLM's default {default} ({rel.default_ids})")
        wanted = default if used is None else list(used)
        return self._capture(q, wanted, cap, rel, runner, used)

    def launch_runner(self, rel: rules.Release, arch: str) -> tuple[str, str]:
        """The runner this release starts for ``arch`` (or the one asked for), and why:
        what ``resolve`` answers for, for any method (DFlash too, ``dflash.py``)."""
        return self._runner(rel, arch)

    def _runner(self, rel: rules.Release, arch: str) -> tuple[str, str]:
        """The runner this release starts for ``arch`` (or the one asked for), and why."""
        choice = rel.choice
        if self.runner is not None:
            if self.runner not in rel.runners:
                gone = "removed" if choice.how == "only" and choice.default == "v2" else "absent"
                raise Unservable(
                    f"vLLM {rel.span}: its {self.runner} runner feeds no EAGLE-3 aux states "
                    f"({self.runner} {gone}; it runs {', '.join(rel.runners)})"
                )
            return self.runner, "given (--runner)"
        if choice.how == "only":
            return choice.default, f"vLLM {rel.version}: {choice.why}"
        if choice.how == "env":
            other = "v2" if choice.default == "v1" else "v1"
            return choice.default, (
                f"vLLM {rel.version}: {choice.why} ({ENV}={'1' if other == 'v2' else '0'} "
                f"starts {other}: --runner {other})"
            )
        said = choice.others.get(arch)
        if said is not None:
            runner, _, kind = said.partition(":")
            traits = {
                "moe": "taken as MoE (its model file builds FusedMoE layers; vLLM counts the "
                "checkpoint's experts: a dense checkpoint starts the other runner)",
                "hybrid": "hybrid (IsHybrid)",
                "listed": f"on {', '.join(choice.lists) or 'a list'}",
            }
            is_ = " and ".join(traits.get(k, k) for k in kind.split("+"))
            lists = f", not on {', '.join(choice.lists)}" if kind != "listed" else ""
            return runner, (
                f"vLLM {rel.version}: {ENV} unset and {arch} is {is_}{lists}: "
                f"use_v2_model_runner gives {runner} (--runner to set it)"
            )
        instead = ", ".join(choice.fallbacks)
        return choice.default, (
            f"vLLM {rel.version}: {ENV} unset and a default EAGLE-3 launch (CUDA, Triton) of "
            f"{arch} meets none of use_v2_model_runner's exceptions: {choice.default}"
            + (
                f"; it starts v1 instead with {instead}"
                if instead and choice.default == "v2"
                else ""
            )
            + f"; {ENV}=0/1 forces one (--runner to set it)"
        )

    def _other_runner(self, q: Query, rel: rules.Release, runner: str) -> None:
        """A note when the release's other runner would read the draft's ids differently."""
        ids = q.ids
        if self.runner is not None or not isinstance(ids, DraftIds):
            return
        for other in rel.runners:
            if other != runner and _pick(ids.found, rel.runners[other]) != _pick(
                ids.found, rel.runners[runner]
            ):
                read = _pick(ids.found, rel.runners[other])
                what = f"{read[1]} {list(read[0])}" if read else "none of these keys (its default)"
                q.notes.append(
                    f"vLLM {rel.version}'s {other} runner would read {what}: "
                    f"resolve --runner {other} for that launch"
                )

    def _read(self, q: Query, rel: rules.Release, runner: str) -> Sequence[int] | None:
        """The ids this release's runner takes: a draft config's by its own keys; ids given
        as they are count as read, unless the release reads none at all."""
        ids, keys = q.ids, rel.runners[runner]
        if not isinstance(ids, DraftIds):
            if ids is not None and not keys:
                q.problems.append(
                    Problem(
                        "EC508",
                        f"vLLM {rel.span} ({runner} runner) reads no ids from the draft "
                        f"config: {list(ids)} are not used, it feeds its default",
                    )
                )
                return None
            return ids
        picked = _pick(ids.found, keys)
        if picked is None:
            read = ", ".join(k for k, _ in keys) or "no key: it always uses its default"
            q.problems.append(
                Problem(
                    "EC508",
                    f"vLLM {rel.span} ({runner} runner) does not read "
                    f"{', '.join(ids.found)} from the draft config (it reads {read})",
                )
            )
            return None
        if len(ids.found) > 1:
            q.notes.append(f"vLLM {rel.version} ({runner} runner) reads {picked[1]}")
        return picked[0]

    def _capture(
        self,
        q: Query,
        wanted: list[int],
        cap: rules.Capture,
        rel: rules.Release,
        runner: str,
        used: Sequence[int] | None,
    ) -> Resolution:
        low = 1 if cap.id0 == "never" else 0
        high = q.num_layers - 1 + cap.last
        reached = sorted({i for i in wanted if low <= i <= high})
        fc = _fc_width(rel, q.ids)
        where = f"vLLM {cap.span} {cap.file}"
        if 0 in reached and cap.id0 == "crash":
            raise Unservable(
                f"id 0: {where} adds hidden_states + residual before layer 0, where residual "
                "is None (TypeError at the start-up forward)"
            )
        if len(reached) != fc:
            dropped = sorted({i for i in wanted if not low <= i <= high})
            why = f"ids {dropped} lie outside [{low}, {high}], " if dropped else ""
            raise Unservable(
                f"{where}: {why}{len(reached)} distinct aux states captured, the draft fc is "
                f"built for {fc}: shape mismatch at the start-up forward"
            )
        if len(set(wanted)) != len(wanted):
            q.notes.append("duplicate ids collapse: each layer is captured once")
        if wanted != sorted(wanted):
            q.notes.append(f"ids {wanted} are not ascending: vLLM concatenates in layer order")
        return q.answer(
            tuple(Position(i, i, Layer(i + cap.plus)) for i in reached),
            f"built-in rules: vLLM {rel.span}, {runner} runner reads "
            f"{[k for k, _ in rel.runners[runner]]}; {cap.file} ({cap.span}): id k = "
            f"residual:k{f'+{cap.plus}' if cap.plus else ''}, id 0 {cap.id0}, "
            f"ids up to L{cap.last - 1:+d}".removesuffix("+0")
            + f"; fc for {fc} states",
            used,
        )
