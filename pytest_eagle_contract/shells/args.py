"""Arguments several subcommands, and the pytest plugin's options, share: spelled once.

The functions that take ``add`` serve both shells: ``add`` is an argparse parser's
``add_argument`` or a pytest option group's ``addoption``, and ``prefix`` is ``"eagle-"``
for the plugin (whose option names the dest: ``--eagle-sglang-url`` gives ``eagle_sglang_url``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

SHARD_PATHS = "shard files or directories (default: training.shards)"

Add = Callable[..., object]


def add_shards(parser: argparse.ArgumentParser, *, help: str = SHARD_PATHS) -> None:
    """The positional shard paths."""
    parser.add_argument("paths", type=Path, nargs="*", metavar="PATH", help=help)


SAMPLE = "10"
"""``--sample``'s one default in every command, and ``--eagle-sample``'s (ini eagle_sample):
``shards.discovery.DEFAULT_SAMPLE`` as text (not imported: the plugin imports this module, and
discovery loads the contract model; tests/cli/test_cli_grammar.py holds the two equal)."""


def add_sampling(parser: argparse.ArgumentParser, what: str = "", note: str = "") -> None:
    """``--sample N|all`` and ``--seed``: one meaning and one default in every command that
    reads a sample of shards (docs/cli.md, "One default"). ``what`` goes before the
    meaning (``with --check: ``), ``note`` after the default."""
    parser.add_argument(
        "--sample",
        default=SAMPLE,
        metavar="N|all",
        help=f"{what}read N shards, a seeded sample, or all of them (default: {SAMPLE}{note})",
    )
    parser.add_argument(
        "--seed", type=int, default=0, metavar="S", help="seed of the shard sample (default: 0)"
    )


def add_workers(parser: argparse.ArgumentParser, doing: str = "reading shards") -> None:
    parser.add_argument(
        "--workers", type=int, metavar="N", help=f"processes {doing} (default: the cores)"
    )


def add_format(parser: argparse.ArgumentParser, command: str) -> None:
    """``--shard-format``: the shard format, else guessed from the file (``--format``, the
    old name, warns: a format is what a command prints in ruff's and pytest's grammar)."""
    from ..shards.formats import FORMAT_NAMES
    from .deprecated import Renamed

    parser.add_argument(
        "--shard-format",
        dest="format",
        choices=FORMAT_NAMES,
        default="auto",
        help="the shards' format (default: auto, guessed from each file; docs/formats.md)",
    )
    parser.add_argument(
        "--format",
        dest="format",
        choices=FORMAT_NAMES,
        action=Renamed,
        new="--shard-format",
        command=command,
    )


def add_print_json(parser: argparse.ArgumentParser) -> None:
    """``--json``: the command prints its result as JSON."""
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def add_report_json(parser: argparse.ArgumentParser) -> None:
    """``--json-report REPORT``: the command also writes its JSON report there; ``--json``:
    the report on stdout instead of the text (``--json REPORT``, the old spelling of
    ``--json-report``, is rewritten with a warning before parsing: shells/deprecated.py)."""
    parser.add_argument(
        "--json-report",
        type=Path,
        metavar="REPORT",
        help="also write the JSON report to REPORT (versioned, with a JSON Schema: "
        "docs/reports.md)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the JSON report on stdout instead of the text",
    )


def add_verbosity(parser: argparse.ArgumentParser) -> None:
    """``-q`` and ``-v``, on every command alike (docs/cli.md, "Output")."""
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print less: no progress line, and of findings only the summary line",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="print more: every finding in full (where, expected, found), whole tables, "
        "and a note for each cache that could not be used",
    )


def add_target_model(
    parser: argparse.ArgumentParser, help: str | None = None, *, required: bool = False
) -> None:
    """``--target-model DIR``: the target's HF model directory."""
    parser.add_argument("--target-model", type=Path, required=required, metavar="DIR", help=help)


def add_serving_target_model(parser: argparse.ArgumentParser) -> None:
    """``--serving-target-model DIR``: the checkpoint the engine serves, compared with the
    training target (``--target-model``) on the aux layers (models/identity.py)."""
    parser.add_argument(
        "--serving-target-model",
        type=Path,
        metavar="DIR",
        help="HF model directory the engine serves (overrides serving.target_model): "
        "compared with the training target's aux layers (a quantized twin drifts, a "
        "rotated one fails)",
    )


def add_serving_env(parser: argparse.ArgumentParser) -> None:
    """``--serving-env FILE``: the serving process's environment, searched for the benchmark
    knobs that fake acceptance (engines/knobs.py, EC517-EC520)."""
    parser.add_argument(
        "--serving-env",
        metavar="FILE",
        help="the serving process's environment: `env` output, one KEY=VALUE a line, or "
        "/proc/PID/environ; - reads stdin (`env | eagle-contract ...`): acceptance-faking "
        "knobs are errors",
    )


def add_tokenizer(parser: argparse.ArgumentParser, help: str) -> None:
    """``--tokenizer DIR``: a tokenizer folder (tokenizer.json, tokenizer_config.json), read
    as data: no remote code runs (docs/tokens.md)."""
    parser.add_argument("--tokenizer", type=Path, metavar="DIR", help=help)


