"""The pytest plugin: ``pytest --eagle-contract [CONTRACT.yaml ...]``.

A thin shell over the planner: each unit (one check on one sampled shard) becomes an item.
Importing this module loads nothing heavy (no torch, safetensors, YAML, jsonschema,
hypothesis); all of that is imported when a contract is asked for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from . import options, report_hooks
from .args import check_names
from .fixtures import eagle_capture, eagle_contract, eagle_shard, pytest_generate_tests

if TYPE_CHECKING:
    from ..checks.unit import Unit
    from ..contract.model import Contract
    from ..findings import Finding
    from ..plan.planner import Runner
    from ..plan.request import CheckRequest

_RUNNER: pytest.StashKey[Runner] = pytest.StashKey()
_REQUEST: pytest.StashKey[CheckRequest] = pytest.StashKey()
_COLLECTED: pytest.StashKey[set[Path]] = pytest.StashKey()
_CHANGES: pytest.StashKey[dict[str, list[str]]] = pytest.StashKey()
_CHANGES_KEY = "eagle_contract_changes"  # in xdist's workerinput
_NOTES: pytest.StashKey[list[str]] = pytest.StashKey()  # the xdist workers' cache notes
_NOTES_KEY = "eagle_contract_notes"  # in xdist's workeroutput


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "eagle_contract(path): the contract the eagle_contract and eagle_shard "
        "fixtures of this test use",
    )
    config.stash[_COLLECTED] = set()
    options.warn_deprecated(config)
    if config.getoption("eagle_sglang_url") is not None:  # a bad URL or timeout: usage error
        from ..capture.sglang_client import use_server
        from ..errors import UsageError

        try:
            use_server(
                config.getoption("eagle_sglang_url"),
                config.getoption("eagle_sglang_timeout"),
                flush_cache=config.getoption("eagle_sglang_flush_cache"),
            )
        except UsageError as exc:
            raise pytest.UsageError(str(exc)) from None
    if options.active(config) and getattr(config.option, "dist", "no") == "load":
        # xdist: a shard's items go to one worker, which reads the shard once. For items
        # without a group (the user's own tests) loadgroup schedules exactly as load does.
        config.option.dist = "loadgroup"
    if options.active(config):  # bad options are usage errors now, not a traceback per item later
        config.pluginmanager.register(report_hooks.ReportHooks(config), "eagle-contract-reports")
        from ..errors import EagleContractError, UsageError

        try:
            options.sampling(config)
            options.measure_settings(config)
            options.batch_size(config, 0)
            options.option_contracts(config)
            for shards in options.shards_override(config):
                if not shards.exists():
                    raise UsageError(f"--eagle-shards: shard path {shards} does not exist")
            report_hooks.check_report_path(
                config, [*options.chosen_contracts(config), *options.shards_override(config)]
            )
            model = options.target_model(config)
            if model is not None:
                _runner(config).open_target(model)  # kept: the items reuse it
            else:
                _runner(config)
            config.stash[_CHANGES] = _rewrite_baselines(config)
        except EagleContractError as exc:
            raise pytest.UsageError(f"--eagle-contract: {exc}") from None


def _rewrite_baselines(config: pytest.Config) -> dict[str, list[str]]:
    """``--eagle-contract-update``: re-measure and rewrite each contract's bounds, once, on
    the controller (xdist workers get the changes through ``workerinput``, never write)."""
    worker = getattr(config, "workerinput", None)
    if worker is not None:
        changes: dict[str, list[str]] = worker.get(_CHANGES_KEY, {})
        return changes
    if not config.getoption("eagle_update"):
        return {}
    from ..authoring.baseline import update_contract

    sample, seed = options.sampling(config)
    shards = options.shards_override(config) or None
    out = {}
    for path in options.chosen_contracts(config):
        if path.is_file():
            update = update_contract(path, shards, sample, seed)
            if update.changes:  # the warnings go with the changes they qualify
                out[str(path.resolve())] = update.lines()
    return out


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist: hand each worker the baseline changes the controller made."""
    node.workerinput[_CHANGES_KEY] = node.config.stash.get(_CHANGES, {})


