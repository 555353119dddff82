"""`pytest --eagle-checks LIST`: the plugin runs the families named, as `check --checks`
does, so an on-request family (`draft`) runs under pytest too, and a family whose inputs
are missing is refused with what to add (the planner's one rule for both shells)."""

from __future__ import annotations

import json
import shutil

import pytest

from pytest_eagle_contract.shells import demo


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """Made before any test's pytester fixture: what pytester's sys.modules snapshot sees
    imported (transformers, torch.distributed) stays imported."""
    root = tmp_path_factory.mktemp("demo")
    demo.write_demo_shards(root, shards=2)
    return root / "good"


def _run(pytester, *args):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", *args)


@pytest.mark.slow
def test_named_families_are_the_items(good, pytester):
    shutil.copytree(good, pytester.path / "good")
    report = pytester.path / "r.json"
    contract = str(demo.shipped_contract())
    result = _run(
        pytester,
        "--eagle-contract",
        contract,
        "--eagle-shards",
        "good",
        "--eagle-checks",
        "structure,values",
        "--eagle-json-report",
        str(report),
    )
    assert result.ret == 0, result.stdout.str()
    (run,) = json.loads(report.read_text())["reports"]
    assert {u["check"] for u in run["units"]} == {"structure", "values"}


@pytest.mark.slow
def test_a_family_without_its_input_or_unknown_is_a_failing_item_saying_why(pytester):
    contract = str(demo.shipped_contract())
    for checks, said in (("evidence", "needs --target-model"), ("nosuch", "unknown checks")):
        result = _run(pytester, "--eagle-contract", contract, "--eagle-checks", checks)
        out = result.stdout.str()
        assert result.ret == 1 and said in out, out
        assert "Traceback" not in out and "INTERNALERROR" not in out
