"""Arguments several subcommands share, spelled once."""

from __future__ import annotations

import argparse
from pathlib import Path

SHARD_PATHS = "shard files or directories (default: training.shards)"


def add_shards(parser: argparse.ArgumentParser, *, help: str = SHARD_PATHS) -> None:
    """The positional shard paths."""
    parser.add_argument("paths", type=Path, nargs="*", metavar="PATH", help=help)


def add_sampling(parser: argparse.ArgumentParser, default: str | None = "all") -> None:
    """``--sample`` and ``--seed``."""
    shown = default or "10"
    parser.add_argument("--sample", default=default, help=f"N shards or 'all' (default: {shown})")
    parser.add_argument("--seed", type=int, default=0)


def add_workers(parser: argparse.ArgumentParser, doing: str = "reading shards") -> None:
    parser.add_argument(
        "--workers", type=int, metavar="N", help=f"processes {doing} (default: the cores)"
    )


def add_flush_cache(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sglang-flush-cache",
        action="store_true",
        help="let the capture flush the server's prefix cache when it ignores "
        "the request's cache key (SGLang < 0.5.3)",
    )
