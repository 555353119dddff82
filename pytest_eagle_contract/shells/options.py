"""What the plugin's options and ini settings ask for: the run's contracts, shards, sample."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest

from .args import (
    MEASURE_URLS,
    SAMPLE,
    add_annotations,
    add_checks,
    add_measure,
    add_sglang,
)
from .deprecated import REMOVED_IN

if TYPE_CHECKING:
    from ..shards.discovery import Sampling

CONTRACT_SUFFIXES = (".yaml", ".yml")
DEFAULT_DIR = "contracts"


def named_contracts(config: pytest.Config) -> list[Path]:
    """The contract files among the command line's arguments."""
    here = config.invocation_params.dir
    named = (Path(arg.split("::")[0]) for arg in config.args)
    return [here / p if not p.is_absolute() else p for p in named if p.suffix in CONTRACT_SUFFIXES]


def active(config: pytest.Config) -> bool:
    return config.getoption("eagle_contract", None) is not None


def option_contracts(config: pytest.Config) -> list[Path]:
    """Contracts named by ``--eagle-contract PATH`` (folders give their YAML files)."""
    from ..errors import UsageError

    here = config.invocation_params.dir
    out: list[Path] = []
    for value in config.getoption("eagle_contract") or []:
        if not value:
            continue
        path = Path(value) if Path(value).is_absolute() else here / value
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix in CONTRACT_SUFFIXES)
            if not found:
                raise UsageError(
                    f"{value} holds no contract (*.yaml); to run tests in it, "
                    "write --eagle-contract=CONTRACT or put the flag last"
                )
            out += found
        elif path.suffix in CONTRACT_SUFFIXES and path.is_file():
            out.append(path)
        else:
            raise UsageError(
                f"no such contract {value}: --eagle-contract takes a YAML file or a folder of them"
            )
    return out


def chosen_contracts(config: pytest.Config) -> list[Path]:
    """The run's contracts: named by the option and as YAML arguments, else configured."""
    named = option_contracts(config) + named_contracts(config)
    return named or configured_contracts(config)


def sampling(config: pytest.Config) -> tuple[Sampling, int]:
    from ..shards.discovery import parse_sample

    sample = config.getoption("eagle_sample") or config.getini("eagle_sample")
    seed = config.getoption("eagle_seed")
    if seed is None:  # the ini's text: a usage error, not an INTERNALERROR, where no integer
        text = str(config.getini("eagle_seed"))
        try:
            seed = int(text)
        except ValueError:
            raise pytest.UsageError(f"eagle_seed = {text[:40]!r}: give a whole number") from None
    return parse_sample(str(sample)), seed


def shards_override(config: pytest.Config) -> list[Path]:
    given = config.getoption("eagle_shards")
    if given:
        return [Path(p).resolve() for p in given]
    return [Path(p) for p in config.getini("eagle_shards")]


def configured_contracts(config: pytest.Config) -> list[Path]:
    """Contracts for a run with no contract argument: ini, else <rootdir>/contracts/."""
    listed = [Path(p) for p in config.getini("eagle_contract_paths")]
    if not listed:
        folders = (config.rootpath / DEFAULT_DIR, config.invocation_params.dir / DEFAULT_DIR)
        listed = next(([f] for f in folders if f.is_dir()), [])
    out: list[Path] = []
    for path in listed:
        if path.is_dir():
            out += sorted(p for p in path.iterdir() if p.suffix in CONTRACT_SUFFIXES)
        else:
            out.append(path)
    return out


def target_model(config: pytest.Config) -> Path | None:
    given = config.getoption("eagle_target_model")
    return Path(given).resolve() if given else None


def serving_target_model(config: pytest.Config) -> Path | None:
    given = config.getoption("eagle_serving_target_model")
    return Path(given).resolve() if given else None


MEASURE_PREFIX = "eagle-measure-"


def measure_settings(config: pytest.Config) -> tuple[str, str, float, int] | None:
    """(engine, URL, timeout, new tokens) from ``--eagle-measure-*``; None without a URL.
    UsageError for two URLs or a bad value."""
    from .args import measure_settings as settings

    dest = MEASURE_PREFIX.replace("-", "_")
    names = [dest + s.replace("-", "_") for s, _ in MEASURE_URLS]
    names += [dest + "timeout", dest + "max_new_tokens"]
    return settings({n: config.getoption(n) for n in names}, MEASURE_PREFIX)


def path_option(config: pytest.Config, name: str) -> Path | None:
    """A path option (``--eagle-tokenizer``, ``--eagle-conversations``), resolved."""
    given = config.getoption(name)
    return Path(given).resolve() if given else None


