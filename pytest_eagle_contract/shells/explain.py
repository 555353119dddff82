"""``eagle-contract explain CODE``: a rule's section of docs/rules.md, as ``ruff rule`` does.

The page ships in the package (``pytest_eagle_contract/docs/rules.md``, a link to
docs/rules.md in the repository that the wheel carries as a file), so the text a user reads
in the terminal is the one the docs site shows, of the release installed.
"""

from __future__ import annotations

import argparse
import difflib
import re
from pathlib import Path

from ..errors import UsageError
from ..findings import RULES, Rule
from .exit_codes import EXIT_OK

_HEAD = re.compile(r"^## (EC[0-9]{3}) (\S+)[ \t]*$", re.M)
_SERIES = re.compile(r"^[A-Z][\w ,'-]*\(`")
"""A paragraph that opens the next series ("Layout (`EC5xx`): ...") ends the rule before it."""


def rules_page() -> str:
    """docs/rules.md as installed (the wheel's copy, or the checkout's page by its link)."""
    package = Path(__file__).resolve().parent.parent
    for page in (package / "docs" / "rules.md", package.parent / "docs" / "rules.md"):
        try:
            text = page.read_text("utf-8")
        except OSError:
            continue
        if text.startswith("# Rule codes"):
            return text
    raise UsageError(
        "the rules' page (docs/rules.md) is not installed with this package; "
        f"read it at {next(iter(RULES.values())).url.split('#')[0]}"
    )


def sections(text: str) -> dict[str, str]:
    """Each rule code's section: its heading line and its paragraphs, up to the next
    heading or the paragraph that opens the next series."""
    heads = list(_HEAD.finditer(text))
    out: dict[str, str] = {}
    for head in heads:
        end = text.find("\n## ", head.end())
        body = text[head.start() : end if end != -1 else len(text)]
        out[head.group(1)] = _own(body).rstrip() + "\n"
    return out


def _own(body: str) -> str:
    """``body`` less the trailing paragraphs that introduce the next series."""
    lines = body.splitlines()
    fenced = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and i > 1 and not lines[i - 1].strip() and _SERIES.match(line):
            return "\n".join(lines[:i])
    return body


def _find(word: str) -> Rule:
    key = word.strip()
    by_code = {code.lower(): rule for code, rule in RULES.items()}
    by_name = {rule.name: rule for rule in RULES.values()}
    rule = by_code.get(key.lower()) or by_name.get(key.lower())
    if rule is not None:
        return rule
    near = difflib.get_close_matches(key.upper(), list(RULES), n=3, cutoff=0.6)
    near += difflib.get_close_matches(key.lower(), list(by_name), n=2, cutoff=0.6)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    raise UsageError(
        f"explain: unknown rule code {word[:40]!r}{hint} (eagle-contract explain --list lists them)"
    )


def explain(args: argparse.Namespace) -> int:
    if args.list or args.code is None:
        width = max(len(r.name) for r in RULES.values())
        for rule in RULES.values():
            print(f"{rule.code}  {rule.name:<{width}}  {rule.summary}")
        return EXIT_OK
    rule = _find(args.code)
    text = sections(rules_page()).get(rule.code)
    if text is None:  # tests/release/test_rules.py keeps a section for every code
        raise UsageError(f"explain: docs/rules.md has no section for {rule.code}")
    print(text.removeprefix("## ").rstrip())
    print(f"\ndocs: {rule.url}")
    return EXIT_OK
