"""Fixtures for users' own tests: ``eagle_contract``, ``eagle_shard``, ``eagle_capture``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from . import options

if TYPE_CHECKING:
    from ..contract.model import Contract


def _marked_contract(node: Any, config: pytest.Config) -> Path:
    marker = node.get_closest_marker("eagle_contract")
    if marker is not None and marker.args:
        path = Path(marker.args[0])
        if not path.is_absolute():
            candidates = [config.rootpath / path, Path(node.path).parent / path]
            path = next((c for c in candidates if c.is_file()), candidates[0])
        return path
    chosen = (
        (options.option_contracts(config) + options.named_contracts(config))
        if options.active(config)
        else []
    )
    candidates = chosen or options.configured_contracts(config)
    if len(candidates) == 1:
        return candidates[0]
    from ..errors import UsageError

    raise UsageError(
        f"{node.nodeid}: {len(candidates)} contracts could apply; mark the test "
        "with @pytest.mark.eagle_contract('contracts/x.yaml') or name one with "
        "--eagle-contract PATH"
    )


def _load(path: Path) -> Contract:
    from ..contract.model import load_contract

    return load_contract(path)


@pytest.fixture
def eagle_contract(request: pytest.FixtureRequest) -> Contract:
    """The contract chosen by ``@pytest.mark.eagle_contract(path)``, else the one named with
    ``--eagle-contract PATH``, else the only configured one."""
    from ..errors import EagleContractError

    try:
        return _load(_marked_contract(request.node, request.config))
    except EagleContractError as exc:
        pytest.fail(str(exc), pytrace=False)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "eagle_shard" not in metafunc.fixturenames:
        return
    from ..errors import EagleContractError
    from ..shards.discovery import shard_paths

    config = metafunc.config
    try:
        contract = _load(_marked_contract(metafunc.definition, config))
        sample, seed = options.sampling(config)
        found = shard_paths(contract, options.shards_override(config) or None, sample, seed)
    except EagleContractError as exc:
        from ..errors import UsageError

        # no shards is a skip with the reason; an ambiguous or invalid contract fails
        outcome = (
            "fail"
            if isinstance(exc, UsageError) and "contracts could apply" in str(exc)
            else "skip"
        )
        reason = str(exc).splitlines()[0]
        metafunc.parametrize(
            "eagle_shard", [(outcome, f"eagle_shard: {reason}")], ids=["no-shards"], indirect=True
        )
        return
    metafunc.parametrize(
        "eagle_shard",
        [(contract, path) for path, _ in found],
        ids=[label for _, label in found],
        indirect=True,
    )


@pytest.fixture
def eagle_shard(request: pytest.FixtureRequest) -> Any:
    """One sampled shard of the test's contract, read: an :class:`EagleShard`."""
    from ..errors import EagleContractError
    from ..shards.shard import EagleShard

    contract, path = request.param
    if contract == "skip":
        pytest.skip(path)
    if contract == "fail":
        pytest.fail(path, pytrace=False)
    try:
        return EagleShard.read(contract, path)
    except (EagleContractError, ValueError) as exc:  # the file's coded problem, not a bug
        problem = _coded(exc)
    pytest.fail(f"eagle_shard: {path}: {problem}", pytrace=False)


def _coded(exc: Exception) -> str:
    """An error as one line of text, with its rule code first when it has one."""
    from ..errors import CodedError

    if isinstance(exc, CodedError) and not str(exc).startswith(exc.code):
        return f"{exc.code} {exc.message}"
    return str(exc)


@pytest.fixture
def eagle_capture(request: pytest.FixtureRequest, eagle_shard: Any) -> Any:
    """The server's aux states [T, n_aux * H] for this test's ``eagle_shard``: live when
    --eagle-sglang-url is given, else from --eagle-captures, else skipped with the reason."""
    from ..capture.fixture import aux_for_shard
    from ..errors import CaptureError, EagleContractError, NoCapture

    config = request.config
    dirs = [Path(d) for d in (config.getoption("eagle_captures") or [])]
    try:
        return aux_for_shard(
            eagle_shard.contract,
            eagle_shard.path,
            url=config.getoption("eagle_sglang_url"),
            captures=dirs or None,
            timeout=config.getoption("eagle_sglang_timeout"),
        )
    except NoCapture as exc:
        pytest.skip(f"eagle_capture: {exc}")
    except CaptureError as exc:
        if exc.code == "EC705" and config.getoption("eagle_sglang_skip"):
            pytest.skip(f"eagle_capture: {exc.message}")
        problem = _coded(exc)
    except EagleContractError as exc:  # a capture file or option that cannot be used
        problem = _coded(exc)
    pytest.fail(f"eagle_capture: {problem}", pytrace=False)
