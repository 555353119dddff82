"""Issue 7, sharpness: a contract must catch every class of pipeline bug it can see, and
one whose bounds are too loose is reported with the class that slips through and the bound
to tighten."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_eagle_contract.contract.model import NormBounds, load_contract
from pytest_eagle_contract.render import format_findings
from pytest_eagle_contract.sharpness.selftest import (
    check_sharpness,
    format_sharpness_table,
    sharpness,
    sharpness_table,
    witness,
)
from pytest_eagle_contract.sharpness.strategies import KINDS, find_mutation
from pytest_eagle_contract.shells.demo import shipped_contract

DEMO = shipped_contract()
KIMI = Path(__file__).parents[2] / "contracts" / "kimi-k2.5-eagle3.yaml"


def with_slots(contract, **changes):
    """``contract`` with slot i's fields changed: ``with_slots(c, s1={"norm": None})``."""
    slots = list(contract.training.slots)
    for key, fields in changes.items():
        i = int(key[1:])
        slots[i] = replace(slots[i], **fields)
    return replace(contract, training=replace(contract.training, slots=tuple(slots)))


def tightened(contract, rtol):
    """Each slot's bounds replaced by [c / (1 + rtol), c * (1 + rtol)] around their centre."""
    changes = {}
    for slot in contract.training.slots:
        center = math.sqrt(slot.norm.low * slot.norm.high)
        changes[f"s{slot.index}"] = {"norm": NormBounds(center / (1 + rtol), center * (1 + rtol))}
    return with_slots(contract, **changes)


def loose(contract):
    """Slots 1 and 2 both accept the union of their bounds: a swap of the two passes."""
    a, b = contract.training.slots[1].norm, contract.training.slots[2].norm
    union = NormBounds(min(a.low, b.low), max(a.high, b.high))
    return with_slots(contract, s1={"norm": union}, s2={"norm": union})


def test_the_demo_contract_is_sharp():
    contract = load_contract(DEMO)
    report = sharpness(contract)
    assert report.sharp and report.findings == []
    assert [r.kind for r in report.rows] == list(KINDS)
    assert all(r.caught for r in report.rows)
    assert all(r.expected in r.seen or "/" in r.expected for r in report.rows)


def test_kimi_with_rtol_half_lets_a_swap_and_a_post_norm_target_through():
    contract = tightened(load_contract(KIMI), 0.5)  # the bounds it first shipped with
    findings = check_sharpness(contract)
    assert {f.code for f in findings} == {"EC801"}
    swap = next(f for f in findings if f.extra["kind"] == "swap-slots")
    assert "slots 2 and 3" in swap.message
    assert "overlapping norm bounds" in swap.hint and "training.slots[2].norm" in swap.hint
    assert swap.line == contract.line_of("training.slots[2].norm")
    twin = next(f for f in findings if f.extra["kind"] == "target-twin")
    assert "post-norm" in twin.message and "training.slots[3].norm" in twin.hint


def test_kimi_as_shipped_is_sharp():
    assert check_sharpness(load_contract(KIMI)) == []


def test_a_loose_contract_is_not_sharp_and_names_the_swap():
    contract = loose(load_contract(DEMO))
    rows = {r.kind: r for r in sharpness_table(contract)}
    assert rows["swap-slots"].caught is False
    assert rows["swap-slots"].escaped == ("slots 1 and 2",)
    findings = check_sharpness(contract)
    swap = next(f for f in findings if f.extra["kind"] == "swap-slots")
    assert swap.code == "EC801" and swap.severity == "error"
    assert "lets 'swap-slots' through" in swap.message and "slots 1 and 2" in swap.message
    assert str(contract.training.slots[1].norm) in swap.hint
    assert "tighten training.slots[1].norm" in swap.hint
    assert swap.line == contract.line_of("training.slots[1].norm")
    text = format_findings(findings)
    assert "eagle-contract check --sharpness" in text and "find_mutation(contract" in text


