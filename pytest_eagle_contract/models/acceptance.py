"""The acceptance estimator (docs/probe.md): one module for the ``probe`` family, the
``probe`` command, the demo and the reports.

On the target's own greedy continuations of prompts, the draft drafts a chain of K tokens
from every position, the first step from the aux states a layout names, later steps from
its own pre-norm output (as SGLang and vLLM run it); the target accepts the longest prefix
that equals its greedy tokens.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CodedError
from ..layers import Layer

if TYPE_CHECKING:
    import torch

    from ..contract.model import Contract
    from .draft_model import EagleDraft
    from .target import TargetModel

CONVENTION = (
    "accept_length: tokens per target forward, counting the target's own token "
    "(1 + accepted draft tokens, greedy chain drafting); per_step[s]: the share of "
    "chains reaching step s+1 whose step s+1 token is accepted"
)
STEPS, SEQUENCES, LENGTH, PROMPT = 4, 8, 96, 16  # the gate's probe (docs/probe.md)
PAST = 32  # tokens the long bucket continues past the draft's max position
Layouts = list[tuple[str, tuple[Layer, ...]]]
"""Named aux layouts: the canonical layers whose states a layout feeds the draft, in order."""


@dataclass(frozen=True)
class Estimate:
    name: str
    layers: tuple[Layer, ...]
    accept_length: float
    per_step: tuple[float, ...]
    chains: int
    positions_from: int = 0  # the chains counted start at this position (the long bucket)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "layers": [str(x) for x in self.layers],
            "accept_length": round(self.accept_length, 4),
            "per_step": [round(p, 4) for p in self.per_step],
            "chains": self.chains,
            "positions_from": self.positions_from,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Estimate:
        """Rebuild from :meth:`to_dict` (what the probe family measured for the reports)."""
        return cls(
            str(data["name"]),
            tuple(Layer.parse(str(x)) for x in data["layers"]),
            float(data["accept_length"]),
            tuple(float(p) for p in data["per_step"]),
            int(data["chains"]),
            int(data.get("positions_from", 0)),
        )

    def quote(self) -> str:
        return f"{self.name} ({', '.join(map(str, self.layers))}) {self.accept_length:.3f}"


THINKING, NO_THINKING = "thinking", "no-thinking"  # the thinking buckets' row suffixes
EMPTY_THINK_MAX = 2  # tokens inside a think block that leave it empty (checks.tokens' census)


def inside_think(ids: Sequence[int], think: tuple[int, int]) -> list[bool]:
    """Per position: whether it sits inside a think block, i.e. the last think token at or
    before it is the opening one (``think`` = the open and close ids; the open token is
    inside, the close token is not: after it the text is the answer)."""
    open_id, close_id = think
    out, inside = [], False
    for t in ids:
        if t == open_id:
            inside = True
        elif t == close_id:
            inside = False
        out.append(inside)
    return out


def filled_block(ids: Sequence[int], think: tuple[int, int]) -> tuple[int, int] | None:
    """The first think block with more than EMPTY_THINK_MAX tokens inside, as (index of
    its open token, index of its close token, or len(ids) when unclosed), or None."""
    open_id, close_id = think
    start = None
    for i, t in enumerate(ids):
        if t == open_id:
            start = i
        elif t == close_id and start is not None:
            if i - start - 1 > EMPTY_THINK_MAX:
                return start, i
            start = None
    if start is not None and len(ids) - start - 1 > EMPTY_THINK_MAX:
        return start, len(ids)
    return None


def thinking_prompts(
    shard_ids: list[torch.Tensor], think: tuple[int, int], size: int
) -> list[torch.Tensor]:
    """For each shard holding a filled think block: its ids up to ``size`` tokens into the
    block (at most half of it, at least one), so that the target's continuation goes on
    thinking. Shards without one give no prompt."""
    out = []
    for ids in shard_ids:
        block = filled_block(ids.tolist(), think)
        if block is None:
            continue
        start, end = block
        out.append(ids[: start + 1 + max(1, min(size, (end - start - 1) // 2))])
    return out


def continued(model: Any, prompts: list[torch.Tensor], new: int) -> list[torch.Tensor]:
    """Each prompt continued greedily ``new`` tokens (prompts of one length batched),
    in the prompts' order."""
    by_length: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_length.setdefault(p.numel(), []).append(i)
    out: dict[int, torch.Tensor] = {}
    for length, which in by_length.items():
        got = greedy_sequences(model, [prompts[i] for i in which], length + new)
        out.update(zip(which, got))
    return [out[i] for i in range(len(prompts))]


