"""Docs that run: every block under a `<!-- docs-run -->` marker in README.md and docs/*.md
is run on the demo's data and must print what the page shows, and docs/img/report.png must
be a picture of the report the tool writes today. The convention, the few normalisation
rules and the rewrite are scripts/regen_docs_output.py's (run it when an output changes on
purpose). The demo runs once per session, shared by the xdist workers."""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

ROOT = Path(__file__).resolve().parents[2]


def _regen():
    spec = importlib.util.spec_from_file_location(
        "regen_docs_output", ROOT / "scripts/regen_docs_output.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


regen = _regen()
RUN = [p for p in regen.PAGES if any(b.skip is None for b in regen.blocks(p))]
# The pages whose examples run on the demo's data today; a page leaving this list (its
# markers lost) fails test_the_marked_pages_are_found rather than passing unchecked.
COVERED = {
    "README.md",
    "cli.md",
    "contract.md",
    "first-contract.md",
    "ci.md",
    "probe.md",
    "evidence.md",
    "sharpness.md",
}


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`eagle-contract demo -o eagle-demo`, run once for every worker of the session."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, shared by its workers
    root = base / "docs-run-demo"
    with FileLock(str(root) + ".lock"):
        if (root / "demo.out").is_file():
            return root, (root / "demo.out").read_text()
        shutil.rmtree(root, ignore_errors=True)  # a run that failed part way
        return root, regen.run_demo(root)


def test_the_marked_pages_are_found() -> None:
    assert {p.name for p in RUN} == COVERED
    for page in regen.PAGES:
        loose = regen.unmarked_prompts(page)
        assert not loose, (
            f"{page.relative_to(ROOT)} lines {loose}: a `$ ` prompt in a block without "
            "<!-- docs-run --> (or <!-- docs-run: skip: REASON --> where the demo's data "
            "cannot run it)"
        )


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN, ids=[p.name for p in RUN])
def test_the_page_prints_what_it_shows(page: Path, demo: tuple[Path, str], tmp_path: Path):
    root, output = demo
    drifts = regen.run_page(page, root, output, tmp_path / "page")
    name = page.relative_to(ROOT)
    assert not drifts, "\n\n".join(
        [*(d.report() for d in drifts), f"run: python scripts/regen_docs_output.py {name}"]
    )


@pytest.mark.slow
def test_the_report_screenshot_is_of_the_current_report(demo: tuple[Path, str], tmp_path: Path):
    root, _ = demo
    report = regen.make_report(root, tmp_path / "report")
    drawn = regen.png_text(regen.SCREENSHOT.read_bytes()).get(regen.REPORT_TEXT_KEY, "")
    now = regen.report_text(report.read_text())
    diff = difflib.unified_diff(drawn.split(), now.split(), "report.png", "report", lineterm="")
    head = "docs/img/report.png shows another report (word by word):"
    fix = "run: python scripts/regen_docs_output.py"
    assert drawn == now, "\n".join([head, *list(diff)[:60], fix])


FIVE = "Your own pipeline in five commands"
FIRST = ROOT / "docs" / "first-contract.md"


def _five(page: Path) -> list[tuple[str, int]]:
    """The commands of the first ```bash block after the line naming FIVE, each with the
    exit status its trailing comment states (`exit 1`; 0 where it names none)."""
    text = page.read_text()
    block = re.search(r"```bash\n(.*?)```", text[text.index(FIVE) :], re.S)
    assert block, f"{page.name}: no bash block after {FIVE!r}"
    out = []
    for line in block.group(1).splitlines():
        if not line.strip() or line.startswith("#"):  # a comment on its own line
            continue
        command, _, comment = line.partition("  #")
        status = re.search(r"\bexit (\d)\b", comment)
        out.append((command.strip(), int(status[1]) if status else 0))
    return out


def test_the_readme_and_the_home_page_give_the_same_five_commands() -> None:
    readme = _five(ROOT / "README.md")
    assert len(readme) == 5
    assert [c for c, _ in _five(ROOT / "docs" / "index.md")] == [c for c, _ in readme]
    steps = [s.command for b in regen.blocks(FIRST) for s in b.steps]
    assert [c for c in steps if c in dict(readme)] == [c for c, _ in readme], (
        "README's five commands are first-contract.md's steps, in its order"
    )


@pytest.mark.slow
def test_the_five_commands_run_in_order_on_the_demos_output_anywhere(
    demo: tuple[Path, str], tmp_path: Path
) -> None:
    """README's first-contract commands, in order, in a folder that holds the demo's output
    and nothing of the checkout (no contracts/): each exits as its comment says and prints
    what first-contract.md shows. The demo's last line is the command that starts them."""
    root, output = demo
    five = _five(ROOT / "README.md")
    assert regen.shown_form(output, root)[-1].strip() == five[1][0]
    shown = {s.command: s.shown for b in regen.blocks(FIRST) for s in b.steps}
    where = tmp_path / "anywhere"
    where.mkdir()
    shutil.copytree(root / regen.DEMO_DIR, where / regen.DEMO_DIR)
    env = regen.command_env(root / "cache")
    for command, status in five:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=where,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=regen.TIMEOUT_S,
        )
        printed = regen.shown_form(done.stdout, where)
        assert done.returncode == status, f"`{command}` exited {done.returncode}:\n{done.stdout}"
        diff = "\n".join(difflib.unified_diff(shown[command], printed, lineterm=""))
        assert regen.matches(shown[command], printed), f"`{command}`:\n{diff}"
    assert (where / "contracts" / "mine.yaml").is_file()