# Fixtures for users' own tests ----------------------------------------------------------


def add_options(parser: pytest.Parser) -> None:
    """Every ``--eagle-*`` option and ini key (docs/pytest-plugin.md lists them as
    ``pytest --help`` spells them)."""
    group = parser.getgroup("eagle-contract", "EAGLE-3 contracts (pytest-eagle-contract)")
    group.addoption(
        "--eagle-contract",
        action="append",
        nargs="?",
        const="",
        dest="eagle_contract",
        metavar="PATH",
        default=None,
        help="check EAGLE-3 contracts beside your own tests: PATH (a YAML file or a folder "
        "of them; repeatable), else ini eagle_contract_paths, else contracts/*.yaml "
        "under the rootdir",
    )
    group.addoption(
        "--eagle-shards",
        action="append",
        dest="eagle_shards",
        metavar="PATH",
        default=None,
        help="shard file or directory to check instead of the contract's training.shards "
        "(repeatable)",
    )
    group.addoption(
        "--eagle-sample",
        dest="eagle_sample",
        metavar="N|all",
        default=None,
        help=f"shards read per contract: N, a seeded sample, or all (default: {SAMPLE})",
    )
    group.addoption(
        "--eagle-seed",
        dest="eagle_seed",
        metavar="S",
        type=int,
        default=None,
        help="seed of the shard sample (default 0)",
    )
    group.addoption(
        "--eagle-contract-update",
        action="store_true",
        dest="eagle_update",
        help="re-measure each contract's norm bounds from its shards and rewrite "
        "them in place (comments kept); the run that changes them fails",
    )
    group.addoption(
        "--eagle-target-model",
        dest="eagle_target_model",
        metavar="DIR",
        default=None,
        help="the target's HF model directory (overrides "
        "target.model): adds the evidence check per shard",
    )
    group.addoption(
        "--eagle-serving-target-model",
        dest="eagle_serving_target_model",
        metavar="DIR",
        default=None,
        help="the HF model directory the engine serves (overrides serving.target_model): "
        "compared with the training target's layers (target-identity)",
    )
    group.addoption(
        "--eagle-tokenizer",
        dest="eagle_tokenizer",
        metavar="DIR",
        default=None,
        help="the serving tokenizer folder (overrides tokenizer.path): adds the tokenizer "
        "item and checks the shards' ids against it (docs/tokens.md)",
    )
    group.addoption(
        "--eagle-conversations",
        dest="eagle_conversations",
        metavar="FILE",
        default=None,
        help="the JSONL the shards were made from (overrides tokenizer.conversations): "
        "adds the token-parity item",
    )
    group.addoption(
        "--eagle-render-url",
        dest="eagle_render_url",
        metavar="URL",
        default=None,
        help="a running vLLM's address: token-parity renders through its /tokenize",
    )
    group.addoption(
        "--eagle-reference-capture",
        action="store_true",
        default=None,
        dest="eagle_reference",
        help="run the target on each shard's tokens and identify every slot",
    )
    group.addoption(
        "--eagle-captures",
        action="append",
        dest="eagle_captures",
        metavar="DIR",
        default=None,
        help="verify shards against these capture files (eagle-contract record); repeatable",
    )
    add_sglang(group.addoption, "eagle-", timeout_help="seconds per request to the server")
    group.addoption(
        "--eagle-sglang-skip-unreachable",
        action="store_true",
        dest="eagle_sglang_skip",
        help="skip (with the reason), instead of fail, when the server is down",
    )
    add_measure(group.addoption, MEASURE_PREFIX)
    add_checks(group.addoption, "eagle-")
    group.addoption(
        "--eagle-no-sharpness",
        action="store_true",
        dest="eagle_no_sharpness",
        help="leave out the sharpness self-test (as eagle-contract check --no-sharpness)",
    )
    group.addoption(
        "--eagle-serving-args",
        dest="eagle_serving_args",
        metavar="COMMAND",
        default=None,
        help="the engine's launch command line, linted and used by "
        "the layout check (overrides serving.launch)",
    )
    group.addoption(
        "--eagle-serving-env",
        dest="eagle_serving_env",
        metavar="FILE",
        default=None,
        help="the serving process's environment (`env` output, /proc/PID/environ): "
        "acceptance-faking knobs are errors (as eagle-contract check --serving-env)",
    )
    group.addoption(
        "--eagle-batch",
        dest="eagle_batch",
        metavar="N|auto",
        default=None,
        help="shards per pytest item: 1 gives one item per check and shard; N > 1 one "
        "item per N shards (every check on them); auto (default) is 1 up to "
        f"{AUTO_BATCH_ABOVE:,} sampled shards, then as many as keep {AUTO_BATCH_ABOVE:,} items",
    )
    _add_report_options(group)
    parser.addini(
        "eagle_contract_paths",
        "contracts run by --eagle-contract without PATH",
        type="paths",
        default=[],
    )
    parser.addini("eagle_shards", "default for --eagle-shards", type="paths", default=[])
    parser.addini("eagle_sample", "default for --eagle-sample", default=SAMPLE)
    parser.addini("eagle_seed", "default for --eagle-seed", default="0")
    parser.addini("eagle_batch", "default for --eagle-batch", default="auto")