@dataclass(frozen=True)
class ThinkingSplit:
    """The probe's chains split by whether their start sits inside a think block."""

    think_token_ids: tuple[int, int]
    shards: int  # shards read for prompts
    with_thinking: int  # of them, those holding a filled think block (a thinking prompt)
    chains: dict[str, int]  # THINKING, NO_THINKING: chains counted in each
    estimates: list[Estimate]  # '<layout> @ thinking', '<layout> @ no-thinking'; or none
    note: str | None  # why there is no split

    def to_dict(self) -> dict[str, Any]:
        return {
            "think_token_ids": list(self.think_token_ids),
            "shards": self.shards,
            "with_thinking": self.with_thinking,
            "chains": dict(self.chains),
            "note": self.note,
        }


@dataclass(frozen=True)
class Chains:
    """The probe's drafting: ``draft`` drafts chains of ``steps`` tokens from every start,
    the first step from the aux states each of ``layouts`` names in the target ``model``'s
    forward; the target accepts the longest prefix that equals its greedy tokens."""

    draft: EagleDraft
    model: Any
    layouts: Layouts
    steps: int

    def refuse_unfit(self, hidden: int) -> None:
        """A usage error naming what does not fit between the draft and the target for any
        layout (each layer ``hidden`` wide), before the target generates anything."""
        embedding, head = _embedding_and_head(self.model)
        for name, layers in self.layouts:
            _refuse(self.draft, name, layers, embedding, head, len(layers) * hidden)

    def counts(
        self, sequences: list[torch.Tensor], firsts: list[int], batch: int = 8
    ) -> dict[str, list[torch.Tensor]]:
        """Per layout, per sequence (in order): the accepted count of each chain from start
        ``firsts[i]`` on (:func:`.draft_model.accepted`). The aux states come from one
        forward over ``batch`` sequences of a length at a time."""
        import torch

        from .draft_model import accepted

        device = next(self.model.parameters()).device
        draft = self.draft.to(device)
        embedding, head = _embedding_and_head(self.model)
        needed = {layer for _, layers in self.layouts for layer in layers}
        counts: dict[str, list[torch.Tensor]] = {name: [] for name, _ in self.layouts}
        done = 0
        for group in _groups(sequences, batch):
            ids = torch.stack(group).to(device)
            states = _states(self.model, ids, needed)
            for b, row in enumerate(ids):
                first = firsts[done + b]
                for name, layers in self.layouts:
                    width = sum(int(states[layer].shape[-1]) for layer in layers)
                    _refuse(draft, name, layers, embedding, head, width)
                    aux = torch.cat([states[layer][b] for layer in layers], -1)
                    drafts = draft.chain(aux, row, embedding, self.steps, lm_head=head, first=first)
                    counts[name].append(accepted(drafts, row, first).cpu())
            done += len(group)
        return counts

    def estimates(
        self, sequences: list[torch.Tensor], first: int, batch: int = 8
    ) -> list[Estimate]:
        """Acceptance under each layout, on greedy ``sequences`` (chains start at ``first``)."""
        counts = self.counts(sequences, [first] * len(sequences), batch)
        return self._rows(counts, len(sequences))

    def estimates_from(self, sequences: list[torch.Tensor], firsts: list[int]) -> list[Estimate]:
        """Acceptance under each layout, sequence ``i``'s chains starting at ``firsts[i]``
        (prompts of their own lengths: ``measure`` compares an engine's rounds with them)."""
        return self._rows(self.counts(sequences, firsts), len(sequences))

    def _rows(self, counts: dict[str, list[torch.Tensor]], sequences: int) -> list[Estimate]:
        """A row per layout from the counts of the first ``sequences`` sequences."""
        import torch

        return [
            _summary(name, layers, torch.cat(counts[name][:sequences]), self.steps)
            for name, layers in self.layouts
        ]

    def long_bucket(self, prompts: list[torch.Tensor], past: int = PAST) -> list[Estimate]:
        """Each layout's acceptance on chains that start past the draft's max position
        (``draft.max_positions``, M): ``prompts`` of M tokens, continued greedily ``past``
        more, chains counted from position M on, the draft's RoPE clamped at M - 1 as an
        engine that sizes its rotary table from the draft's config does. Named
        ``<layout> @ pos>=M``; against the same layouts at short positions, the drop is what
        the clamp (and positions the draft never trained on) cost."""
        import dataclasses

        from ..errors import UsageError

        limit = self.draft.max_positions
        if past < self.steps + 2:
            raise UsageError(
                f"the long bucket needs more than {self.steps + 1} tokens past position {limit}"
            )
        if any(p.numel() != limit for p in prompts):
            raise UsageError(f"the long bucket's prompts must be {limit} tokens long")
        clamped = dataclasses.replace(
            self, draft=dataclasses.replace(self.draft, position_limit=limit)
        )
        sequences = greedy_sequences(self.model, prompts, limit + past)
        return [
            dataclasses.replace(e, name=f"{e.name} @ pos>={limit}", positions_from=limit)
            for e in clamped.estimates(sequences, limit)
        ]

    def thinking_split(
        self, sequences: list[torch.Tensor], firsts: list[int], think: tuple[int, int]
    ) -> tuple[dict[str, list[torch.Tensor]], list[Estimate], dict[str, int]]:
        """Each layout's chains on ``sequences`` (chains of sequence i from ``firsts[i]``
        on), split by where the chain drafts from: the chain from start ``i`` embeds token
        ``i+1`` and guesses the tokens after it, so it is a thinking chain when token
        ``i+1`` sits inside a think block (:func:`inside_think`). Returns the per-sequence
        counts, the rows ``<layout> @ thinking`` and ``<layout> @ no-thinking`` (none unless
        both kinds have chains) and how many chains each kind has."""
        import torch

        counts = self.counts(sequences, firsts)
        kinds: list[torch.Tensor] = []
        for seq, first in zip(sequences, firsts):
            inside = inside_think(seq.tolist(), think)
            n = int(counts[self.layouts[0][0]][len(kinds)].numel()) if self.layouts else 0
            kinds.append(torch.tensor(inside[first + 1 : first + 1 + n], dtype=torch.bool))
        where = torch.cat(kinds) if kinds else torch.zeros(0, dtype=torch.bool)
        chains = {THINKING: int(where.sum()), NO_THINKING: int((~where).sum())}
        rows: list[Estimate] = []
        if all(chains.values()):
            for name, layers in self.layouts:
                a = torch.cat(counts[name])
                rows.append(_summary(f"{name} @ {THINKING}", layers, a[where], self.steps))
                rows.append(_summary(f"{name} @ {NO_THINKING}", layers, a[~where], self.steps))
        return counts, rows, chains

    def by_thinking(
        self,
        sequences: list[torch.Tensor],
        first: int,
        shard_ids: list[torch.Tensor],
        think: tuple[int, int],
        size: int,
        new: int,
    ) -> tuple[list[Estimate], ThinkingSplit]:
        """:meth:`estimates` on ``sequences``, and the thinking split: their chains and
        those of the shards' :func:`thinking_prompts` (``size`` tokens into each filled
        think block) continued ``new`` tokens, split by :meth:`thinking_split`. Shards that
        hold no filled think block, or chains all of one kind, give a note instead of the
        split's rows."""
        extra = continued(self.model, thinking_prompts(shard_ids, think, size), new)
        firsts = [first] * len(sequences) + [len(x) - new - 2 for x in extra]
        counts, rows, chains = self.thinking_split(sequences + extra, firsts, think)
        main = self._rows(counts, len(sequences))
        note = None
        if not extra:  # the shards hold one kind: whatever the target continued with, no split
            rows = []
            note = (
                f"the {len(shard_ids)} shards read hold no filled think block between ids "
                f"{list(think)}: no split"
            )
        elif not rows:
            kind = THINKING if chains[THINKING] else NO_THINKING
            note = f"every chain is {kind}: no split"
        split = ThinkingSplit(think, len(shard_ids), len(extra), chains, rows, note)
        return main, split


