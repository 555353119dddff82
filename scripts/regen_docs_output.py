"""Run the commands the docs show on the demo's data, and compare (or rewrite) what the pages
say they print; remake the report screenshot from the current report.

    python scripts/regen_docs_output.py [PAGE ...] [--check] [--no-screenshot]

tests/cli/test_docs_run.py runs the same code: a page whose blocks drift from the tool fails CI.

The convention. A code block (fenced or indented) right after the line

    <!-- docs-run -->

holds `$ COMMAND` lines (a line ending in ` \\` continues on the next), each followed by
what the command prints, stdout and stderr together as a terminal shows them. The commands
of a page run in order, in one scratch folder per page holding `eagle-demo/` (what
`eagle-contract demo -o eagle-demo` writes; the demo runs once, and a block showing that
command compares with that run) and a copy of the checkout's `contracts/`. So a block may
use what an earlier block of its page wrote. `<!-- docs-run: skip: REASON -->` marks a
block with `$ ` prompts that cannot run on the demo's data (a GPU server, a model under
/models); every block with a `$ ` prompt carries one marker or the other.

What is compared, and the only normalisation (both sides alike):

1. trailing spaces and leading or trailing blank lines are dropped;
2. the scratch folder's absolute path reads as the folder itself (paths print relative);
3. a duration (a decimal number followed by `s` or ` s`, as `in 11.18s`, `(69.2 s)`)
   compares equal to any other;
4. a line `...` in the shown output stands for any number of printed lines (an excerpt).

Rewriting keeps each `$` line as written and puts the new output under it; a block whose
output still matches is left alone (so durations do not churn). An excerpt's pieces are
found again by their first line (the same line, else the first with the same words and other
numbers); where one cannot be found the block is left for a person (the script says which).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DEMO_DIR = "eagle-demo"
DEMO_COMMAND = f"eagle-contract demo -o {DEMO_DIR}"
MARKER = re.compile(r"^\s*<!--\s*docs-run(?::\s*(?P<opts>.*?))?\s*-->\s*$")
DURATION = re.compile(r"\d+\.\d+(?= ?s\b)")
ELLIPSIS = "..."
TIMEOUT_S = 600

# The report screenshot (docs/img/report.png): the demo's buggy set, with the target, as
# docs/ci.md's workflow and docs/reports.md run it.
SCREENSHOT = ROOT / "docs" / "img" / "report.png"
REPORT_COMMAND = (
    "eagle-contract check contracts/demo-tiny-llama-eagle3.yaml eagle-demo/embed-in-front"
    " --sample all --target-model eagle-demo/target --reference-capture"
    " --annotations none --html-report report.html"
)
REPORT_TEXT_KEY = "eagle-contract-report-text"  # the page's text, kept in the PNG
SCREEN = (1160, 4000)  # window size; the blank foot below the page is cropped


@dataclasses.dataclass
class Step:
    """One `$ COMMAND` of a block and the output the page shows under it."""

    source: list[str]  # the command's lines as written (the `$ ` line and continuations)
    shown: list[str]  # the output lines as written

    @property
    def command(self) -> str:
        parts = [line.removeprefix("$ ").strip() for line in self.source]
        return " ".join(p.removesuffix("\\").strip() for p in parts)


@dataclasses.dataclass
class Block:
    page: Path
    line: int  # 1-based line of the marker
    first: int  # 0-based index of the block's first content line
    end: int  # 0-based index one past its last content line
    indent: str  # what each content line starts with ("    " for an indented block)
    steps: list[Step]
    skip: str | None  # the reason, for a block marked `skip`

    @property
    def where(self) -> str:
        return f"{_name(self.page)}:{self.line}"


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)


class DocsRunError(Exception):
    """A marker without a block under it, or a block without a `$ ` command."""


def _code_block(lines: list[str], i: int) -> tuple[int, int, str] | None:
    """The code block starting at or after line ``i`` (blank lines skipped): (first content
    line, one past the last, indent); None when no code block follows."""
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i == len(lines):
        return None
    fence = re.match(r"^(`{3,}|~{3,})", lines[i])
    if fence:
        mark = fence.group(1)
        end = i + 1
        while end < len(lines) and not (
            lines[end].startswith(mark[0] * len(mark)) and not lines[end].strip(mark[0]).strip()
        ):
            end += 1
        return i + 1, end, ""
    if not lines[i].startswith("    "):
        return None
    end = i
    while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
        end += 1
    while end > i and not lines[end - 1].strip():
        end -= 1
    return i, end, "    "


def _steps(content: list[str]) -> list[Step]:
    steps: list[Step] = []
    i = 0
    while i < len(content):
        if content[i].startswith("$ "):
            source = [content[i]]
            while source[-1].rstrip().endswith("\\") and i + 1 < len(content):
                i += 1
                source.append(content[i])
            steps.append(Step(source, []))
        elif steps:
            steps[-1].shown.append(content[i])
        elif content[i].strip():
            raise DocsRunError(f"output before the first `$ ` command: {content[i]!r}")
        i += 1
    return steps


def blocks(page: Path) -> list[Block]:
    """Every block of ``page`` under a docs-run marker, in page order."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if not m:
            continue
        where = f"{_name(page)}:{i + 1}"
        opts = (m.group("opts") or "").strip()
        kind, _, reason = opts.partition(":")
        skip = reason.strip() if kind.strip() == "skip" else None
        if opts and skip is None:
            raise DocsRunError(f"{where}: unknown docs-run option {opts!r}")
        if skip is not None and not skip:
            raise DocsRunError(f"{where}: `docs-run: skip` needs a reason")
        span = _code_block(lines, i + 1)
        if span is None:
            raise DocsRunError(f"{where}: a docs-run marker needs a code block under it")
        first, end, indent = span
        content = [c.removeprefix(indent) for c in lines[first:end]]
        try:
            steps = _steps(content)
        except DocsRunError as e:
            raise DocsRunError(f"{where}: {e}") from None
        if not steps:
            raise DocsRunError(f"{where}: the block under the marker has no `$ ` command")
        found.append(Block(page, i + 1, first, end, indent, steps, skip))
    return found