AUTO_BATCH_ABOVE = 1000  # sampled shards a contract may have before --eagle-batch auto batches


def batch_size(config: pytest.Config, shards: int) -> int:
    """Shards per item for a contract with ``shards`` sampled shards (``--eagle-batch``)."""
    value = str(config.getoption("eagle_batch") or config.getini("eagle_batch")).strip()
    if value == "auto":
        return 1 if shards <= AUTO_BATCH_ABOVE else -(-shards // AUTO_BATCH_ABOVE)
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise pytest.UsageError(
            f"--eagle-batch: expected a whole number >= 1 or auto, got {value!r}"
        )
    return int(value)


def _add_report_options(group: Any) -> None:
    """The report files, one option each, as ``eagle-contract check`` names them
    (``--json-report``, ``--html-report``); ``--eagle-report PATH``, which chose by PATH's
    extension, is their old spelling until 0.3.0 (:func:`report_paths`)."""
    group.addoption(
        "--eagle-json-report",
        dest="eagle_json_report",
        metavar="REPORT",
        default=None,
        help="write the JSON report of the contracts' results to REPORT (versioned, with a "
        "JSON Schema: docs/reports.md; as eagle-contract check --json-report)",
    )
    group.addoption(
        "--eagle-html-report",
        dest="eagle_html_report",
        metavar="HTML",
        default=None,
        help="write one self-contained HTML report of the contracts' results, with plots, "
        "to HTML (as eagle-contract check --html-report)",
    )
    group.addoption(
        "--eagle-report",
        dest="eagle_report",
        metavar="PATH",
        default=None,
        help=f"deprecated, goes in {REMOVED_IN}: PATH.json as --eagle-json-report, any other "
        "PATH as --eagle-html-report",
    )
    add_annotations(group.addoption, "eagle-")


class ReportPaths(NamedTuple):
    """The report files asked for, each with the option that named it (for messages)."""

    json: Path | None
    html: Path | None
    json_flag: str = "--eagle-json-report"
    html_flag: str = "--eagle-html-report"


def report_paths(config: pytest.Config) -> ReportPaths:
    """``--eagle-json-report`` and ``--eagle-html-report``; the old ``--eagle-report PATH``
    stands for the one its extension picked (.json: JSON, else HTML). Giving it beside the
    new option for the same report is a usage error."""
    new_json, new_html = (config.getoption(n) for n in ("eagle_json_report", "eagle_html_report"))
    paths = ReportPaths(Path(new_json) if new_json else None, Path(new_html) if new_html else None)
    old = config.getoption("eagle_report")
    if not old:
        return paths
    is_json = Path(old).suffix == ".json"
    taken = paths.json if is_json else paths.html
    new = "--eagle-json-report" if is_json else "--eagle-html-report"
    if taken is not None:
        raise pytest.UsageError(
            f"--eagle-report {old}: give {new} alone (--eagle-report is its old spelling)"
        )
    if is_json:
        return paths._replace(json=Path(old), json_flag="--eagle-report")
    return paths._replace(html=Path(old), html_flag="--eagle-report")


def warn_deprecated(config: pytest.Config) -> None:
    """One pytest deprecation warning per old spelling given (``-W error`` makes it fatal),
    on the controller only (an xdist worker has the same options)."""
    old = config.getoption("eagle_report")
    if not old or hasattr(config, "workerinput"):
        return
    new = "--eagle-json-report" if Path(old).suffix == ".json" else "--eagle-html-report"
    warning = f"--eagle-report is deprecated and goes in {REMOVED_IN}: use {new} {old}"
    try:
        config.issue_config_time_warning(pytest.PytestDeprecationWarning(warning), stacklevel=2)
    except pytest.PytestDeprecationWarning:  # -W error: refused as a usage error, no traceback
        raise pytest.UsageError(warning) from None
