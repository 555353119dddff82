from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import cli_zygote
import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from kinds import KINDS, TESTS

# torch is imported here, once per process (each xdist worker), before any in-process
# pytester run: pytester restores sys.modules after each run, so a torch first imported
# inside one would be dropped and imported again by the next, and torch cannot be
# initialised twice in a process ("Only a single TORCH_LIBRARY ...", "bad call flags").

pytest_plugins = ["pytester"]


def _import_the_package() -> None:
    """Every module of the package, imported once per process (0.6 s; nothing heavy but
    numpy), before any in-process pytester run. pytester drops the modules a run imported
    first, so a module that outlived one run (imported at collection, say checks.vocabulary)
    could call into a dropped one whose classes the next run no longer makes: the values
    check's reading.comparable met a re-imported shards.stored.Stored ("'Stored' object has no
    attribute 'is_complex'"), failing test_plugin's items whenever a worker ran them after a
    module that had imported part of the package (seen with -n 2 on test_plugin.py beside
    test_vocabulary.py)."""
    import importlib
    import pkgutil

    import pytest_eagle_contract as package

    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not module.name.endswith("__main__"):  # __main__ runs the CLI
            importlib.import_module(module.name)


_import_the_package()

# Every test module's kind is its folder (tests/kinds.py), selectable with -m (a module
# outside those folders fails test_every_test_module_has_a_kind). The slow marker (a test
# over ~2 s: a model, a subprocess, a sweep) is set per test; the quick loop is
# `pytest -m "not slow" -n 2`.


def pytest_configure(config: pytest.Config) -> None:
    for kind, what in KINDS.items():
        config.addinivalue_line("markers", f"{kind}: {what} (the tests in tests/{kind}/)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        kind = item.path.parent.name
        if kind in KINDS and item.path.parent.parent.resolve() == TESTS:
            item.add_marker(kind)


def capped(memory: int) -> Callable[[], None]:
    """A child's ``preexec_fn`` that caps its address space at ``memory`` bytes."""
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


_ZYGOTE = cli_zygote.Zygote()  # eagle-contract runs forked from a process that has torch


def pytest_unconfigure(config: pytest.Config) -> None:
    _ZYGOTE.close()


def run_cli(
    *args: object,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    memory: int | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run ``eagle-contract`` as a user would, in a process of its own (``env``: added to
    the environment; ``memory``: its address space capped at that many bytes). The process
    is forked from tests/cli_zygote.py's zygote where that changes nothing the run can see
    (it saves torch's import per run), else it is the installed command."""
    full_env = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
    if memory is None and cli_zygote.enabled() and cli_zygote.forkable(full_env):
        return _ZYGOTE.run([str(a) for a in args], cwd, full_env, timeout)
    exe = Path(sys.executable).with_name("eagle-contract")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "pytest_eagle_contract"]
    return subprocess.run(
        [*cmd, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full_env,
        preexec_fn=None if memory is None else capped(memory),
        timeout=timeout,
    )


def no_traceback(res: subprocess.CompletedProcess[str]) -> None:
    """The run printed no Python traceback."""
    assert "Traceback" not in res.stdout + res.stderr, res.stdout + res.stderr


def build_docs_site(out: Path) -> Path:
    """The docs site built into ``out`` as `.ci/run` builds it (``mkdocs build --strict``),
    asserting it builds; ``out``."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=TESTS.parent,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def hostile_values(words: list[str], key_size: int, leaves: int) -> st.SearchStrategy[object]:
    """Any value a hostile JSON or YAML document holds: scalars of every kind and ``words``
    (what the format gives a meaning), nested in lists and maps (keys up to ``key_size``
    characters, up to ``leaves`` leaves)."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(-(2**70), 2**70)
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.text(max_size=12)
        | st.sampled_from(words)
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(st.text(max_size=key_size), inner, max_size=4)
        ),
        max_leaves=leaves,
    )


def speculators_states(
    data: Path, files: int, tokens: int, hidden: int, g: torch.Generator
) -> list[torch.Tensor]:
    """``files`` current-speculators shards ``data/hidden_states/hs_{i}.safetensors`` of
    ``tokens`` random ids (vocabulary 100) and four bf16 slots whose per-token norms sit
    around 1, 2, 3 and 4; each file's ids (its dataset row is the caller's)."""
    from pytest_eagle_contract.shards.synthetic import states_with_norms
    from pytest_eagle_contract.shards.writing import save

    out = []
    for i in range(files):
        ids = torch.randint(0, 100, (tokens,), generator=g)
        slots = [
            states_with_norms(tokens, hidden, m, 0.1, g, torch.bfloat16)
            for m in (1.0, 2.0, 3.0, 4.0)
        ]
        states = torch.stack(slots, dim=1)
        save(
            data / "hidden_states" / f"hs_{i}.safetensors",
            {"hidden_states": states, "token_ids": ids},
        )
        out.append(ids)
    return out


def speculators_contract(hidden: int, slots: list[str]) -> str:
    """The contract of :func:`speculators_states`' files under ``data/``: ``slots`` its
    ``training.slots`` entries (YAML)."""
    return f"""\
contract: speculators-current
version: 1
target: {{num_hidden_layers: 8, hidden_size: {hidden}, vocab_size: 100}}
training:
  format: speculators
  shards: data/hidden_states
  slots:
""" + "".join(f"    - {slot}\n" for slot in slots)


def fuzz_settings(examples: int) -> settings:
    """Seeded Hypothesis settings for the hostile fuzz tests: ``examples`` each, unless
    EAGLE_FUZZ_EXAMPLES says how many."""
    return settings(
        max_examples=int(os.environ.get("EAGLE_FUZZ_EXAMPLES", str(examples))),
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


@pytest.fixture
def cli():
    return run_cli


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Every JSON report the tests wrote, anywhere under the session's temporary folder
    (xdist's workers write under the controller's), follows the published schema."""
    import json

    from pytest_eagle_contract.reports.json_report import SCHEMA_FILE, problems

    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None or hasattr(session.config, "workerinput") or session.exitstatus > 1:
        return
    seen, bad = 0, []
    for path in factory.getbasetemp().rglob("*.json"):
        try:  # regular files only: the hostile tests leave FIFOs and links behind
            if path.is_symlink() or not path.is_file() or path.stat().st_size > 1 << 24:
                continue
            data = json.loads(path.read_bytes())
        except (OSError, ValueError, RecursionError):  # hostile tests write hostile JSON
            continue
        if isinstance(data, dict) and "schema_version" in data and "kind" in data:
            seen += 1
            bad += [f"{path}: {p}" for p in problems(data)[:5]]
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and seen:
        reporter.line("")
        reporter.write_sep("-", f"{seen} JSON report(s) of the tests checked against {SCHEMA_FILE}")
        for line in bad:
            reporter.write_line(f"NOT VALID: {line}", red=True)
    if bad:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