def unmarked_prompts(page: Path) -> list[int]:
    """1-based lines of `$ ` prompts in code blocks that carry no docs-run marker."""
    lines = page.read_text().splitlines()
    marked = {n for b in blocks(page) for n in range(b.first, b.end)}
    loose: list[int] = []
    fence: str | None = None
    for n, line in enumerate(lines):
        stripped = line.lstrip()
        mark = re.match(r"(`{3,}|~{3,})", stripped)
        if mark and fence is None:
            fence = mark.group(1)
            continue
        if mark and fence and stripped.startswith(fence) and not stripped.strip(fence[0]).strip():
            fence = None
            continue
        in_code = fence is not None or line.startswith("    ")
        if in_code and stripped.startswith("$ ") and n not in marked:
            loose.append(n + 1)
    return loose


def command_env(cache: Path) -> dict[str, str]:
    """The environment the commands run in: this interpreter's scripts first on PATH,
    stdout unbuffered (stdout and stderr interleave as on a terminal), and nothing of the
    outer pytest or of GitHub Actions (which would turn on annotations)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "GITHUB_", "RUNNER_", "EAGLE_CONTRACT_")) and k != "CI"
    }
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env["XDG_CACHE_HOME"] = str(cache)
    return env


def run_demo(root: Path) -> str:
    """Run the demo in ``root`` (writing ``root/eagle-demo``); its output, also kept in
    ``root/demo.out``."""
    root.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["bash", "-c", DEMO_COMMAND],
        cwd=root,
        env=command_env(root / "cache"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT_S,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{DEMO_COMMAND} exited {done.returncode}:\n{done.stdout[-3000:]}")
    (root / "demo.out").write_text(done.stdout)
    return done.stdout


def workspace(demo_root: Path, dest: Path) -> Path:
    """A page's scratch folder: the demo's data and the checkout's contracts, copied."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(demo_root / DEMO_DIR, dest / DEMO_DIR)
    shutil.copytree(ROOT / "contracts", dest / "contracts")
    return dest


def shown_form(text: str, where: Path) -> list[str]:
    """Printed text as a page shows it: rules 1 and 2."""
    text = text.replace(f"{where}{os.sep}", "").replace(str(where), ".")
    return _trimmed(text.splitlines())


def _trimmed(lines: list[str]) -> list[str]:
    lines = [line.rstrip() for line in lines]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _key(line: str) -> str:
    return DURATION.sub("N", line.rstrip())  # rule 3


def matches(shown: list[str], printed: list[str]) -> bool:
    """Whether the page's lines match the printed lines (rules 3 and 4)."""
    pattern = "".join(
        r"(?:[^\n]*\n)*?" if line.strip() == ELLIPSIS else re.escape(_key(line)) + r"\n"
        for line in _trimmed(shown)
    )
    return re.fullmatch(pattern, "".join(_key(p) + "\n" for p in printed)) is not None


