"""What a family runs on: a :class:`Unit` (one family on the contract or on one shard), the
run's :class:`Settings`, and the :class:`Resources` a family may ask for while it runs (the
planner's ``Runner`` provides them: shards read once, the target opened once, captures)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from ..capture.files import CaptureIndex
    from ..contract.model import Contract
    from ..models.acceptance import Estimate
    from ..models.target import TargetModel
    from ..shards.shard import Shard


@dataclass(frozen=True)
class Unit:
    """One check family on one shard (or on the contract when ``shard`` is None)."""

    contract: Contract
    check: str
    shard: Path | None = None
    label: str = ""
    evidence: Path | None = None  # a sampled shard whose norms back the layout hints
    evidence_label: str = ""
    problem: str = ""  # why there are no shards (the ``shards`` unit)
    # the shard files or folders the run reads (the command's, else training.shards): what a
    # contract-level family that reads many shards reads (token-parity, vocabulary, probe)
    roots: tuple[Path, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.check}[{self.label}]" if self.shard is not None else self.check


@dataclass(frozen=True)
class MeasureSettings:
    """A running engine with the draft loaded, to measure acceptance on (``measure``,
    ``--eagle-measure-*``): its engine and URL, the request bounds, and the shards whose
    prompts it is sent (``()``: the contract's own, sampled ``sample`` with ``seed``)."""

    engine: str
    url: str
    timeout: float = 120.0
    new_tokens: int = 64
    shards: tuple[Path, ...] = ()
    sample: int | None = 10
    seed: int = 0


@dataclass(frozen=True)
class Settings:
    """What the run's options ask of every unit (a worker builds its runner from them):
    the engine's launch line, a target model and reference capture overriding the
    contract's, capture folders and a live SGLang server."""

    serving_args: str | None = None
    serving_env: tuple[tuple[str, str], ...] = ()  # --serving-env's variables (EC517-EC520)
    serving_env_label: str = ""  # where they were read
    target_model: Path | None = None
    serving_target_model: Path | None = None  # the checkpoint served (target identity)
    tokenizer: Path | None = None  # the serving tokenizer folder (the tokens families)
    conversations: Path | None = None  # the JSONL the shards were made from (token parity)
    render_url: str | None = None  # a running engine's /tokenize (token parity)
    reference: bool | None = None
    captures: tuple[Path, ...] = ()
    sglang_url: str | None = None
    timeout: float = 60.0
    curve: bool = False  # measure the target's per-layer norm curve (an HTML report wants it)
    measure: MeasureSettings | None = None  # a running engine's own acceptance counters


COMPARED = "compared_shards"
"""The key of a contract-level family's measure listing the shard files it compared: the
run's summary counts them with the shard units' (``ok: 1 checks on 3 shard(s)``)."""


def shards_counted(paths: Iterable[Path | None], measured: Iterable[Mapping[str, Any]]) -> int:
    """The distinct shard files a run's units read: the shard units' ``paths`` and the files
    contract-level families list under :data:`COMPARED`."""
    seen = {str(p) for p in paths if p is not None}
    for m in measured:
        seen.update(str(p) for p in m.get(COMPARED, ()))
    return len(seen)


T = TypeVar("T")


class Resources(Protocol):
    """What a family may ask of the run (:class:`..plan.planner.Runner`)."""

    settings: Settings

    def shard(self, contract: Contract, path: Path, label: str) -> Shard: ...

    def shard_of(self, unit: Unit) -> Shard: ...

    def target(self, contract: Contract) -> TargetModel | None: ...

    def serving_target(self, contract: Contract) -> Path | None: ...

    def reference(self, contract: Contract) -> bool: ...

    def captures(self) -> CaptureIndex: ...

    def unreported_capture_problems(self, index: CaptureIndex) -> list[str]: ...

    def estimates(self, contract: Contract, roots: Sequence[Path] = ()) -> list[Estimate]: ...

    def first_time(self, key: object) -> bool:
        """True the first time ``key`` is asked for in this run (a measure taken once)."""
        ...

    def once(self, key: object, make: Callable[[], T]) -> T:
        """``make()``, made once per run for ``key`` (what a family's check and its measure
        share)."""
        ...
