"""One grammar for the command line: every option has help, an option spelled alike means
the same in every command, every ``--help`` ends with the exit codes, and the old spellings
still work for one release with a warning (docs/cli.md, "Renamed options")."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from collections import defaultdict
from pathlib import Path

import pytest

from pytest_eagle_contract.shells import demo
from pytest_eagle_contract.shells.cli import _parser
from pytest_eagle_contract.shells.exit_codes import ExitCode, epilog

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = demo.shipped_contract()

# Spelled alike, meaning otherwise, on purpose: each with why (the test fails when one stops
# colliding, so the list cannot outlive its reason).
KNOWN = {
    "--version": "the top level prints the tool's version (as every CLI does); in a "
    "command it names the engine's version",
}
# One default per option name, but for these: each with why (the test fails when one stops
# differing). ``--sample`` is not among them: 10 in every command (infer and record read all,
# validate --check 5, before 0.2.0; CHANGELOG.md).
DEFAULTS_DIFFER = {
    "--output": "demo writes its shards to a fresh ./eagle-demo; elsewhere no -o means "
    "stdout (infer, schema) or is refused (record)",
    "--engine": "probe without a contract must read the draft's ids as some engine does "
    "(sglang); elsewhere no --engine means the contract's serving.engine or the shards' "
    "pipeline",
    "--timeout": "record waits on one forward pass per shard (60 s, as check's "
    "--sglang-timeout); measure on a generation of --max-new-tokens tokens (120 s)",
}
# One meaning, one spelling: the names a command may not use for these meanings.
SYNONYMS = {"--out": "-o/--output", "--quiet": "-q/--quiet", "--output": "-o/--output"}


def _parsers() -> dict[str, argparse.ArgumentParser]:
    top = _parser()
    (sub,) = (a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return {"eagle-contract": top, **{f"eagle-contract {n}": p for n, p in sub.choices.items()}}


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """What a user sees of a parser: less ``-h`` and the hidden old spellings."""
    return [
        a
        for a in parser._actions  # argparse keeps no public list of a parser's arguments
        if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
        and a.help != argparse.SUPPRESS
    ]


def _meaning(action: argparse.Action) -> tuple[str, str, object]:
    """What an option does, less its wording and default: its action, value type and count."""
    kind = type(action).__name__.lstrip("_")
    value = "-" if action.nargs == 0 else getattr(action.type, "__name__", "str")
    return kind, value, action.nargs


def test_every_option_and_argument_has_help() -> None:
    missing = [
        f"{command} {'/'.join(a.option_strings) or a.metavar or a.dest}"
        for command, parser in _parsers().items()
        for a in _options(parser)
        if not (a.help or "").strip()
    ]
    assert missing == [], "no help text: " + ", ".join(missing)


def test_options_spelled_alike_mean_the_same_in_every_command() -> None:
    meanings: dict[str, dict[tuple[str, str, object], list[str]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for command, parser in _parsers().items():
        for action in _options(parser):
            for flag in action.option_strings:
                meanings[flag][_meaning(action)].append(command)
    clashes = {
        flag: {f"{kind} {value} nargs={n}": cmds for (kind, value, n), cmds in seen.items()}
        for flag, seen in meanings.items()
        if len(seen) > 1
    }
    unknown = {flag: seen for flag, seen in clashes.items() if flag not in KNOWN}
    assert unknown == {}, f"one spelling, several meanings: {json.dumps(unknown, indent=1)}"
    assert set(clashes) == set(KNOWN), "a known clash is gone: drop it from KNOWN"


def test_options_spelled_alike_have_one_default() -> None:
    defaults: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for command, parser in _parsers().items():
        for action in _options(parser):
            long = [f for f in action.option_strings if f.startswith("--")]
            if long and long[0] not in KNOWN:  # KNOWN: two meanings, so two defaults
                defaults[long[0]][repr(action.default)].append(command)
    differ = {flag: seen for flag, seen in defaults.items() if len(seen) > 1}
    unknown = {flag: seen for flag, seen in differ.items() if flag not in DEFAULTS_DIFFER}
    assert unknown == {}, f"one spelling, several defaults: {json.dumps(unknown, indent=1)}"
    assert set(differ) == set(DEFAULTS_DIFFER), "a known difference is gone: drop it"


def test_sample_is_n_or_all_default_10_in_every_command_and_the_plugin(pytester) -> None:
    """``--sample N|all``, default 10, wherever a command reads a sample of shards, as
    ``--eagle-sample`` and the core's default (shells/args.py cannot import the core's)."""
    from pytest_eagle_contract.shards.discovery import DEFAULT_SAMPLE, parse_sample
    from pytest_eagle_contract.shells.args import SAMPLE

    offered = {
        command: action
        for command, parser in _parsers().items()
        for action in _options(parser)
        if "--sample" in action.option_strings
    }
    assert {c.split()[-1] for c in offered} >= {"check", "infer", "record", "measure", "validate"}
    for command, action in offered.items():
        assert action.default == SAMPLE and action.metavar == "N|all", command
        assert f"(default: {SAMPLE}" in action.help, command
    assert parse_sample(SAMPLE) == DEFAULT_SAMPLE
    config = pytester.parseconfig()
    assert config.getini("eagle_sample") == SAMPLE and config.getoption("eagle_sample") is None


def test_engine_names_a_serving_engine_in_every_command() -> None:
    """``--engine`` takes the serving engines only (``resolve`` also the method-only ones, for
    the methods they serve); a trainer is ``resolve --trainer``."""
    from pytest_eagle_contract.engines.names import (
        METHOD_ONLY_ENGINE_NAMES,
        SERVING_ENGINE_NAMES,
        TRAINER_NAMES,
    )

    seen: dict[str, tuple[str, ...]] = {}
    for command, parser in _parsers().items():
        for action in _options(parser):
            if "--engine" in action.option_strings:
                seen[command] = tuple(action.choices or ())
            if "--trainer" in action.option_strings:
                assert command == "eagle-contract resolve"
                assert tuple(action.choices or ()) == TRAINER_NAMES
    resolve = seen.pop("eagle-contract resolve")
    assert resolve == (*SERVING_ENGINE_NAMES, *METHOD_ONLY_ENGINE_NAMES)
    assert seen and all(c == SERVING_ENGINE_NAMES for c in seen.values()), seen


def test_resolve_engine_trainer_is_now_trainer(cli) -> None:
    """``resolve --engine TRAINER`` still resolves, with one warning naming ``--trainer``."""
    args = ("--num-layers", "8", "--ids", "0", "3", "8", "--json")
    new = cli("resolve", "--trainer", "hf", *args)
    assert new.returncode == 0 and new.stderr == "", new.stderr
    for old in (("--engine", "hf"), ("--engine=hf",)):
        res = cli("resolve", *old, *args)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout) == json.loads(new.stdout)
        (line,) = res.stderr.splitlines()
        assert "--engine hf is deprecated" in line and "use --trainer hf" in line
    both = cli("resolve", "--trainer", "hf", "--engine", "sglang", *args)
    assert both.returncode == 2 and "not allowed with" in both.stderr
    none = cli("resolve", *args)
    assert none.returncode == 2 and "--engine --trainer is required" in none.stderr
    help_text = cli("resolve", "--help").stdout
    assert "--trainer TRAINER" in help_text and "specforge" in help_text


def test_resolve_trainer_json_names_its_side_trainer(cli) -> None:
    """``resolve --trainer T --json`` answers under ``trainer`` (a trainer is no engine), in
    every answer it gives: a resolution, a refusal and ``--want``'s (each span too);
    ``--engine`` answers keep ``engine``."""
    ids = ("--num-layers", "8", "--ids", "0", "3", "5", "--json")
    want = ("--num-layers", "8", "--json", "--want", "residual:1", "residual:2", "residual:3")
    answers = [
        cli("resolve", "--trainer", "hf", *ids),  # resolved
        cli("resolve", "--trainer", "specforge", *ids),  # refused: no --arch
        cli("resolve", "--trainer", "specforge", *want),  # --want's answer and its spans
        cli("resolve", "--engine", "hf", *ids),  # the old spelling: a trainer all the same
    ]
    for res, name in zip(answers, ["hf", "specforge", "specforge", "hf"], strict=True):
        out = json.loads(res.stdout)
        assert out.get("trainer") == name and "engine" not in out, out
        for span in out.get("spans", []):
            assert span["trainer"] == name and "engine" not in span, span
    engine = json.loads(cli("resolve", "--engine", "sglang", *ids, "--arch", "llama").stdout)
    assert engine["engine"] == "sglang" and "trainer" not in engine


def test_one_meaning_has_one_spelling() -> None:
    """A file or folder to write is ``-o/--output``; ``-q`` is ``--quiet``; no ``--out``."""
    wrong = []
    for command, parser in _parsers().items():
        for action in _options(parser):
            flags = set(action.option_strings)
            if "--out" in flags:
                wrong.append(f"{command} --out (use {SYNONYMS['--out']})")
            if ("-o" in flags) != ("--output" in flags):
                wrong.append(f"{command} {'/'.join(sorted(flags))} (use -o/--output)")
            if ("-q" in flags) != ("--quiet" in flags):
                wrong.append(f"{command} {'/'.join(sorted(flags))} (use -q/--quiet)")
    assert wrong == []


def test_every_epilog_has_examples_that_parse() -> None:
    """Each command's ``--help`` shows ``Examples:``, and each example is a command line its
    parser takes (as main() takes it: shard paths may follow the options)."""
    top = _parser()
    for command, parser in _parsers().items():
        if command == "eagle-contract":
            continue
        text = parser.epilog or ""
        assert "\nExamples:\n" in f"\n{text}", command
        block = f"\n{text}".split("\nExamples:\n", 1)[1].split("\n\n", 1)[0]
        lines = [line.strip() for line in block.splitlines()]
        assert lines and all(line.startswith(f"{command}") for line in lines), (command, lines)
        for line in lines:
            words = shlex.split(line)[1:]
            try:
                args, extra = top.parse_known_args(words)
            except SystemExit:
                pytest.fail(f"{line!r} does not parse")
            assert args.command == words[0] and not [e for e in extra if e.startswith("-")], line


@pytest.mark.slow
def test_every_help_ends_with_the_exit_codes(cli) -> None:
    for command in _parsers():
        words = command.split()[1:]
        res = cli(*words, "--help")
        assert res.returncode == 0, res.stderr
        assert res.stdout.rstrip().endswith(epilog()), f"{command} --help:\n{res.stdout}"
    assert "69" in epilog() and "130" in epilog()


def test_docs_list_the_exit_codes_the_code_defines() -> None:
    text = (ROOT / "docs" / "cli.md").read_text()
    section = text.split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    listed = {int(c) for c in re.findall(r"^\| \*\*(\d+)\*\* \|", section, re.M)}
    assert listed == {int(c) for c in ExitCode}


# -- the old spellings, kept for one release ----------------------------------------------


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("grammar")
    demo.write_demo_shards(root, shards=2)
    return root


@pytest.mark.slow
def test_check_json_report_and_its_old_spelling(shards: Path, tmp_path: Path, cli) -> None:
    args = ("check", CONTRACT, shards / "good", "--sample", "all", "--no-sharpness")
    new = cli(*args, "--json-report", tmp_path / "new.json")
    assert new.returncode == 0 and "deprecated" not in new.stderr, new.stderr
    old = cli(*args, "--json", tmp_path / "old.json")
    assert old.returncode == 0, old.stderr
    assert "--json REPORT is deprecated" in old.stderr and "use --json-report" in old.stderr
    for name in ("new.json", "old.json"):
        report = json.loads((tmp_path / name).read_text())
        assert report["kind"] == "check" and report["ok"] is True
    printed = cli(*args, "--json")  # --json alone: the report on stdout, as in every command
    assert printed.returncode == 0 and "deprecated" not in printed.stderr
    report = json.loads(printed.stdout)
    assert report["kind"] == "check" and report["schema_version"] == 1
    bad = cli("check", CONTRACT, shards / "embed-in-front", "--sample", "all", "--json")
    assert bad.returncode == 1
    found = json.loads(bad.stdout)["findings"]
    assert found and all(f["url"].endswith(f"#{f['code'].lower()}-{f['rule']}") for f in found)


@pytest.mark.slow
def test_the_newcomers_json_before_the_contract_says_what_happened(shards: Path, cli) -> None:
    """``check --json CONTRACT DIR`` (the old spelling took CONTRACT as the report path):
    still the old meaning for this release, and the warning says so."""
    res = cli("check", "--json", CONTRACT, shards / "good")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "was taken as the report's path" in res.stderr
    assert "write --json after the contract" in res.stderr


@pytest.mark.slow
def test_audit_json_report_and_its_old_spelling(shards: Path, tmp_path: Path, cli) -> None:
    args = ("audit", CONTRACT, shards / "good", "--cache", tmp_path / "cache", "--workers", "1")
    old = cli(*args, "--json", tmp_path / "old.json")
    assert old.returncode == 0 and "use --json-report" in old.stderr, old.stderr
    assert json.loads((tmp_path / "old.json").read_text())["kind"] == "audit"
    printed = cli(*args, "--json")
    assert printed.returncode == 0 and json.loads(printed.stdout)["kind"] == "audit"


def test_record_and_demo_out_is_now_o_output(tmp_path: Path, cli) -> None:
    """``--out`` still stores where ``-o/--output`` does, with a warning, and is in no help."""
    for command in ("record", "demo"):
        text = cli(command, "--help").stdout
        assert "-o DIR, --output DIR" in text and "--out " not in text
    afile = tmp_path / "afile"
    afile.write_text("")
    for flag in ("--out", "-o", "--output"):
        res = cli("demo", flag, afile)  # a file, not a folder: refused before any work
        assert res.returncode == 2 and str(afile) in res.stderr, res.stderr
        assert ("--out is deprecated" in res.stderr) == (flag == "--out")
        assert "use -o/--output" in res.stderr or flag != "--out"


def test_the_shards_format_is_shard_format_and_format_warns(shards: Path, cli) -> None:
    """``--shard-format`` names the shards' format; ``--format``, the old name, stores the same
    with a warning and is in no help (a format is what a command prints, CLI-STYLE.md §1)."""
    for command in ("inspect", "infer", "identify"):
        text = cli(command, "--help").stdout
        assert "--shard-format" in text and "--format " not in text, command
    shard = next((shards / "good").rglob("*.ckpt"))
    new = cli("inspect", shard, "--shard-format", "specforge", "--json")
    old = cli("inspect", shard, "--format", "specforge", "--json")
    assert new.returncode == old.returncode == 0, old.stderr
    assert json.loads(new.stdout) == json.loads(old.stdout) and new.stderr == ""
    (line,) = old.stderr.splitlines()
    assert "--format is deprecated" in line and "use --shard-format" in line, line
    wrong = cli("inspect", shard, "--shard-format", "speculators", "--json")
    assert json.loads(wrong.stdout) != json.loads(new.stdout)  # used, not only parsed


def test_record_without_an_output_folder_is_a_usage_error(shards: Path, cli) -> None:
    res = cli("record", CONTRACT, shards / "good", "--sglang-url", "http://127.0.0.1:9")
    assert res.returncode == 2 and "-o/--output DIR" in res.stderr


def test_check_report_is_now_html_report(shards: Path, cli) -> None:
    """``check --report HTML`` stores where ``--html-report`` does, with a warning, and is in
    no help; either, onto the contract, is refused before any check (exit 2)."""
    text = cli("check", "--help").stdout
    assert "--html-report HTML" in text and "--report " not in text
    for flag in ("--report", "--html-report"):
        res = cli("check", CONTRACT, shards / "good", flag, CONTRACT)
        assert res.returncode == 2 and "an input of this run" in res.stderr, res.stderr
        assert ("--report is deprecated" in res.stderr) == (flag == "--report")
        assert "use --html-report" in res.stderr or flag != "--report"
