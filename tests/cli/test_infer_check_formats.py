"""Issue 2's acceptance matrix, driven through the CLI as a user would.

For each format: infer a contract from good shards of a tiny real transformer, then check
other good shards of the same pipeline (exit 0) and one shard per real pipeline bug
(exit 1, each with its expected rule code).
"""

from __future__ import annotations

import json

import pytest
import shardgen
import yaml

from pytest_eagle_contract.reports.json_report import problems

FORMATS = list(shardgen.PIPELINES)


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipelines")
    out = {}
    for fmt in FORMATS:
        base = root / fmt
        shardgen.write_good(base / "trusted", fmt, range(0, 5))
        shardgen.write_good(base / "other", fmt, range(100, 104))
        out[fmt] = (base, shardgen.write_mutants(base / "bad", fmt))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_infer_then_check(fmt, pipelines, cli):
    base, mutants = pipelines[fmt]
    contract = base / "contract.yaml"
    res = cli(
        "infer",
        base / "trusted",
        "--num-layers",
        shardgen.L,
        "--vocab-size",
        shardgen.VOCAB,
        "-o",
        contract,
    )
    assert res.returncode == 0, res.stderr
    data = yaml.safe_load(contract.read_text())
    assert data["training"]["format"] == fmt
    assert [s["layer"] for s in data["training"]["slots"]] == [
        str(x) for x in shardgen.PIPELINES[fmt]
    ]

    good = cli("check", contract, base / "other", "--sample", "all")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "ok: " in good.stdout

    report = base / "report.json"
    bad = cli("check", contract, base / "bad", "--sample", "all", "--json", report)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    data = json.loads(report.read_text())
    assert problems(data) == []
    found: dict[str, set[str]] = {}
    for finding in data["findings"]:
        if not finding["file"] and finding["severity"] == "warning":
            continue  # the contract's own (EC507: vLLM's default ids, for speculators' files)
        found.setdefault(finding["file"].split("/")[0], set()).add(finding["code"])
    for name in mutants:
        expected = shardgen.MUTATIONS[name][2]
        assert expected in found.get(name, set()), (name, found.get(name))
    assert set(found) == set(mutants), "a mutant passed, or a finding landed on the wrong file"


@pytest.mark.slow
def test_other_good_shards_pass_with_default_sample(pipelines, cli):
    base, _ = pipelines["specforge"]
    contract = base / "contract-default.yaml"
    assert cli("infer", base / "trusted", "--num-layers", "8", "-o", contract).returncode == 0
    # the drafted contract points at its shards: check with no PATH uses training.shards
    res = cli("check", contract)
    assert res.returncode == 0, res.stdout
    assert "on 5 shard(s)" in res.stdout


def test_infer_without_layer_names_is_a_usage_error(pipelines, cli):
    base, _ = pipelines["specforge"]
    res = cli("infer", base / "trusted")
    assert res.returncode == 2
    assert "--layers" in res.stderr and "--num-layers" in res.stderr


@pytest.mark.slow
def test_infer_reads_speculators_v1_data_config(pipelines, cli):
    base, _ = pipelines["speculators-v1"]
    res = cli("infer", base / "trusted")  # no --num-layers: layer_ids come from data_config.json
    assert res.returncode == 0, res.stderr
    layers = [s["layer"] for s in yaml.safe_load(res.stdout)["training"]["slots"]]
    assert layers == ["residual:3", "residual:5", "residual:6", "residual:8"]
