"""GitHub Actions: ``::error file=,line=,col=::`` annotations at the offending key, within
the platform's per-step limits, and the findings as Markdown in the job's step summary."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..contract.model import Contract
    from ..findings import Finding
    from .run import CheckRun

MAX_PER_STEP = 10
"""GitHub shows at most 10 error and 10 warning annotations of one step..."""
MAX_PER_JOB = 50
"""...and 50 of one job: the steps of a job count theirs in ``$RUNNER_TEMP`` (emptied per job)."""
_COUNTER = "eagle-contract-annotations.count"


def enabled(mode: str) -> bool:
    """``auto``: on under GitHub Actions (``GITHUB_ACTIONS=true``); ``github``; ``none``."""
    return mode == "github" or (mode == "auto" and os.environ.get("GITHUB_ACTIONS") == "true")


def escape_data(text: str) -> str:
    """A workflow command's message: %, CR and LF escaped."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value: also ':' and ','."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


@dataclass(frozen=True)
class Location:
    file: str
    line: int
    col: int


def _root() -> Path:
    return Path(os.environ.get("GITHUB_WORKSPACE") or Path.cwd()).resolve()


def _in_root(path: Path, root: Path) -> str | None:
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return None


def _find(path: Path, line: int | None, word: str) -> tuple[int, int] | None:
    """(line, col) of ``word`` on ``line`` (any line when None); col 1-based."""
    try:
        lines = path.read_text("utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    candidates = range(len(lines)) if line is None else [line - 1]
    for n in candidates:
        if 0 <= n < len(lines):
            col = lines[n].find(word) if word else len(lines[n]) - len(lines[n].lstrip(" -"))
            if col >= 0:
                return n + 1, col + 1
    return None


def locate(f: Finding, root: Path | None = None) -> Location | None:
    """The file, line and column in the repository of ``f``'s one place: the file and line
    the finding names (the check chose it: for a layout mismatch, where the served ids are
    written), as the terminal and every report show it. None when outside the repository."""
    root = root or _root()
    if not f.contract or not f.line:
        return None
    rel = _in_root(Path(f.contract), root)
    found = _find(Path(f.contract), f.line, "")
    return Location(rel, *found) if rel and found else None


def annotation_lines(
    runs: Sequence[CheckRun], root: Path | None = None, budget: int = MAX_PER_JOB
) -> list[str]:
    """Workflow commands, one per finding group (one rule at one place across shards); at
    most MAX_PER_STEP per severity and ``budget`` in all, then one plain line saying how
    many were left out."""
    groups: dict[tuple[object, ...], list[Finding]] = {}
    where: dict[tuple[object, ...], Location | None] = {}
    for run in runs:
        for f in run.findings:
            loc = locate(f, root)
            placed = loc is not None or f.line is not None
            key = (
                (f.severity, f.code, loc, f.contract, f.line, f.slot)
                if placed
                else (f.severity, f.code, f.message)
            )
            groups.setdefault(key, []).append(f)
            where[key] = loc
    out: list[str] = []
    left = 0
    for severity in ("error", "warning"):
        chosen = [k for k in groups if k[0] == severity]
        shown = max(0, min(MAX_PER_STEP, budget - len(out)))
        left += max(0, len(chosen) - shown)
        out += [_command(groups[k], where[k]) for k in chosen[:shown]]
    if left:
        out.append(
            f"eagle-contract: {left} more finding group(s) not annotated (GitHub shows "
            f"{MAX_PER_STEP} per step and severity, {MAX_PER_JOB} per job); all are in the "
            "step summary"
        )
    return out


def _command(same: list[Finding], loc: Location | None) -> str:
    f = same[0]
    props = (
        []
        if loc is None
        else [f"file={escape_property(loc.file)}", f"line={loc.line}", f"col={loc.col}"]
    )
    props.append(f"title={escape_property(f'{f.code} {f.rule.name}')}")
    text = f.message
    shards = sorted({x.file for x in same if x.file})
    if len(shards) > 1:
        text += f" (and in {len(shards) - 1} other shard(s))"
    if f.hint:
        text += f"\nhint: {f.hint}"
    return f"::{f.severity} {','.join(props)}::{escape_data(text)}"


def _natural(text: str) -> list[object]:
    """Sort key: data_2 before data_10."""
    return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", text)]


def _places(same: Sequence[Finding], contract: Contract) -> str:
    """Where the annotations point: lines of the contract, else ``file:line``."""
    mine = _in_root(contract.path, _root())
    lines: set[int] = set()
    others: set[str] = set()
    for f in same:
        loc = locate(f)
        if loc is None:
            lines |= {f.line} if f.line else set()
        elif loc.file == mine:
            lines.add(loc.line)
        else:
            others.add(f"`{loc.file}`:{loc.line}")
    return ", ".join([*map(str, sorted(lines)), *sorted(others)]) or "-"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", "<br>")


def step_summary(runs: Sequence[CheckRun], shown: int = 5) -> str:
    """Markdown: per contract the verdict, findings grouped by rule (with the shards
    affected) and the layout side by side per engine version."""
    from ..render import display_path
    from .layout import TrainingSide, layout_spans

    parts: list[str] = []
    for run in runs:
        verdict = run.verdict
        parts += [
            f"## eagle-contract {verdict}: {run.contract.name}",
            "",
            f"`{display_path(str(run.contract.path))}`: {run.summary}",
            "",
        ]
        by_rule: dict[str, list[Finding]] = {}
        for f in run.findings:
            by_rule.setdefault(f.code, []).append(f)
        if by_rule:
            parts += [
                "### Findings by rule",
                "",
                "| rule | name | severity | findings | shards affected | lines |",
                "|---|---|---|---:|---|---|",
            ]
            for code, same in sorted(by_rule.items()):
                shards = sorted({f.file for f in same if f.file}, key=_natural)
                names = ", ".join(f"`{s}`" for s in shards[:shown])
                more = f" and {len(shards) - shown} more" if len(shards) > shown else ""
                affected = f"{len(shards)}: {names}{more}" if shards else "- (contract)"
                parts.append(
                    f"| {code} | {same[0].rule.name} | {same[0].severity} | "
                    f"{len(same)} | {affected} | {_places(same, run.contract)} |"
                )
            parts.append("")
            for code, same in sorted(by_rule.items()):
                parts += [f"<details><summary>{code} {same[0].rule.name}</summary>", ""]
                seen: set[object] = set()
                for f in same:
                    place = (f.line, f.slot) if f.line else f.message
                    if place in seen or len(seen) >= shown:
                        continue
                    seen.add(place)
                    parts.append(
                        f"- {_cell(f.message)}" + (f"<br>hint: {_cell(f.hint)}" if f.hint else "")
                    )
                    if f.details:
                        parts += ["", "```", f.details, "```", ""]
                parts += ["", "</details>", ""]
        for span in layout_spans(run.contract, TrainingSide.of(run)):
            fmt = run.contract.training.format if run.contract.training else ""
            parts += [f"### Layout: training ({fmt}) vs {span.label}", ""]
            if span.refused:
                parts += [f"refused: {_cell(span.refused)}", ""]
                continue
            parts += ["| fc pos | training | serving | |", "|---:|---|---|---|"]
            parts += [
                f"| {p} | {a} | {b} | {'ok' if s == 'ok' else '**DIFFERS**'} |"
                for p, a, b, s in span.rows()
            ]
            parts.append("")
    return "\n".join(parts) + "\n"


def _count(counter: Path | None) -> int:
    """The job's annotations so far (0 outside Actions or when unreadable)."""
    try:
        return max(0, int(counter.read_text("utf-8"))) if counter is not None else 0
    except (OSError, ValueError):
        return 0


def emit(runs: Sequence[CheckRun], mode: str, echo: Callable[[str], None] = print) -> None:
    """Under GitHub Actions (or ``mode='github'``): echo the annotations and append the
    step summary to ``$GITHUB_STEP_SUMMARY`` when it is set."""
    if not enabled(mode):
        return
    temp = os.environ.get("RUNNER_TEMP")
    counter = Path(temp) / _COUNTER if temp else None
    used = _count(counter)
    lines = annotation_lines(runs, budget=MAX_PER_JOB - used)
    for line in lines:
        echo(line)
    if counter is not None:
        with suppress(OSError):
            counter.write_text(str(used + sum(x.startswith("::") for x in lines)), "utf-8")
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        try:
            with open(target, "a", encoding="utf-8") as out:  # appended: earlier steps' stay
                out.write(step_summary(runs))
        except OSError as exc:
            echo(f"eagle-contract: cannot append the step summary to {target}: {exc}")
