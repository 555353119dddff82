"""The HTML report: one self-contained file (no network needed to view it) with the
verdict, the findings with their hints, the layout per engine version and the plots."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from . import plots

if TYPE_CHECKING:
    from ..findings import Finding
    from .measure import Measurements
    from .run import CheckRun

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;
padding:0 8px} .finding{overflow-wrap:anywhere}
h1 .ok{color:#1a7f37} h1 .bad{color:#cf222e} code,pre{font:12px ui-monospace,monospace}
.scroll{overflow-x:auto;max-width:100%} table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:3px 8px;
text-align:left} pre{overflow-x:auto} .differs{color:#cf222e;font-weight:bold}
.finding{border-left:4px solid #cf222e;padding:2px 10px;margin:8px 0}
.warning{border-color:#bf8700} span.warning{color:#9a6700} .hint{color:#555}
a.rule{color:inherit;text-decoration:none} a.rule:hover{text-decoration:underline}
.note{background:#fff8c5;padding:6px 10px} figure{margin:1em 0} svg{max-width:100%;height:auto}
"""


def render(runs: Sequence[CheckRun], measured: Sequence[Measurements]) -> str:
    """The page; ``measured[i]`` holds what ``runs[i]``'s plots show."""
    ok = all(run.ok for run in runs)
    complete = all(not run.not_run for run in runs)
    verdict = (
        '<span class="bad">FAILED</span>'
        if not ok
        else '<span class="ok">passed</span>'
        if complete
        else '<span class="warning">passed, incomplete</span>'
    )
    body = [f"<h1>eagle-contract: {verdict}</h1>"]
    if not plots.available():
        body.append(
            f'<p class="note">Plots need matplotlib: <code>{escape(plots.EXTRA)}'
            "</code>. The tables below hold the same numbers.</p>"
        )
    for run, m in zip(runs, measured):
        body += _contract(run, m)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>eagle-contract report</title><style>{_STYLE}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def _contract(run: CheckRun, m: Measurements) -> list[str]:
    from ..render import display_path

    state = run.verdict
    out = [
        f"<h2>{escape(run.contract.name)}: {state}</h2>",
        f"<p><code>{escape(display_path(str(run.contract.path)))}</code>: "
        f"{escape(run.summary)}</p>",
        "<h3>Findings</h3>",
    ]
    out += _findings(run) or ["<p>none</p>"]
    out += _layout(run)
    out += _norms(m)
    if m.probe:
        out.append("<h3>Probe</h3>")
        if plots.available():
            out.append(_figure(plots.probe_plot(m.probe)))
        out.append(
            _table(
                ["layout", "acceptance length", "acceptance per draft step"],
                [
                    [e.name, f"{e.accept_length:.3f}", ", ".join(f"{a:.3f}" for a in e.per_step)]
                    for e in m.probe
                ],
            )
        )
    out += [f'<p class="note">{escape(p)}</p>' for p in m.problems]
    return out


def _findings(run: CheckRun) -> list[str]:
    """One block per rule at one place; the shards that showed it listed."""
    groups: dict[tuple[object, ...], list[Finding]] = {}
    for f in run.findings:
        groups.setdefault((f.code, f.line, f.slot, "" if f.file else f.message), []).append(f)
    return [_finding(same[0], [f.file for f in same if f.file]) for same in groups.values()]


def _finding(f: Finding, shards: list[str]) -> str:
    from ..render import display_path

    rows = [
        f'<div class="finding {f.severity}"><b><a class="rule" href="{escape(f.rule.url)}">'
        f"{f.code} {escape(f.rule.name)}</a></b>: {escape(f.message)}"
    ]
    if f.contract and f.line:
        rows.append(f"<br><code>{escape(display_path(f.contract))}:{f.line}</code>")
    if shards:
        more = f" and {len(shards) - 5} more" if len(shards) > 5 else ""
        rows.append(f"<br>shards ({len(shards)}): {escape(', '.join(shards[:5]) + more)}")
    for label, value in (("expected", f.expected), ("found", f.found)):
        if value:
            rows.append(f"<br>{label}: {escape(value)}")
    if f.details:
        rows.append(f"<pre>{escape(f.details)}</pre>")
    if f.hint:
        rows.append(f'<br><span class="hint">hint: {escape(f.hint)}</span>')
    return "".join(rows) + "</div>"


def _layout(run: CheckRun) -> list[str]:
    from .layout import TrainingSide, layout_spans

    out = []
    fmt = run.contract.training.format if run.contract.training else ""
    for span in layout_spans(run.contract, TrainingSide.of(run)):
        out.append(f"<h3>Layout: training ({escape(fmt)}) vs {escape(span.label)}</h3>")
        if span.refused:
            out.append(f"<p>refused: {escape(span.refused)}</p>")
            continue
        out.append(
            _table(["fc pos", "training", "serving", ""], [list(row) for row in span.rows()])
        )
    return out


def _norms(m: Measurements) -> list[str]:
    out = ["<h3>Norms</h3>"]
    if plots.available():
        for svg in (plots.norms_plot(m), m.curve and plots.curve_plot(m.curve)):
            if svg:
                out.append(_figure(svg))
    rows = []
    for s in m.slots:
        values = sorted(v for _, v in s.medians)
        if values:
            bounds = "-" if s.bounds is None else f"[{s.bounds[0]:.4g}, {s.bounds[1]:.4g}]"
            rows.append(
                [
                    str(s.slot),
                    s.layer,
                    bounds,
                    str(len(values)),
                    f"{values[0]:.4g}",
                    f"{values[len(values) // 2]:.4g}",
                    f"{values[-1]:.4g}",
                ]
            )
    if rows:
        out.append(_table(["slot", "layer", "bounds", "shards", "min", "median", "max"], rows))
    if m.curve is not None and not plots.available():
        out.append(
            _table(
                ["layer", "target median norm"],
                [[x, f"{v:.4g}"] for x, v in zip(m.curve.layers, m.curve.medians)],
            )
        )
    return out if len(out) > 1 else []


def _figure(svg: str) -> str:
    return f"<figure>{svg}</figure>"


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="differs">{escape(c)}</td>' if c == "DIFFERS" else f"<td>{escape(c)}</td>"
            for c in row
        )
        + "</tr>"
        for row in rows
    )
    return f'<div class="scroll"><table><tr>{head}</tr>{body}</table></div>'


MARK = b"<title>eagle-contract report</title>"  # a previous page may be replaced


def write(
    path: Path, runs: Sequence[CheckRun], flag: str = "--html-report", reads: Sequence[Path] = ()
) -> None:
    """The page of what each run's families measured, written to ``path`` atomically,
    never onto an input or a file that is not a report."""
    from ..outputs import write_text
    from .measure import measure

    page = render(runs, [measure(run) for run in runs])
    write_text(path, page, flag, reads=reads, ours=MARK)