def estimate(
    draft: EagleDraft,
    model: Any,
    sequences: list[torch.Tensor],
    layouts: Layouts,
    steps: int,
    first: int,
    batch: int = 8,
) -> list[Estimate]:
    """Acceptance under each layout, on greedy ``sequences`` (chains start at ``first``):
    :meth:`Chains.estimates` in one call."""
    return Chains(draft, model, layouts, steps).estimates(sequences, first, batch)


def long_bucket(
    draft: EagleDraft,
    model: Any,
    prompts: list[torch.Tensor],
    layouts: Layouts,
    steps: int,
    past: int = PAST,
) -> list[Estimate]:
    """:meth:`Chains.long_bucket` in one call."""
    return Chains(draft, model, layouts, steps).long_bucket(prompts, past)


def thinking_split(
    draft: EagleDraft,
    model: Any,
    sequences: list[torch.Tensor],
    firsts: list[int],
    layouts: Layouts,
    steps: int,
    think: tuple[int, int],
) -> tuple[dict[str, list[torch.Tensor]], list[Estimate], dict[str, int]]:
    """:meth:`Chains.thinking_split` in one call."""
    return Chains(draft, model, layouts, steps).thinking_split(sequences, firsts, think)


def _summary(
    name: str, layers: tuple[Layer, ...], a: torch.Tensor, steps: int, positions_from: int = 0
) -> Estimate:
    """One row from the accepted counts ``a`` of its chains."""
    reached = [int((a >= s).sum()) for s in range(steps + 1)]
    per_step = tuple(reached[s + 1] / reached[s] if reached[s] else 0.0 for s in range(steps))
    mean = float(a.float().mean()) if a.numel() else 0.0
    return Estimate(name, layers, 1.0 + mean, per_step, int(a.numel()), positions_from)