def add_token_parity(parser: argparse.ArgumentParser) -> None:
    """``--conversations FILE`` and ``--render-url URL``: the token-parity family's inputs."""
    parser.add_argument(
        "--conversations",
        type=Path,
        metavar="FILE",
        help="the JSONL the shards were made from (ShareGPT or OpenAI messages; overrides "
        "tokenizer.conversations): each shard's ids against the serving renderer's",
    )
    parser.add_argument(
        "--render-url",
        metavar="URL",
        help="a running vLLM (http://host:8000): render through its /tokenize instead of "
        "the tokenizer folder's template",
    )


def add_annotations(add: Add, prefix: str = "") -> None:
    add(
        f"--{prefix}annotations",
        choices=("auto", "github", "none"),
        default="auto",
        help="GitHub Actions annotations and step summary (auto: when GITHUB_ACTIONS=true)",
    )


def add_sglang(add: Add, prefix: str = "", timeout_help: str | None = None) -> None:
    """A live SGLang server to verify shards against: its URL, timeout and cache flush."""
    add(f"--{prefix}sglang-url", metavar="URL", help="verify shards against a live SGLang server")
    add(
        f"--{prefix}sglang-timeout",
        type=float,
        default=60.0,
        metavar="S",
        help=timeout_help or "seconds to wait for each answer of the server (default: 60)",
    )
    add_flush_cache(add, prefix)


def add_flush_cache(add: Add, prefix: str = "") -> None:
    add(
        f"--{prefix}sglang-flush-cache",
        action="store_true",
        help="let the capture flush the server's prefix cache when it ignores "
        "the request's cache key (SGLang < 0.5.3)",
    )


CHECKS_HELP = (
    "comma-separated check families (default: every default family whose inputs are given; "
    "docs/rules.md lists them)"
)


def add_checks(add: Add, prefix: str = "") -> None:
    """``--checks`` / ``--eagle-checks``: the families to run, by name."""
    add(
        f"--{prefix}checks",
        dest=f"{prefix.replace('-', '_')}checks",
        default=None,
        metavar="LIST",
        help=CHECKS_HELP,
    )


def check_names(text: str | None) -> list[str] | None:
    """``--checks a,b`` as names; None when not given (every default family)."""
    return None if text is None else [c.strip() for c in text.split(",") if c.strip()]


MEASURE_URLS = (  # (option suffix, engine): a running engine with the draft loaded
    ("llama-server-url", "llama.cpp"),
    ("sglang-url", "sglang"),
    ("vllm-url", "vllm"),
)


def add_measure(add: Add, prefix: str = "", url_add: Add | None = None) -> None:
    """The engine to measure acceptance on (one URL per engine, ``url_add`` may be a
    mutually exclusive group's) and the requests' bounds: ``measure``'s options, and the
    plugin's ``--eagle-measure-*``."""
    urls = url_add or add
    for suffix, engine in MEASURE_URLS:
        urls(
            f"--{prefix}{suffix}",
            metavar="URL",
            help=f"a running {engine} with the draft loaded (http://host:port)",
        )
    add(
        f"--{prefix}timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="seconds per request to the engine (default: 120)",
    )
    add(
        f"--{prefix}max-new-tokens",
        type=int,
        default=64,
        metavar="N",
        help="new tokens per prompt, greedy, end-of-sequence ignored (default: 64)",
    )


def measure_settings(
    values: dict[str, object], prefix: str = ""
) -> tuple[str, str, float, int] | None:
    """(engine, URL, timeout, new tokens) from the options :func:`add_measure` added (their
    dests under ``prefix``), None when no URL is given; UsageError for two URLs or a bad
    value."""
    from ..capture.acceptance import MAX_NEW_TOKENS
    from ..capture.transport import check_timeout, check_url
    from ..errors import UsageError

    dest = prefix.replace("-", "_")
    given = [
        (f"--{prefix}{suffix}", engine, values.get(dest + suffix.replace("-", "_")))
        for suffix, engine in MEASURE_URLS
    ]
    given = [g for g in given if g[2] is not None]
    if not given:
        return None
    if len(given) > 1:
        raise UsageError(f"give one engine to measure: {given[0][0]} or {given[1][0]}")
    flag, engine, url = given[0]
    try:
        base = check_url(url)
    except UsageError:
        raise UsageError(f"{flag} {url!r}: give the engine's http:// or https:// address") from None
    timeout = values.get(dest + "timeout")
    check_timeout(timeout)
    new = values.get(dest + "max_new_tokens")
    if type(new) is not int or not 1 <= new <= MAX_NEW_TOKENS:
        raise UsageError(f"--{prefix}max-new-tokens {new!r}: 1 to {MAX_NEW_TOKENS}")
    assert isinstance(timeout, (int, float))
    return engine, base, float(timeout), new


def side_keys(args: argparse.Namespace, answer: dict[str, object]) -> dict[str, object]:
    """``resolve``'s JSON ``answer`` under the side it was asked for: ``--trainer`` (or its old
    spelling ``--engine TRAINER``) answers under ``trainer``, at the top and in each span; a
    serving engine keeps ``engine``."""
    if getattr(args, "trainer", None) is None:
        return answer

    def renamed(d: dict[str, object]) -> dict[str, object]:
        return {("trainer" if k == "engine" else k): v for k, v in d.items()}

    out = renamed(answer)
    spans = out.get("spans")
    if isinstance(spans, list):
        out["spans"] = [renamed(s) if isinstance(s, dict) else s for s in spans]
    return out
