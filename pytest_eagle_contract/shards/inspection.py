"""``eagle-contract inspect``: what a shard holds, in numbers and plain words."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import ShardReadError
from .reading import comparable, dtype_name, read_sample
from .stats import GUESS_WORDS, looks_like, norm_stats

Job = tuple[Path, str, int | None]  # a shard file, --format, --hidden-size


def inspect_jobs(paths: Sequence[Path], format: str, hidden_size: int | None) -> list[Job]:
    """Every shard the paths name, in order: a file as given (read, or reported unreadable),
    a folder's shards in natural order (:func:`.discovery.discover`)."""
    from ..errors import UsageError
    from .discovery import discover

    if not paths:
        raise UsageError("inspect takes at least one shard file or folder")
    files: list[Path] = []
    for path in paths:
        found = discover(path, format) if path.is_dir() else [path]
        if not found:
            raise UsageError(f"no shard files under {path} (format {format})")
        files += found
    return [(f, format, hidden_size) for f in files]


def inspect_many(jobs: Sequence[Job], workers: int = 1) -> Iterator[dict[str, Any]]:
    """The report of each job's shard, in the order given; a shard that cannot be read
    gives ``{"file", "error": {"code", "message", "hint"}}``. With ``workers`` > 1 the
    shards are read in a pool of processes (:mod:`..pool`), one shard per task."""
    from ..pool import each

    yield from each(_report, jobs, workers, ordered=True)


def _report(job: Job) -> dict[str, Any]:
    path, format, hidden_size = job
    try:
        return inspect_shard(path, format, hidden_size)
    except ShardReadError as exc:
        error = {"code": exc.code, "message": exc.message, "hint": exc.hint}
        return {"file": str(path), "error": error}


def inspect_shard(
    path: str | Path, format: str = "auto", hidden_size: int | None = None
) -> dict[str, Any]:
    """A JSON-ready report of one shard. Raises ShardReadError when it cannot be read."""
    sample = read_sample(path, format, arrays=True)
    slots, problems = sample.slots(hidden_size)
    stats = [norm_stats(s.array) if s.array.dim() == 2 else None for s in slots]
    report: dict[str, Any] = {
        "file": str(path),
        "format": sample.format.name,
        "keys": sample.describe(),
    }
    ids, mask = sample.ids, sample.mask
    if ids is not None:
        values = comparable(ids)
        some = values is not None and values.size > 0
        report["input_ids"] = {
            "key": sample.format.ids_key,
            "dtype": dtype_name(ids.dtype),
            "length": int(ids.numel()),
            "min": values.min().item() if values is not None and some else None,
            "max": values.max().item() if values is not None and some else None,
        }
    if mask is not None:
        values = comparable(mask)
        report["loss_mask"] = {
            "length": int(mask.numel()),
            "sum": None if values is None else values.sum().item(),
            "dtype": dtype_name(mask.dtype),
        }
    out_slots = []
    for slot, st in zip(slots, stats):
        entry: dict[str, Any] = {
            "slot": slot.index,
            "source": slot.source,
            "dtype": slot.dtype,
            "shape": list(slot.array.shape),
            "norm": None,
            "guess": None,
        }
        if st is not None:
            others = [o for o in stats if o is not None and o is not st]
            word = looks_like(st, int(slot.array.shape[-1]), others)
            entry.update(
                norm=st.to_dict(),
                nonfinite_tokens=st.nonfinite_tokens,
                guess=word,
                why=GUESS_WORDS.get(word or "", None),
            )
        out_slots.append(entry)
    report["slots"] = out_slots
    report["problems"] = problems
    metadata = dict(sample.metadata)
    stored = metadata.pop("precision", [])
    if stored:  # FP8 states: the slots above are the dequantized values
        report["precision"] = [dict(vars(p), saturation=p.saturation) for p in stored]
        report["precision_text"] = [p.describe() for p in stored]
    if metadata:
        report["data_config"] = metadata
    return report


def format_report(report: dict[str, Any]) -> str:
    lines = [f"{report['file']}  ({report['format']})", "keys:"]
    for key, info in report["keys"].items():
        if "list" in info:
            parts = ", ".join(f"{e.get('dtype')}{e.get('shape')}" for e in info["list"])
            lines.append(f"  {key}: list of {len(info['list'])}: {parts}")
        else:
            lines.append(f"  {key}: {info.get('dtype', info.get('type'))} {info.get('shape', '')}")
    if "input_ids" in report:
        ids = report["input_ids"]
        lines.append(f"{ids['key']}: {ids['length']} tokens, ids in [{ids['min']}, {ids['max']}]")
    if "loss_mask" in report:
        m = report["loss_mask"]
        lines.append(f"loss_mask: {m['length']} entries, {m['sum']} of them 1")
    for text in report.get("precision_text", []):
        lines.append(f"FP8: {text}")
    lines.append("slots (per-token L2 norm):")
    lines.append(
        f"  {'slot':<5}{'source':<32}{'dtype':<10}{'mean':>10}{'median':>10}"
        f"{'p5':>10}{'p95':>10}  guess"
    )
    for s in report["slots"]:
        n = s["norm"] or {}
        cells = "".join(f"{n.get(k, float('nan')):>10.4f}" for k in ("mean", "median", "p5", "p95"))
        guess_text = f"{s['guess']}: {s['why']}" if s["guess"] else "-"
        lines.append(f"  {s['slot']:<5}{s['source']:<32}{s['dtype']:<10}{cells}  {guess_text}")
        if s.get("nonfinite_tokens"):
            lines.append(f"       {s['nonfinite_tokens']} token(s) hold NaN or Inf")
    for problem in report["problems"]:
        lines.append(f"problem: {problem}")
    return "\n".join(lines)