def _embedding_and_head(model: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's input embedding rows and its lm_head, which the draft drafts with."""
    return (
        model.get_input_embeddings().weight.detach(),
        model.get_output_embeddings().weight.detach(),
    )


def _refuse(
    draft: EagleDraft,
    name: str,
    layers: tuple[Layer, ...],
    embedding: torch.Tensor,
    head: torch.Tensor,
    width: int,
) -> None:
    """A usage error where layout ``name`` feeds no aux states, or where the draft cannot
    run on ``width`` wide aux states with the target's ``embedding`` and ``head``."""
    from ..errors import UsageError
    from .draft_shapes import refuse

    if not layers:
        raise UsageError(f"draft {draft.path}: layout {name} feeds no aux states")
    refuse(draft.path, draft.run_problems(embedding, head, width))


def _groups(sequences: list[torch.Tensor], size: int) -> list[list[torch.Tensor]]:
    """Runs of up to ``size`` consecutive sequences of one length."""
    out: list[list[torch.Tensor]] = []
    for seq in sequences:
        if out and len(out[-1]) < size and out[-1][0].numel() == seq.numel():
            out[-1].append(seq)
        else:
            out.append([seq])
    return out


def _states(model: Any, ids: torch.Tensor, needed: set[Layer]) -> dict[Layer, torch.Tensor]:
    """The ``needed`` canonical layers of a batch ``[B, T]``, as ``[B, T, H]``, from one
    forward of the decoder without its lm_head (as ``models.reference.capture_canonical``)."""
    import torch

    captured: list[torch.Tensor] = []
    inner: Any = model.model
    handle = inner.norm.register_forward_pre_hook(lambda _mod, args: captured.append(args[0]))
    try:
        with torch.no_grad():
            hidden = inner(ids, output_hidden_states=True, use_cache=False).hidden_states
    finally:
        handle.remove()
    top = len(hidden) - 1
    pick = {top: captured[0], -1: hidden[top]}
    return {x: pick[x.index] if x.index in pick else hidden[x.index] for x in needed}


def greedy_sequences(
    model: Any, prompts: list[torch.Tensor], length: int, batch: int = 64
) -> list[torch.Tensor]:
    """The target's greedy continuation of each prompt, to ``length`` tokens in all, with
    the KV cache. Prompts of one length are continued ``batch`` at a time (no padding).

    Plain argmax of the raw logits, as greedy verification compares: no logits processors
    (``generate`` would apply the folder's generation_config: a repetition penalty, or an
    end-of-sequence id suppressed until the length is reached), and no stop at that id."""
    import torch

    device = next(model.parameters()).device
    out: list[torch.Tensor] = []
    with torch.no_grad():
        for group in _groups(prompts, batch):
            ids = torch.stack(group).to(device)
            step = model(ids, use_cache=True)
            pieces = [ids]
            new = max(length - ids.shape[1], 1)
            for i in range(new):
                pieces.append(step.logits[:, -1].argmax(-1, keepdim=True))
                if i + 1 < new:
                    step = model(pieces[-1], use_cache=True, **_cache_of(step))
            out += list(torch.cat(pieces, dim=1))
    return out


def _cache_of(step: Any) -> dict[str, Any]:
    """The KV cache of a forward's output, as the next forward takes it (transformers
    5.2x calls it ``cache``; earlier releases ``past_key_values``)."""
    if "cache" in step:
        return {"cache": step["cache"]}
    return {"past_key_values": step["past_key_values"]}


def draft_dir(path: Path) -> Path:
    """The draft's folder, from ``serving.draft_config`` (its config.json or its folder)."""
    return path if path.is_dir() else path.parent


def layouts_of(
    contract: Contract | None,
    draft_path: Path,
    num_layers: int,
    arch: str | None,
    given: list[list[str]],
    engine: str,
) -> Layouts:
    """The trainer's layout (first) and each engine version's (deduplicated; one equal to
    the trainer's is named ``trainer = <engine> <version>``), else the draft config's own ids
    under ``engine``; then the ``given`` ones (canonical names)."""
    from ..engines.draft_config import read_draft_config
    from ..engines.resolve import engine_aux_ids, get_engine, resolve
    from ..errors import Unservable, UsageError

    found: dict[tuple[Layer, ...], str] = {}
    if contract is not None and contract.training is not None:
        t = contract.training
        found[tuple(t.slots[i].layer for i in t.fc_input)] = "trainer"
    serving = contract.serving if contract is not None else None
    draft = read_draft_config(draft_path)
    name = serving.engine if serving is not None else engine
    spec = serving.version if serving is not None else None
    ids = (
        engine_aux_ids(serving, draft) if serving is not None else get_engine(name).draft_ids(draft)
    )
    if serving is not None and contract is not None:
        arch = serving.arch or contract.target.arch or arch
    served: dict[tuple[Layer, ...], list[str]] = {}
    for version in get_engine(name).versions(spec):
        try:
            layers = resolve(name, num_layers, ids, arch, version).layers
        except Unservable:
            continue
        served.setdefault(layers, []).append(version or "")
    for layers, versions in served.items():
        label = versions[0] if len(versions) == 1 else f"{versions[0]}..{versions[-1]}"
        served_as = f"{name} {label}".strip()
        if found.get(layers) == "trainer":
            found[layers] = f"trainer = {served_as}"  # served as trained: still under the floor
        found.setdefault(layers, served_as)
    for i, names in enumerate(given, 1):
        try:
            layers = tuple(Layer.parse(n) for n in names)
            for layer in layers:
                layer.check_bounds(num_layers)
        except ValueError as exc:
            raise UsageError(f"--layout {' '.join(names)}: {exc}") from None
        found.setdefault(layers, f"layout {i}")
    return [(label, layers) for layers, label in found.items()]


def prompts(
    contract: Contract | None, paths: list[Path], n: int, size: int, target: TargetModel
) -> list[torch.Tensor]:
    """``n`` prompts of ``size`` tokens from the shards' input_ids (those the target may run
    on, :func:`..models.inputs.unfit`), the rest random ids of its vocabulary (seeded): a
    shard whose ids the target's embedding does not hold raises :class:`TargetMismatch`
    (EC625): the target is another model than the shards were made with."""
    import torch

    from ..shards.stored import to_torch
    from .inputs import unfit

    out = []
    for ids in _readable_ids(contract, paths, n, target):
        if ids.shape[0] < size:
            continue
        head = ids[:size]
        if unfit(head, target) is None:
            out.append(to_torch(head).long())
    vocab = min(target.vocab_size or target.embedding_rows, target.embedding_rows)
    g = torch.Generator().manual_seed(0)
    while len(out) < n:
        out.append(torch.randint(0, vocab, (size,), generator=g))
    return out


class TargetMismatch(CodedError):
    """EC625: the shards hold ids past the target model's embedding (another model's)."""

    def __init__(self, path: Path, span: tuple[int, int], target: TargetModel) -> None:
        rows = target.embedding_rows
        super().__init__(
            "EC625",
            f"{path.name}: input ids span [{span[0]}, {span[1]}], the target model "
            f"{target.path} has {rows} embedding rows: it is not the target these shards "
            "were made with",
            "give the target model the shards were captured from (--target-model), or "
            "shards made with this one",
        )
        self.path = path
        self.expected = f"ids in [0, {rows}) (the target's embedding rows)"
        self.found = f"ids in [{span[0]}, {span[1]}]"


def _readable_ids(
    contract: Contract | None, paths: list[Path], n: int, target: TargetModel
) -> Iterator[Any]:
    """The ``[T]`` input ids of the first ``n`` shard files (as stored); ids the contract's
    vocabulary holds and the target's embedding does not raise :class:`TargetMismatch`."""
    from ..shards.reading import comparable
    from ..shards.shard import Shard
    from .inputs import unfit

    vocab = contract.target.vocab_size if contract is not None else None
    for path in _shard_files(contract, paths)[:n]:
        sample = Shard.load(path, path.name, "auto", None).sample
        ids = None if sample is None else sample.ids
        if ids is None or ids.dim() != 1:
            continue
        bad = unfit(ids, target, vocab=vocab)
        if bad is not None and bad.code == "EC605":
            values = comparable(ids)
            assert values is not None  # unfit read the ids as integers to say EC605
            raise TargetMismatch(path, (int(values.min()), int(values.max())), target)
        yield ids


def _shard_files(contract: Contract | None, paths: list[Path]) -> list[Path]:
    """The shard files prompts come from: the contract's (``paths`` or its own folder;
    none there is no error without ``paths``), else the files under ``paths``."""
    from ..errors import UsageError
    from ..shards.discovery import DEFAULT_SAMPLE, shard_paths
    from ..tree import files_matching

    files: list[Path] = []
    if contract is not None and contract.training is not None:
        try:
            files = [p for p, _ in shard_paths(contract, paths or None, DEFAULT_SAMPLE, 0)]
        except UsageError:
            if paths:
                raise  # no shards in the contract's own folder: random prompts
    else:
        for path in paths:
            if not path.exists():
                raise UsageError(f"no such shard path {path}")
            files += sorted(files_matching(path, ["*"])) if path.is_dir() else [path]
    return files


def shard_ids(
    contract: Contract | None, paths: list[Path], n: int, target: TargetModel
) -> list[torch.Tensor]:
    """The whole ``input_ids`` of the first ``n`` shards (as :func:`prompts` reads them)
    that the target may run on (:func:`..models.inputs.unfit`)."""
    from ..shards.stored import to_torch
    from .inputs import unfit

    return [
        to_torch(ids).long()
        for ids in _readable_ids(contract, paths, n, target)
        if unfit(ids, target) is None
    ]


def probe_contract(contract: Contract, target: Any, roots: Sequence[Path] = ()) -> list[Estimate]:
    """The gate's estimates (trainer's layout first, then each served one), on prompts from
    the shards under ``roots`` (the run's: else the contract's own)."""
    from .draft_model import EagleDraft

    assert contract.serving is not None and contract.serving.draft_config is not None
    folder = draft_dir(contract.serving.draft_config)
    layouts = layouts_of(contract, folder, target.num_layers, target.arch, [], "sglang")
    draft = EagleDraft.load(folder)  # a draft that cannot run is refused before the target runs
    chains = Chains(draft, target.module, layouts, STEPS)
    chains.refuse_unfit(target.hidden_size)
    sequences = greedy_sequences(
        target.module, prompts(contract, list(roots), SEQUENCES, PROMPT, target), LENGTH
    )
    return chains.estimates(sequences, PROMPT - 2)