def pytest_sessionfinish(session: pytest.Session) -> None:
    """xdist worker: hand the controller the notes of the caches this worker skipped."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        from ..version import cache_notes

        output[_NOTES_KEY] = cache_notes()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist controller: keep a finished worker's cache notes."""
    notes = getattr(node, "workeroutput", {}).get(_NOTES_KEY, [])
    node.config.stash.setdefault(_NOTES, []).extend(notes)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Under ``-v``: one note per cache skipped (a home that cannot be written, say); the
    run went on without it, with the same results."""
    if config.get_verbosity() < 1:
        return
    from ..version import cache_notes

    for note in dict.fromkeys([*cache_notes(), *config.stash.get(_NOTES, [])]):
        terminalreporter.write_line(f"eagle-contract: note: {note}")


def pytest_report_header(config: pytest.Config) -> str | None:
    if not options.active(config):
        return None
    sample, seed = options.sampling(config)
    shards = options.shards_override(config)
    where = f", shards {', '.join(map(str, shards))}" if shards else ""
    return f"eagle-contract: sample {'all' if sample is None else sample}, seed {seed}{where}"


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """A YAML file given as a positional argument is a contract (as pytest collects any
    file it is handed); other contracts join the run in pytest_collection_modifyitems."""
    config = parent.config
    if not options.active(config) or file_path.suffix not in options.CONTRACT_SUFFIXES:
        return None
    if not parent.session.isinitpath(file_path):
        return None
    config.stash[_COLLECTED].add(file_path.resolve())
    return ContractFile.from_parent(parent, path=file_path)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Add the run's contracts (option, else ini, else contracts/) beside the tests pytest
    collected from its own arguments, testpaths or rootdir."""
    if not options.active(config):
        return
    contracts = [
        p for p in options.chosen_contracts(config) if p.resolve() not in config.stash[_COLLECTED]
    ]
    if not contracts and not config.stash[_COLLECTED]:
        raise pytest.UsageError(
            "--eagle-contract: no contract given. Pass --eagle-contract PATH, set ini "
            f"eagle_contract_paths, or put contracts in {config.rootpath / options.DEFAULT_DIR}/"
        )
    for path in contracts:
        if not path.is_file():
            raise pytest.UsageError(f"--eagle-contract: no such contract {path}")
        config.stash[_COLLECTED].add(path.resolve())
        items.extend(session.genitems(ContractFile.from_parent(session, path=path)))


class UnitFailed(Exception):
    """A unit found problems; carries the findings for the report."""

    def __init__(self, findings: list[Finding]) -> None:
        super().__init__(f"{len(findings)} finding(s)")
        self.findings = findings


def failure_text(findings: list[Finding], verbosity: int) -> str:
    """A failing item's text: one entry per rule code (its count, the first one's place,
    message and hints, and ``eagle-contract explain CODE``); under ``pytest -v`` every
    finding in full (where, expected, found, hint)."""
    from ..render import WIDTH, format_findings, format_short, unique

    found = unique(findings)
    if verbosity > 0:
        return format_findings(found)
    text = format_short(found, WIDTH, few=0)
    if len(found) > len({f.code for f in found}):
        text += "\n\n(pytest -v prints every finding in full: where, expected, found)"
    return text


class ContractFile(pytest.File):
    """A contract YAML file: one item per (check, sampled shard), or, batched
    (``--eagle-batch``), one item per batch of shards running every shard check on them."""

    def collect(self) -> Iterator[pytest.Item]:
        from ..contract.model import load_contract
        from ..errors import EagleContractError

        try:
            contract = load_contract(self.path)
            units = _request(self.config).plan(contract)
        except EagleContractError as exc:  # one failing item: the user's tests still run
            yield ContractProblemItem.from_parent(self, name="contract", message=str(exc))
            return
        changes = self.config.stash.get(_CHANGES, {}).get(str(self.path.resolve()))
        if changes:
            yield BaselineItem.from_parent(self, name="baseline", changes=changes)
        grouped = getattr(self.config.option, "dist", "no") == "loadgroup"
        for name, batch in _items(units, self.config):
            # The explicit nodeid parses as name + [params], as pytest's own parametrised
            # ids do, so --lf and --sw match the ids they stored.
            item = ContractItem.from_parent(
                self, name=name, units=batch, nodeid=f"{self.nodeid}::{name}"
            )
            if len(batch) == 1 and batch[0].shard is not None and grouped:
                item.add_marker(pytest.mark.xdist_group(f"eagle-shard:{batch[0].shard}"))
            yield item


def _items(units: list[Unit], config: pytest.Config) -> Iterator[tuple[str, tuple[Unit, ...]]]:
    """``(name, units)`` of each item: a unit alone, or (batched) the units of a run of
    consecutive shards, named ``batch[FIRST..LAST]`` by the shards' labels."""
    shards = list(dict.fromkeys(u.shard for u in units if u.shard is not None))
    size = options.batch_size(config, len(shards))
    if size == 1:
        yield from ((u.name, (u,)) for u in units)
        return
    yield from ((u.name, (u,)) for u in units if u.shard is None)
    per_shard: dict[Path, list[Unit]] = {}
    for u in units:
        if u.shard is not None:
            per_shard.setdefault(u.shard, []).append(u)
    for start in range(0, len(shards), size):
        batch = [u for shard in shards[start : start + size] for u in per_shard[shard]]
        yield f"batch[{batch[0].label}..{batch[-1].label}]", tuple(batch)


