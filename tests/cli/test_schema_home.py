"""Contracts in editors and pre-commit: the schema's stable home (a copy committed beside the
contracts, named by the contract's first line, with the schema's ``$id``), and
``eagle-contract validate`` (no torch), driven as subprocesses."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from conftest import run_cli

from pytest_eagle_contract.contract.model import SCHEMA_FILE, schema_path
from pytest_eagle_contract.shells import demo


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("demo")
    demo.write_demo_shards(root, shards=3)
    return root / "good"


LAYERS = ("--num-layers", "6", "--layers", "embed", "residual:2", "residual:4", "residual:5")


def _first_line(path: Path) -> str:
    return path.read_text().splitlines()[0]


@pytest.mark.slow
def test_infer_writes_the_schema_beside_the_contract_and_names_it(
    shards: Path, tmp_path: Path
) -> None:
    """The link survives a commit to another repository: it is relative, to a copy in the
    repository; an editor validates the contract against that copy, as check does."""
    out = tmp_path / "repo" / "contracts" / "run7.yaml"
    done = run_cli("infer", shards, "-o", out, *LAYERS, cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    copy = out.parent / SCHEMA_FILE
    assert _first_line(out) == f"# yaml-language-server: $schema={SCHEMA_FILE}"
    assert copy.read_text() == schema_path().read_text()
    schema = json.loads(copy.read_text())
    assert schema["$id"].endswith(SCHEMA_FILE)
    jsonschema.Draft202012Validator(schema).validate(yaml.safe_load(out.read_text()))
    # another repository: the folder moved, the link still resolves
    moved = tmp_path / "elsewhere"
    shutil.copytree(out.parent, moved)
    assert (moved / _first_line(moved / "run7.yaml").split("$schema=")[1]).is_file()
    # a second contract refreshes the copy; a file that is not the schema is never replaced
    again = run_cli("infer", shards, "-o", out.with_name("run8.yaml"), *LAYERS)
    assert again.returncode in (0, 1) and copy.read_text() == schema_path().read_text()
    copy.write_text('{"not": "the schema"}')
    refused = run_cli("infer", shards, "-o", out.with_name("run9.yaml"), *LAYERS)
    assert refused.returncode == 2 and "is not a copy of the contract schema" in refused.stderr
    assert not out.with_name("run9.yaml").exists()  # refused before anything was written


def test_schema_o_writes_refreshes_and_refuses(tmp_path: Path) -> None:
    target = tmp_path / "schemas" / SCHEMA_FILE
    assert run_cli("schema", "-o", target).returncode == 0
    assert target.read_text() == schema_path().read_text()
    target.write_text(schema_path().read_text().replace("version 1", "version 1 (older)"))
    assert run_cli("schema", "-o", target).returncode == 0  # an earlier copy: refreshed
    assert target.read_text() == schema_path().read_text()
    other = tmp_path / "notes.json"
    other.write_text("{}")
    done = run_cli("schema", "-o", other)
    assert done.returncode == 2 and other.read_text() == "{}"


def test_infer_to_stdout_names_the_schema_id(shards: Path) -> None:
    done = run_cli("infer", shards, *LAYERS)
    schema_id = json.loads(schema_path().read_text())["$id"]
    assert done.stdout.splitlines()[0] == f"# yaml-language-server: $schema={schema_id}"


def test_validate_says_which_contracts_are_invalid_and_loads_no_torch(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    shutil.copy(demo.shipped_contract(), good)
    bad = tmp_path / "bad.yaml"
    bad.write_text("contract: x\nversion: 1\ntarget: {num_hidden_layers: eight}\n")
    assert run_cli("validate", good).returncode == 0
    done = run_cli("validate", good, bad)
    assert done.returncode == 2
    assert f"{good}: valid" in done.stdout
    assert f"{bad}:3:10: target.num_hidden_layers: 'eight' is not of type 'integer'" in done.stderr
    probe = (
        "import sys\nfrom pytest_eagle_contract.shells.cli import main\n"
        f"rc = main(['validate', {str(good)!r}])\n"
        "print(rc, 'torch' in sys.modules, 'numpy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout
    assert out.splitlines()[-1] == "0 False False"


@pytest.mark.slow
def test_validate_check_checks_each_valid_contract_on_its_own_shards(
    shards: Path, tmp_path: Path
) -> None:
    text = demo.shipped_contract().read_text()
    ok, buggy = tmp_path / "ok.yaml", tmp_path / "buggy.yaml"
    ok.write_text(text.replace("../eagle-demo/good", str(shards)))
    buggy.write_text(text.replace("../eagle-demo/good", str(shards.parent / "embed-in-front")))
    assert run_cli("validate", "--check", "--sample", "2", ok).returncode == 0
    done = run_cli("validate", "--check", "--sample", "2", ok, buggy)
    assert done.returncode == 1 and "EC401" in done.stdout