def refreshed(shown: list[str], printed: list[str]) -> list[str] | None:
    """The page's lines made to match ``printed``: the whole output, or for an excerpt each
    piece found again by its first line (None when one cannot be found)."""
    shown = _trimmed(shown)
    if ELLIPSIS not in (s.strip() for s in shown):
        return printed
    pieces: list[list[str]] = [[]]
    for line in shown:
        pieces.append([]) if line.strip() == ELLIPSIS else pieces[-1].append(line)
    out: list[str] = []
    pos = 0
    keys = [_key(p) for p in printed]
    for n, piece in enumerate(pieces):
        if n:
            out.append(ELLIPSIS)
        if not piece:
            continue
        last = n == len(pieces) - 1
        if n == 0:  # the head of the output: as many lines as the page showed
            start = 0
        else:
            start = _find(piece[0], keys, pos)
            if start is None:
                return None
        stop = len(printed) if last else start + len(piece)
        out += printed[start:stop]
        pos = stop
    return out


def _find(line: str, keys: list[str], pos: int) -> int | None:
    """Where ``line`` is among the printed ``keys`` from ``pos`` on: the same line, else
    the first with the same words (its numbers may have changed)."""
    want = _key(line)
    for same in (lambda k: k == want, lambda k: _digits(k) == _digits(want)):
        found = next((i for i in range(pos, len(keys)) if same(keys[i])), None)
        if found is not None:
            return found
    return None


def _digits(line: str) -> str:
    return re.sub(r"\d+", "#", line)


@dataclasses.dataclass
class Drift:
    block: Block
    step: Step
    printed: list[str]
    new: list[str] | None  # the refreshed lines, None when a person must edit the block

    def report(self) -> str:
        head = f"{self.block.where}: `{self.step.command}` prints something else than the page"
        diff = difflib.unified_diff(
            [s.rstrip() for s in self.step.shown], self.printed, "page", "printed", lineterm=""
        )
        hint = (
            "  (an excerpt piece's first line is gone: edit this block by hand)"
            if self.new is None
            else ""
        )
        return "\n".join([head, *diff, *([hint] if hint else [])])


def run_page(page: Path, demo_root: Path, demo_output: str, scratch: Path) -> list[Drift]:
    """Run every marked block of ``page`` in one scratch folder; the steps that drift."""
    todo = [b for b in blocks(page) if b.skip is None]
    if not todo:
        return []
    where = workspace(demo_root, scratch)
    env = command_env(demo_root / "cache")
    drifts: list[Drift] = []
    for block in todo:
        for step in block.steps:
            if step.command == DEMO_COMMAND:
                out = demo_output
            else:
                done = subprocess.run(
                    ["bash", "-c", step.command],
                    cwd=where,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=TIMEOUT_S,
                )
                out = done.stdout
            printed = shown_form(out, where)
            if not matches(step.shown, printed):
                drifts.append(Drift(block, step, printed, refreshed(step.shown, printed)))
    return drifts


def rewrite(page: Path, drifts: list[Drift]) -> int:
    """Write the refreshed outputs into ``page``; how many steps were rewritten."""
    lines = page.read_text().splitlines()
    done = 0
    for block in sorted({id(d.block): d.block for d in drifts}.values(), key=lambda b: -b.first):
        new_of = {id(d.step): d.new for d in drifts if d.block is block and d.new is not None}
        content: list[str] = []
        for step in block.steps:
            content += step.source
            new = new_of.get(id(step))
            content += step.shown if new is None else new
            done += new is not None
        lines[block.first : block.end] = [(block.indent + c) if c.strip() else "" for c in content]
    page.write_text("\n".join(lines) + "\n")
    return done


# ---- the report screenshot ----


def report_text(html: str) -> str:
    """The report page's words, without its plots: what a screenshot of it must show."""
    html = re.sub(r"<svg.*?</svg>|<style.*?</style>", " ", html, flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def png_text(png: bytes) -> dict[str, str]:
    """The text chunks (tEXt, zTXt) of a PNG file."""
    out: dict[str, str] = {}
    pos = 8
    while pos + 8 <= len(png):
        (size,) = struct.unpack(">I", png[pos : pos + 4])
        kind, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + size]
        if kind in (b"tEXt", b"zTXt"):
            key, _, value = data.partition(b"\0")
            raw = zlib.decompress(value[1:]) if kind == b"zTXt" else value
            out[key.decode("latin-1")] = raw.decode("latin-1")
        pos += 12 + size
    return out


def chromium() -> str | None:
    names = ("chromium", "chromium-browser", "chromium-headless-shell", "google-chrome")
    return next(filter(None, map(shutil.which, names)), None)


