"""What one ``check`` is asked to do, built once from either shell's options: the CLI's
``check`` (``shells/check.py``) and ``pytest --eagle-contract`` (``shells/plugin.py``) each
turn their options into a :class:`CheckRequest` with :meth:`CheckRequest.of`, and plan
and run from it alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..checks.unit import MeasureSettings, Settings
from ..shards.discovery import DEFAULT_SAMPLE

if TYPE_CHECKING:
    from ..checks.unit import Unit
    from ..contract.model import Contract
    from ..shards.discovery import Sampling


@dataclass(frozen=True)
class CheckRequest:
    """The shards (``()``: the contract's own) and how many to sample, the families
    (``checks`` None: every default one that applies; ``without``: left out), and the
    run's :class:`Settings` (target model, reference capture, captures, server)."""

    shards: tuple[Path, ...] = ()
    sample: Sampling = DEFAULT_SAMPLE
    seed: int = 0
    checks: tuple[str, ...] | None = None
    without: tuple[str, ...] = ()
    settings: Settings = field(default_factory=Settings)

    @classmethod
    def of(
        cls,
        *,
        shards: Sequence[Path] | None = None,
        sample: Sampling = DEFAULT_SAMPLE,
        seed: int = 0,
        checks: Sequence[str] | None = None,
        no_sharpness: bool = False,
        target_model: Path | None = None,
        serving_target_model: Path | None = None,
        reference: bool | None = None,
        captures: Sequence[Path] = (),
        sglang_url: str | None = None,
        timeout: float = 60.0,
        serving_args: str | None = None,
        serving_env: Mapping[str, str] | None = None,
        serving_env_label: str = "",
        tokenizer: Path | None = None,
        conversations: Path | None = None,
        render_url: str | None = None,
        measure: MeasureSettings | None = None,
    ) -> CheckRequest:
        """The one mapping from the shells' options to a request."""
        settings = Settings(
            serving_args=serving_args,
            serving_env=tuple(sorted((serving_env or {}).items())),
            serving_env_label=serving_env_label,
            target_model=target_model,
            serving_target_model=serving_target_model,
            reference=reference,
            captures=tuple(captures),
            sglang_url=sglang_url,
            timeout=timeout,
            tokenizer=tokenizer,
            conversations=conversations,
            render_url=render_url,
            measure=(
                None
                if measure is None
                else replace(measure, shards=tuple(shards or ()), sample=sample, seed=seed)
            ),
        )
        return cls(
            shards=tuple(shards or ()),
            sample=sample,
            seed=seed,
            checks=None if checks is None else tuple(checks),
            without=("sharpness",) if no_sharpness else (),
            settings=settings,
        )

    def plan(self, contract: Contract) -> list[Unit]:
        """The contract's units for this request (:func:`.planner.plan`)."""
        from .planner import plan

        s = self.settings
        return plan(
            contract,
            list(self.shards) or None,
            self.sample,
            self.seed,
            self.checks,
            s.target_model,
            capture=bool(s.captures or s.sglang_url),
            reference=bool(s.reference),
            without=self.without,
            serving_target=s.serving_target_model,
            tokenizer=s.tokenizer,
            conversations=s.conversations,
            measure=s.measure is not None,
        )