class ContractItem(pytest.Item):
    """One unit, or a batch of them (the units of consecutive shards)."""

    def __init__(self, *, units: tuple[Unit, ...], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.units = units
        self.unit = units[0]
        self.findings: list[Finding] = []  # warnings too: the reports read them
        self.results: list[tuple[Unit, list[Finding], dict[str, Any]]] = []  # for the reports

    def runtest(self) -> None:
        from ..errors import EagleContractError

        runner = _runner(self.config)
        self.findings, self.results = [], []
        try:
            for unit in self.units:
                checked = runner.check(unit)
                self.results.append((unit, checked.findings, checked.measured))
                self.findings.extend(checked.findings)
        except EagleContractError as exc:  # a bad input named by the run, not a bug
            pytest.fail(str(exc), pytrace=False)
        findings = self.findings
        errors = [f for f in findings if f.severity == "error"]
        if (
            errors
            and self.config.getoption("eagle_sglang_skip")
            and all(f.code == "EC705" for f in errors)
        ):
            pytest.skip(errors[0].message)
        if errors:
            raise UnitFailed(findings)
        from ..findings import NOT_RUN

        gaps = [f for f in findings if f.code == NOT_RUN]
        if gaps:  # a check that did not run is a skip with its reason, never a quiet pass
            message = "; ".join(dict.fromkeys(f"EC009 {f.message}" for f in gaps))
            raise pytest.skip.Exception(message, _use_item_location=True)

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> str | Any:
        if isinstance(excinfo.value, UnitFailed):
            return failure_text(excinfo.value.findings, self.config.get_verbosity())
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int, str]:
        from ..plan.registry import BY_NAME

        contract: Contract = self.unit.contract
        key = BY_NAME[self.unit.check].keys[0] if len(self.units) == 1 else "training.shards"
        line = contract.line_of(key)
        return self.path, line - 1, f"{contract.name}::{self.name}"


class ContractProblemItem(pytest.Item):
    """A contract that cannot be loaded or planned: fails with the located reasons, and
    never stops the collection of anything else."""

    def __init__(self, *, message: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.message = message

    def runtest(self) -> None:
        pytest.fail(f"invalid contract or shards:\n{self.message}", pytrace=False)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"{self.path.name}::contract"


class BaselineItem(pytest.Item):
    """Fails the run that rewrote a contract's bounds, listing what moved."""

    def __init__(self, *, changes: list[Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.changes = changes

    def runtest(self) -> None:
        raise UnitFailed([])

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        lines = [
            f"{self.path.name}: norm bounds re-measured and rewritten "
            "(--eagle-contract-update); review the diff and commit it:"
        ]
        lines += [f"  {change}" for change in self.changes]
        return "\n".join(lines)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"{self.path.name}::baseline"


def _html_report(config: pytest.Config) -> bool:
    return options.report_paths(config).html is not None


def _request(config: pytest.Config) -> CheckRequest:
    """The session's request, from the ``--eagle-*`` options and ini keys, built once."""
    if _REQUEST not in config.stash:
        from ..plan.request import CheckRequest

        dirs = [Path(d).resolve() for d in (config.getoption("eagle_captures") or [])]
        for d in dirs:
            if not d.exists():
                raise pytest.UsageError(f"--eagle-captures: {d} does not exist")
        if config.getoption("eagle_render_url") is not None:
            from ..capture.render_client import render_url
            from ..errors import UsageError

            try:
                render_url(config.getoption("eagle_render_url"))
            except UsageError as exc:
                message = str(exc).replace("--render-url", "--eagle-render-url")
                raise pytest.UsageError(message) from None
        env_file = config.getoption("eagle_serving_env")
        serving_env = None
        if env_file is not None:
            from ..engines.knobs import read_env_file
            from ..errors import UsageError

            try:
                serving_env = read_env_file(env_file)
            except UsageError as exc:
                message = str(exc).replace("--serving-env", "--eagle-serving-env")
                raise pytest.UsageError(message) from None
        sample, seed = options.sampling(config)
        chosen = options.measure_settings(config)
        measure = None
        if chosen is not None:
            from ..checks.unit import MeasureSettings

            measure = MeasureSettings(*chosen)
        config.stash[_REQUEST] = CheckRequest.of(
            shards=options.shards_override(config),
            sample=sample,
            seed=seed,
            checks=check_names(config.getoption("eagle_checks")),
            no_sharpness=config.getoption("eagle_no_sharpness"),
            target_model=options.target_model(config),
            serving_target_model=options.serving_target_model(config),
            tokenizer=options.path_option(config, "eagle_tokenizer"),
            conversations=options.path_option(config, "eagle_conversations"),
            render_url=config.getoption("eagle_render_url"),
            reference=config.getoption("eagle_reference"),
            captures=dirs,
            sglang_url=config.getoption("eagle_sglang_url"),
            timeout=config.getoption("eagle_sglang_timeout"),
            serving_args=config.getoption("eagle_serving_args"),
            serving_env=serving_env,
            serving_env_label=f"--eagle-serving-env {env_file}" if env_file else "",
            measure=measure,
        )
    return config.stash[_REQUEST]


def _runner(config: pytest.Config) -> Runner:
    """One runner per session: shards read once, the target model and captures opened once
    (an ``--eagle-html-report`` plots the target's curve, which the evidence family then
    measures)."""
    if _RUNNER not in config.stash:
        from ..plan.planner import Runner

        settings = dataclasses.replace(_request(config).settings, curve=_html_report(config))
        config.stash[_RUNNER] = Runner(settings)
    return config.stash[_RUNNER]


__all__ = ["eagle_capture", "eagle_contract", "eagle_shard", "pytest_generate_tests"]
