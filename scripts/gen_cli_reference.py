"""Write docs/cli-reference.md from the command line's own argparse parsers, so the reference
cannot drift from the commands (tests/unit/test_docs_site.py checks the file equals this output).

    python scripts/gen_cli_reference.py [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "cli-reference.md"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _code(text: str) -> str:
    """``text`` as code in a table cell. A pipe (``N|all``) would end the cell on GitHub even
    inside backticks, and ``\\|`` in backticks shows its backslash on the site
    (Python-Markdown): such a name is written as HTML, the pipe as ``&#124;``, right in both."""
    if "|" not in text:
        return f"`{text}`"
    import html

    return "<code>" + html.escape(text, quote=False).replace("|", "&#124;") + "</code>"


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return _code(str(action.metavar or action.dest))
    metavar = ""
    if action.nargs != 0:
        choices = "{" + ",".join(map(str, action.choices)) + "}" if action.choices else ""
        shown = action.metavar or choices or action.dest.upper()
        metavar = " " + (" ".join(shown) if isinstance(shown, tuple) else str(shown))
    return ", ".join(_code(f"{flag}{metavar}") for flag in action.option_strings)


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, False, [], argparse.SUPPRESS):
        return ""
    return _code(str(action.default))


def _command(name: str, parser: argparse.ArgumentParser) -> list[str]:
    usage = " ".join(parser.format_usage().split()).removeprefix("usage: ")
    lines = [f"## `{name}`", "", parser.description or "", "", "```", usage, "```", ""]
    rows = [
        (_flags(a), _default(a), _cell(a.help or ""))
        for a in parser._actions  # argparse keeps no public list of a parser's arguments
        if not isinstance(a, argparse._HelpAction) and a.help != argparse.SUPPRESS
    ]
    if rows:
        lines += ["| argument | default | meaning |", "| --- | --- | --- |"]
        lines += [f"| {flags} | {default} | {meaning} |" for flags, default, meaning in rows]
        lines.append("")
    return lines


def reference() -> str:
    from pytest_eagle_contract.shells.cli import _parser

    top = _parser()
    (sub,) = (a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help or "" for c in sub._choices_actions}
    lines = [
        "# Command reference",
        "",
        "Generated from the parsers of `eagle-contract` by `scripts/gen_cli_reference.py`",
        "(do not edit: a test keeps this page equal to them). [Command line](cli.md) explains",
        "each command with examples.",
        "",
        "| command | what it does |",
        "| --- | --- |",
    ]
    lines += [
        f"| [`{name}`](#eagle-contract-{name}) | {_cell(helps.get(name, ''))} |"
        for name in sub.choices
    ]
    lines.append("")
    for name, parser in sub.choices.items():
        parser.description = parser.description or helps.get(name, "")
        lines += _command(f"eagle-contract {name}", parser)
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the page is out of date")
    args = ap.parse_args()
    text = reference()
    if args.check:
        if OUT.read_text() != text:
            print(f"{OUT} is out of date: python scripts/gen_cli_reference.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
