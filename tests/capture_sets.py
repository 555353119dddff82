"""The shard sets the capture tests check against: the demo's (good, embed in front) and the
good set's ids written again with every slot one layer deeper than the server feeds."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import torch
from conftest import run_cli

from pytest_eagle_contract.layers import Layer
from pytest_eagle_contract.models.reference import capture_canonical
from pytest_eagle_contract.models.tiny import tiny_target
from pytest_eagle_contract.shards.discovery import discover
from pytest_eagle_contract.shards.reading import Sample, read_sample
from pytest_eagle_contract.shards.writing import write_shard
from pytest_eagle_contract.shells.demo import SPEC, shipped_contract, write_demo_shards

SHIFTED = [Layer(3), Layer(5), Layer(6), Layer(-1)]  # one layer deeper than the server feeds


@dataclass(frozen=True)
class DemoSets:
    good: Path
    embed_front: Path
    shifted: Path
    model: torch.nn.Module  # the demo's tiny target
    samples: list[Sample]  # the good set's, in order


def write_demo_sets(root: Path) -> DemoSets:
    """Three shards each: the demo's good and embed-in-front sets under ``root``, and
    ``root/shifted``, the good set's ids and masks with the target's ``SHIFTED`` states."""
    good, embed_front = write_demo_shards(root, shards=3)
    model = tiny_target(SPEC)
    shifted = root / "shifted"
    samples = []
    for i, path in enumerate(discover(good)):
        sample = read_sample(path, "specforge")
        assert sample.input_ids is not None and sample.loss_mask is not None
        states = capture_canonical(model, sample.input_ids)
        slots = [states[x].to(torch.bfloat16) for x in SHIFTED]
        write_shard(shifted, "specforge", i, sample.input_ids, sample.loss_mask, slots)
        samples.append(sample)
    return DemoSets(good, embed_front, shifted, model, samples)


def check_captures(shards: Path, captures: Path) -> subprocess.CompletedProcess[str]:
    """``eagle-contract check`` of every shard under ``shards``, the capture family only,
    against the shipped contract and the capture files under ``captures``; ``-v``: every
    finding in full, as the tests read each one (the default prints one entry per code)."""
    args = ("--captures", captures, "--checks", "capture", "--sample", "all", "-v")
    return run_cli("check", shipped_contract(), shards, *args)