def make_report(demo_root: Path, scratch: Path) -> Path:
    """The demo's report page, written by REPORT_COMMAND in a scratch folder."""
    where = workspace(demo_root, scratch)
    done = subprocess.run(
        ["bash", "-c", REPORT_COMMAND],
        cwd=where,
        env=command_env(demo_root / "cache"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    if done.returncode != 1 or not (where / "report.html").is_file():  # the bug is caught
        raise RuntimeError(f"{REPORT_COMMAND} exited {done.returncode}: {done.stderr[-2000:]}")
    return where / "report.html"


def screenshot(report: Path, out: Path) -> None:
    """Draw ``report`` in headless Chromium, crop the blank foot, and keep the page's text
    in the PNG (tests/cli/test_docs_run.py compares it with the current report's)."""
    from PIL import Image, ImageChops, PngImagePlugin

    browser = chromium()
    if browser is None:
        raise RuntimeError("no Chromium: apt-get install -y chromium (or --no-screenshot)")
    raw = report.parent / "screen.png"
    home = report.parent / "chromium-home"
    subprocess.run(
        [
            browser,
            *("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"),
            *("--no-first-run", "--disable-background-networking", "--disable-sync"),
            f"--user-data-dir={home / 'profile'}",
            f"--window-size={SCREEN[0]},{SCREEN[1]}",
            f"--screenshot={raw}",
            report.as_uri(),
        ],
        capture_output=True,
        timeout=180,
        env={**os.environ, "HOME": str(home)},
        check=True,
    )
    image = Image.open(raw).convert("RGB")
    blank = Image.new("RGB", image.size, image.getpixel((image.width - 1, image.height - 1)))
    box = ImageChops.difference(image, blank).getbbox()
    bottom = min(image.height, (box[3] if box else image.height) + 24)
    info = PngImagePlugin.PngInfo()
    info.add_text(REPORT_TEXT_KEY, report_text(report.read_text()), zip=True)
    image.crop((0, 0, image.width, bottom)).quantize(256).save(out, pnginfo=info, optimize=True)


# ---- the command ----


def _pages(names: list[str]) -> Iterator[Path]:
    if not names:
        yield from (p for p in PAGES if any(b.skip is None for b in blocks(p)))
        return
    for name in names:
        path = Path(name).resolve()
        if path not in PAGES:
            raise DocsRunError(f"{name} is not README.md or docs/*.md")
        yield path


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except (RuntimeError, DocsRunError, subprocess.SubprocessError) as e:
        print(f"regen_docs_output: {e}", file=sys.stderr)
        return 2


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="*", help="pages to run (default: every marked page)")
    parser.add_argument("--check", action="store_true", help="report drift, write nothing")
    parser.add_argument(
        "--no-screenshot", action="store_true", help=f"leave {SCREENSHOT.name} as it is"
    )
    args = parser.parse_args(argv)
    pages = list(_pages(args.pages))
    with tempfile.TemporaryDirectory(prefix="docs-run-") as tmp:
        demo_root = Path(tmp) / "demo"
        print(f"running `{DEMO_COMMAND}` once ...", file=sys.stderr)
        demo_output = run_demo(demo_root)
        drifted = manual = 0
        for n, page in enumerate(pages):
            drifts = run_page(page, demo_root, demo_output, Path(tmp) / f"page{n}")
            name = page.relative_to(ROOT)
            steps = sum(len(b.steps) for b in blocks(page) if b.skip is None)
            for d in drifts:
                print(d.report() if args.check else f"{d.block.where}: `{d.step.command}`")
            manual += sum(d.new is None for d in drifts)
            drifted += len(drifts)
            if drifts and not args.check:
                print(f"{name}: rewrote {rewrite(page, drifts)} of {steps} command outputs")
            elif not drifts:
                print(f"{name}: {steps} command outputs as shown")
        if not args.no_screenshot:
            report = make_report(demo_root, Path(tmp) / "report")
            old = png_text(SCREENSHOT.read_bytes()).get(REPORT_TEXT_KEY)
            if old == report_text(report.read_text()):
                print(f"{SCREENSHOT.relative_to(ROOT)}: of the current report")
            elif args.check:
                print(f"{SCREENSHOT.relative_to(ROOT)}: of another report")
                drifted += 1
            else:
                screenshot(report, SCREENSHOT)
                print(f"{SCREENSHOT.relative_to(ROOT)}: drawn again")
    if manual:
        print(f"{manual} excerpt(s) to edit by hand (see above)", file=sys.stderr)
    return 1 if (args.check and drifted) or manual else 0


if __name__ == "__main__":
    sys.exit(main())
