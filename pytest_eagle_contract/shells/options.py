"""What the plugin's options and ini settings ask for: the run's contracts, shards, sample."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

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
    return parse_sample(str(sample)), int(seed if seed is not None else config.getini("eagle_seed"))


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


# Fixtures for users' own tests ----------------------------------------------------------