def test_the_witness_sits_in_the_overlap():
    demo = load_contract(DEMO)
    low2 = demo.training.slots[2].norm.low
    contract = with_slots(
        demo, s1={"norm": NormBounds(demo.training.slots[1].norm.low, low2 * 1.1)}
    )
    norms = witness(contract, find_mutation(contract, "swap-slots[slots 1 and 2]"))
    # each swapped slot inside its own good range and inside the bounds of the slot it moves to
    assert all(low2 <= norms[i] <= low2 * 1.1 for i in (1, 2)), norms


def test_a_contract_without_bounds_catches_only_structure():
    contract = with_slots(load_contract(DEMO), **{f"s{i}": {"norm": None} for i in range(4)})
    rows = {r.kind: r for r in sharpness_table(contract)}
    norm_kinds = {k for k, (code, _) in KINDS.items() if code == "EC401"}
    assert {k for k, r in rows.items() if r.caught is False} == norm_kinds
    findings = check_sharpness(contract)
    assert all("has no norm bounds" in f.hint for f in findings)


def test_a_waived_code_catches_nothing():
    demo = load_contract(DEMO)
    contract = replace(demo, waivers={"EC202": "masks are cut later"})
    findings = check_sharpness(contract)
    assert [f.extra["kind"] for f in findings] == ["loss-mask-length", "truncate-ids"]
    assert "waives EC202" in findings[0].hint
    both = replace(demo, waivers={"EC202": "masks are cut later", "EC801": "reviewed"})
    assert check_sharpness(both) == []


def test_a_contract_no_shard_can_meet_is_ec802():
    """SpecForge concatenates the aux slots into one tensor: they cannot differ in dtype."""
    contract = with_slots(load_contract(DEMO), s1={"dtype": "float32"})
    findings = check_sharpness(contract)
    assert [f.code for f in findings] == ["EC802"]
    assert "EC201" in findings[0].message


def test_without_serving_unsort_ids_does_not_apply(tmp_path):
    text = DEMO.read_text()
    path = tmp_path / "no-serving.yaml"
    path.write_text(text[: text.index("serving:")])
    rows = {r.kind: r for r in sharpness_table(load_contract(path))}
    assert rows["unsort-ids"].caught is None and rows["unsort-ids"].cases == 0


def test_a_contract_without_training_has_nothing_to_test(tmp_path):
    text = DEMO.read_text()
    path = tmp_path / "serving-only.yaml"
    path.write_text(text[: text.index("training:")] + text[text.index("serving:") :])
    assert sharpness(load_contract(path)).rows == []


def test_the_table_reads_as_class_caught_code():
    text = format_sharpness_table(sharpness_table(tightened(load_contract(KIMI), 0.5)))
    lines = text.splitlines()
    assert lines[0].split() == ["class", "caught", "expected", "codes", "seen", "cases"]
    swap = next(line for line in lines if line.startswith("swap-slots"))
    assert swap.split()[:3] == ["swap-slots", "NO", "EC401"]
    assert "got through: slots 2 and 3" in swap
    drop = next(line for line in lines if line.startswith("drop-slot"))
    assert drop.split()[:3] == ["drop-slot", "yes", "EC204"]


@pytest.mark.slow
@pytest.mark.parametrize("path", [DEMO, KIMI], ids=["demo", "kimi"])
def test_sharpness_is_deterministic(path):
    contract = load_contract(path)
    first, second = sharpness(contract), sharpness(contract)
    assert first.rows == second.rows
    assert [f.to_dict() for f in first.findings] == [f.to_dict() for f in second.findings]


@pytest.mark.slow
def test_cli_sharpness_table_and_exit_codes(tmp_path, cli):
    sharp = cli("check", "--sharpness", DEMO)
    assert sharp.returncode == 0, sharp.stdout
    assert "sharp: 12 of 12 mutation classes caught" in sharp.stdout
    text = KIMI.read_text().replace("rtol: 0.2", "rtol: 0.5")
    (tmp_path / "kimi-loose.yaml").write_text(text)
    loose_run = cli("check", "--sharpness", tmp_path / "kimi-loose.yaml")
    assert loose_run.returncode == 1
    lines = loose_run.stdout.splitlines()
    assert next(x for x in lines if x.startswith("swap-slots")).split()[:2] == ["swap-slots", "NO"]
    assert "EC801 not-sharp" in loose_run.stdout and "NOT SHARP" in loose_run.stdout
