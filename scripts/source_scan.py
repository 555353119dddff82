"""What the generators that read an engine's git repository share (gen_sglang_jax_rules.py,
gen_atom_rules.py, gen_openvino_rules.py; engines whose releases on the index carry no EAGLE-3
source, or that are not on the index): ``git`` in a clone, the refs read (tags, then the
snapshot commit), the per-ref facts folded into rows of equal facts, and the command line
(``GENERATOR REPO [--out FILE] [--check]``, the table written or checked through
``release_scan.write_or_check``). Nothing is checked out, built or imported: files are read
with ``git show``.

``--check`` re-reads the snapshot commit the committed table names, so a clone that has moved
on still checks the committed file.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from release_scan import Facts, write_or_check


def git(repo: Path, *args: str, check: bool = True) -> str:
    """``git -C repo args``'s output; "" on failure unless ``check`` (then exit 1)."""
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if out.returncode:
        if check:
            raise SystemExit(f"git {' '.join(args)}: {out.stderr.strip()}")
        return ""
    return out.stdout


@dataclass(frozen=True)
class Source:
    """One generator's own parts."""

    repo: str  # owner/name on GitHub: "ROCm/ATOM"
    out: Path  # the committed table
    derive: Callable[[Path, str], Facts | None]  # one ref's facts, None without EAGLE-3
    tags: Callable[[str], bool] = lambda tag: True  # which tags are releases
    extra: Facts | None = None  # what else the table says, the same for every ref


def fold(scan: Source, repo: Path, refs: list[str]) -> list[Facts]:
    """Rows of consecutive refs with equal facts: ``{"refs": [...], **facts}``."""
    rows: list[Facts] = []
    for ref in refs:
        facts = scan.derive(repo, ref)
        print(ref, "no EAGLE-3" if facts is None else "ok", file=sys.stderr)
        if facts is None:
            continue
        if rows and {k: v for k, v in rows[-1].items() if k != "refs"} == facts:
            rows[-1]["refs"].append(ref)
        else:
            rows.append({"refs": [ref], **facts})
    return rows


def main(scan: Source, argv: list[str] | None, doc: str | None) -> int:
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("repo", type=Path, help=f"a git clone of {scan.repo}")
    parser.add_argument("--out", type=Path, default=scan.out)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    if args.check:
        head = json.loads(args.out.read_text("utf-8"))["snapshot"]["commit"]
    else:
        head = git(args.repo, "rev-parse", "HEAD").strip()
    tags = [t for t in git(args.repo, "tag", "--sort=creatordate").split() if scan.tags(t)]
    refs = [*tags, head]
    table: dict[str, Any] = {
        "snapshot": {
            "repo": scan.repo,
            "commit": head,
            "date": git(args.repo, "log", "-1", "--format=%cs", head).strip(),
        },
        **(scan.extra or {}),
        "rows": fold(scan, args.repo, refs),
    }
    return write_or_check(table, args.out, args.check, f"{len(refs)} refs", "the source")