PAGE = """# A page

<!-- docs-run -->

    $ eagle-contract resolve --engine sglang --version 0.5.23 --arch LlamaForCausalLM \\
        --num-layers 61 --want embed residual:3 residual:31
    SGLang 0.5.23 on LlamaForCausalLM: no ids make it feed embed
      nearest it feeds: residual:1, residual:3, residual:31 with ids [0, 2, 30]; retrain on those

Some text.

<!-- docs-run -->

```console
$ pwd
.
$ echo "done in 0.41 s (12 shard(s))"
done in 9.99 s (12 shard(s))
$ printf 'a\\nb\\nc\\nd\\ne\\n'
a
...
c
d
...
```
"""


def _page(tmp_path: Path, text: str) -> tuple[Path, Path]:
    page = tmp_path / "page.md"
    page.write_text(text)
    (tmp_path / "demo" / regen.DEMO_DIR).mkdir(parents=True)
    return page, tmp_path / "demo"


def test_a_page_as_printed_passes(tmp_path: Path) -> None:
    """The scratch folder's path reads as `.`, a duration as any other, `...` as any lines."""
    page, root = _page(tmp_path, PAGE)
    assert [len(b.steps) for b in regen.blocks(page)] == [1, 3]
    assert regen.run_page(page, root, "", tmp_path / "run") == []


@pytest.mark.parametrize(
    "old, new",
    [
        ("[0, 2, 30]; retrain", "[0, 2, 31]; retrain"),  # a number
        ("      nearest it feeds", "      nearest it gives"),  # a word
        ("$ pwd\n.\n", "$ pwd\n.\nmore\n"),  # a line too many
        ("done in 9.99 s (12", "done in 9.99 s (13"),  # a count beside a duration
        ("a\n...\nc\nd\n...", "a\n...\nc\nX\n..."),  # inside an excerpt
        ("a\n...\nc\nd\n...", "b\n...\nc\nd\n..."),  # the head of an excerpt
    ],
)
def test_a_drifted_page_fails_and_the_script_rewrites_it(tmp_path: Path, old: str, new: str):
    assert PAGE.count(old) == 1
    page, root = _page(tmp_path, PAGE.replace(old, new))
    drifts = regen.run_page(page, root, "", tmp_path / "run")
    assert len(drifts) == 1 and drifts[0].new is not None
    assert "prints something else than the page" in drifts[0].report()
    assert regen.rewrite(page, drifts) == 1
    assert regen.run_page(page, root, "", tmp_path / "again") == []
    if "9.99" not in new:
        assert page.read_text() == PAGE  # the rest of the page as it was


def test_an_excerpt_piece_whose_numbers_changed_is_found_again(tmp_path: Path) -> None:
    block = ["$ printf 'x\\nok: 50 checks\\ny\\n'", "...", "ok: 49 checks", "..."]
    text = "<!-- docs-run -->\n\n" + "".join(f"    {line}\n" for line in block)
    page, root = _page(tmp_path, text)
    (drift,) = regen.run_page(page, root, "", tmp_path / "run")
    assert drift.new == ["...", "ok: 50 checks", "..."]
    regen.rewrite(page, [drift])
    assert page.read_text() == text.replace("49", "50")


def test_an_excerpt_whose_piece_is_gone_is_left_for_a_person(tmp_path: Path) -> None:
    page, root = _page(tmp_path, PAGE.replace("...\nc\nd\n...", "...\nC\nd\n..."))
    (drift,) = regen.run_page(page, root, "", tmp_path / "run")
    assert drift.new is None and "edit this block by hand" in drift.report()


@pytest.mark.parametrize(
    "text, error",
    [
        ("<!-- docs-run -->\n\nplain text\n", "needs a code block"),
        ("<!-- docs-run -->\n\n    no prompt\n", "output before the first"),
        ("<!-- docs-run -->\n\n```\n```\n", "has no `[$] ` command"),
        ("<!-- docs-run: skip -->\n\n    $ x\n", "needs a reason"),
        ("<!-- docs-run: fast -->\n\n    $ x\n", "unknown docs-run option"),
    ],
)
def test_a_bad_marker_is_an_error(tmp_path: Path, text: str, error: str) -> None:
    page = tmp_path / "page.md"
    page.write_text(text)
    with pytest.raises(regen.DocsRunError, match=error):
        regen.blocks(page)


def test_a_prompt_without_a_marker_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("text\n\n    $ eagle-contract x\n\n```console\n$ y\n```\n")
    assert regen.unmarked_prompts(page) == [3, 6]
