"""Issue 22: hostile draft folders (``serving.draft_config``) meet every family that reads
them -- ``draft``, ``probe``, and the ``probe`` command -- and each ends in a usage error
naming the draft or a finding, never a traceback or a hang. One input of each class the
matrix sweep (benchmarks/hostile_matrix.py, whose inputs these are) found broken: a FIFO
for config.json or the weights (they blocked), a config the decoder cannot run with (zero
heads, heads or head sizes that do not divide the projections, an eps that is a word, RoPE
scaling that is not an object), tensors that do not fit each other or the target (fc as
wide as no layout, no aux ids, integer fc, an lm_head of no rows, a d2t too short), weight
files that are not safetensors, and a draft_vocab_size that is a word.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import hostile_matrix as matrix  # noqa: E402

CLASSES = [
    "config-fifo",
    "weights-fifo",
    "heads-zero",
    "heads-3",
    "kv-heads-3",
    "head-dim-7",
    "eps-string",
    "rope-scaling-garbage",
    "aux-ids-2000",
    "aux-ids-empty",
    "fc-wrong-width",
    "fc-int64",
    "lm-head-0-rows",
    "d2t-short",
    "weights-truncated",
    "weights-garbage",
    "weights-a-folder",
    "draft-vocab-string",
]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> matrix.World:
    return matrix.build_world(tmp_path_factory.mktemp("world"), http=False)


@pytest.fixture(scope="module")
def makers() -> dict[str, matrix.Make]:
    return dict(matrix.draft_inputs())


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_eagle_contract", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,  # a FIFO opened would block far longer
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


def test_the_classes_are_the_sweeps_own_inputs(makers):
    assert set(CLASSES) <= set(makers), set(CLASSES) - set(makers)


# the probe command reads a draft as the probe family does (EagleDraft.load, then the
# target's fit): one class of each kind runs it too, to keep the suite's time down
COMMAND_TOO = {"config-fifo", "weights-fifo", "heads-zero", "aux-ids-empty", "d2t-short"}


def _paths(world: matrix.World, name: str) -> list[list[str]]:
    checks = [
        ["check", "c-probe.yaml", "--sample", "all", "--checks", c] for c in ("probe", "draft")
    ]
    return checks + ([matrix._probe_cmd("draft", str(world.model))] if name in COMMAND_TOO else [])


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in CLASSES if "fifo" in n])
def test_a_draft_file_that_would_block_is_refused_unopened(world, makers, tmp_path, name):
    """In a child process with a timeout: an opened FIFO would hang the test."""
    folder = tmp_path / "case"
    folder.mkdir()
    makers[name](folder, world)
    for argv in _paths(world, name):
        res = _run(argv, folder)
        out = res.stdout + res.stderr
        assert "Traceback" not in out, (argv, out[-3000:])
        said = " ".join(out.split())  # the terminal view wraps its prose at 120 columns
        assert res.returncode in (0, 2) and "not a regular file" in said, (argv, out)
        if res.returncode == 0:  # the draft family alone: it says it could not run
            assert "EC009" in res.stdout and "passed, incomplete" in res.stdout, res.stdout


@pytest.mark.parametrize("name", [n for n in CLASSES if "fifo" not in n])
def test_a_hostile_draft_is_named_on_every_path_that_reads_it(
    world, makers, tmp_path, monkeypatch, capsys, name
):
    """The CLI's own main() (the eagle-contract script's), in this process: a traceback
    would be an exception here."""
    from pytest_eagle_contract.shells.cli import main

    folder = tmp_path / "case"
    folder.mkdir()
    makers[name](folder, world)
    monkeypatch.chdir(folder)
    for argv in _paths(world, name):
        code = main(argv)
        err = capsys.readouterr().err
        assert code in (0, 1, 2), (argv, code)
        if code == 2:
            assert "draft" in err, (argv, err)
