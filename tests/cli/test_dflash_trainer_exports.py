"""DFlash drafts exported by the trainers' own exporters (issue 38), on CPU, randomly
initialised: nvidia-modelopt 0.47.0's ``mtsp.convert(model, [("dflash", cfg)])`` and
``export_speculative_decoding`` (``DFlashExporter``, z-lab's layout), and speculators 0.9.0's
``DFlashConverter`` run on that export (its speculators-format config: vLLM ids under
``aux_hidden_state_layer_ids``). ``tests/trainer_exports.py`` runs them in a subprocess.

- ModelOpt's draft beside SpecForge-layout shards (SpecForge's own writer where it imports,
  as in ``test_dflash_shards``): ``infer --draft`` names the slots from the exported taps,
  ``check`` passes the good set, fails a set captured one layer deeper (EC401) and a draft
  exported one tap deeper by the same exporter (EC501); likewise ModelOpt's DSpark export
  (``DSparkExporter``) beside SpecForge's DSpark layout.
- ModelOpt's own tap formula (``build_target_layer_ids``, ``modeling_dflash.py``) on a
  shallow target gives ``[1, 1, 1, 1]``: its exporter writes that list, its own explicit-list
  check refuses the same list, and ``doctor`` fails it (EC528; SGLang: EC510).
- speculators' conversion of the export beside speculators-layout shards (hs-connectors' FP8
  writer, as ``test_numerics`` runs it): ``infer --draft`` writes ``method: dflash`` and
  names the slots from ``aux_hidden_state_layer_ids`` then the last layer; ``check`` passes,
  and fails the conversion of the one-tap-deeper export (EC501).

Each trainer needs its package (``pip install -e '.[exporters]'`` then ``pip install
--no-deps`` the pins in tests/trainer_exports.py, as .ci/run does); absent, its tests skip,
or fail where ``EAGLE_CONTRACT_NEED_EXPORTERS=1`` (.ci/run).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock
from test_dflash_shards import VOCAB, L, check, infer, write_set
from test_numerics import write_fp8  # noqa: F401  (hs-connectors' own FP8 writer, a fixture)
from trainer_exports import installed, need

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parents[1]
H = 16  # trainer_exports.H: the tiny target's width


@pytest.fixture(scope="session")
def exports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """Every export, made once for every worker of the session (about 20 s: the imports):
    (their folder, each job's result by name)."""
    need("modelopt")
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, shared by its workers
    root = base / "trainer-exports"
    with FileLock(str(root) + ".lock"):
        if (root / "results.json").is_file():
            return root, json.loads((root / "results.json").read_text())
        shutil.rmtree(root, ignore_errors=True)  # a run that failed part way
        root.mkdir()
        results = _export(root)
        (root / "results.json").write_text(json.dumps(results))
        return root, results


def _export(root: Path) -> dict[str, Any]:

    def modelopt(
        name: str, layers: int, draft_layers: int, taps: list[int] | None, rank: int = 0
    ) -> dict:
        return {
            "kind": "modelopt-dflash", "target": str(root / f"{name}-target"),
            "out": str(root / name), "num_layers": layers, "draft_layers": draft_layers,
            "taps": taps, "markov_rank": rank,
        }  # fmt: skip

    jobs = {
        "mo8": modelopt("mo8", L, 3, None),  # ModelOpt's formula: [1, 3, 5]
        "mo8-deeper": modelopt("mo8-deeper", L, 3, [2, 4, 6]),
        "mo4": modelopt("mo4", 4, 4, None),  # a shallow target: [1, 1, 1, 1]
        "mo4-explicit": modelopt("mo4-explicit", 4, 4, [1, 1, 1, 1]),
        "mo5": modelopt("mo5", 5, 3, None),
        "mo8-dspark": modelopt("mo8-dspark", L, 3, None, rank=4),  # ModelOpt's DSpark head
        "mo8-dspark-deeper": modelopt("mo8-dspark-deeper", L, 3, [2, 4, 6], rank=4),
    }
    if installed("speculators"):
        for name in ("mo8", "mo8-deeper"):
            jobs["sp" + name[2:]] = {
                "kind": "speculators-dflash", "source": str(root / name),
                "target": str(root / f"{name}-target"), "out": str(root / ("sp" + name[2:])),
            }  # fmt: skip
    (root / "jobs.json").write_text(json.dumps(list(jobs.values())))
    res = subprocess.run(
        [sys.executable, str(TESTS / "trainer_exports.py"), str(root / "jobs.json")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    results = json.loads(res.stdout.strip().splitlines()[-1])
    return dict(zip(jobs, results, strict=True))


def place(export: Path, draft: Path) -> Path:
    """The export copied to ``draft`` (the folder the contract names), replacing it."""
    shutil.rmtree(draft, ignore_errors=True)
    shutil.copytree(export, draft)
    return draft


def test_modelopts_formula_repeats_taps_on_a_shallow_target(cli, exports):
    root, results = exports
    assert results["mo8"] == {"taps": [1, 3, 5]}
    assert results["mo5"] == {"taps": [1, 2, 2]}  # round(1.5) == 2: a repeat from 5 layers
    assert results["mo4"] == {"taps": [1, 1, 1, 1]}
    written = json.loads((root / "mo4" / "config.json").read_text())
    assert written["dflash_config"]["target_layer_ids"] == [1, 1, 1, 1]
    # the same list given explicitly is refused by ModelOpt's own check
    assert "duplicates" in results["mo4-explicit"]["refused"]

    res = cli(
        "doctor", "--draft", root / "mo4", "--target-model", root / "mo4-target",
        "--engine", "sglang", "--json",
    )  # fmt: skip
    assert "Traceback" not in res.stderr, res.stderr
    out = json.loads(res.stdout)
    codes = {f["code"] for seam in out["seams"] for f in seam["findings"]}
    assert out["verdict"] == "fail" and {"EC528", "EC510"} <= codes, res.stdout


def test_a_modelopt_draft_passes_its_good_shards_and_fails_shifts(cli, tmp_path, exports):
    root, _ = exports
    good, shifted = tmp_path / "good", tmp_path / "shifted"
    writer = write_set(good, [2, 4, 6])  # ModelOpt's taps [1, 3, 5]: residual:t+1
    write_set(shifted, [3, 5, 7], seed=1)  # captured one layer deeper
    draft = place(root / "mo8", tmp_path / "draft")
    data = infer(cli, tmp_path, good, draft, arch="Qwen3ForCausalLM")
    assert data["method"] == "dflash", writer
    layers = [s["layer"] for s in data["training"]["slots"]]
    assert layers == ["residual:2", "residual:4", "residual:6"]
    contract = tmp_path / "c.yaml"

    res, found = check(cli, contract)
    assert res.returncode == 0 and found == [], res.stdout

    res, found = check(cli, contract, shifted)
    assert res.returncode == 1 and ("EC401", "error") in found, found

    place(root / "mo8-deeper", draft)  # the same exporter, told one tap deeper: [2, 4, 6]
    res, found = check(cli, contract)
    assert res.returncode == 1 and ("EC501", "error") in found, found


def test_a_modelopt_dspark_draft_passes_its_good_shards_and_fails_shifts(cli, tmp_path, exports):
    """ModelOpt's DSparkExporter (the DFlash mode with ``projector_type: dspark``) beside
    SpecForge's DSpark layout (``test_dspark_shards``): the taps, then the post-norm target."""
    from test_dspark_shards import write_set as write_dspark

    root, results = exports
    assert results["mo8-dspark"] == {"taps": [1, 3, 5]}
    good, shifted = tmp_path / "good", tmp_path / "shifted"
    writer = write_dspark(good, [2, 4, 6])
    write_dspark(shifted, [3, 5, 7], seed=1)
    draft = place(root / "mo8-dspark", tmp_path / "draft")
    data = infer(cli, tmp_path, good, draft, arch="Qwen3ForCausalLM")
    assert data["method"] == "dspark" and data["training"]["format"] == "specforge-dspark", writer
    layers = [s["layer"] for s in data["training"]["slots"]]
    assert layers == ["residual:2", "residual:4", "residual:6", "final_norm"]
    contract = tmp_path / "c.yaml"

    res, found = check(cli, contract)
    assert res.returncode == 0 and found == [], res.stdout

    res, found = check(cli, contract, shifted)
    assert res.returncode == 1 and ("EC401", "error") in found, found

    place(root / "mo8-dspark-deeper", draft)
    res, found = check(cli, contract)
    assert res.returncode == 1 and ("EC501", "error") in found, found


def speculators_shards(root: Path, write: Any, layers: list[int], seed: int = 0) -> Path:
    """speculators' layout (``hidden_states/hs_{i}.safetensors`` + its Arrow rows): the aux
    layers then the last, each state's norm 4 * k, written by hs-connectors' FP8 writer."""
    import torch

    from pytest_eagle_contract.shards.writing import write_speculators_dataset

    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(6):
        T = 40 + 4 * i
        ids = torch.randint(0, VOCAB, (T,), generator=g)
        slots = []
        for k in [*layers, L]:
            x = torch.randn(T, H, generator=g)
            slots.append(x / x.norm(dim=-1, keepdim=True) * 4.0 * k)
        write(root / "hidden_states" / f"hs_{i}.safetensors", torch.stack(slots, 1), ids)
        rows.append((ids, torch.ones(T, dtype=torch.long)))
    write_speculators_dataset(root, rows)
    return root


def test_a_speculators_conversion_names_its_slots_and_method(
    cli,
    tmp_path,
    exports,
    write_fp8,  # noqa: F811
):
    need("speculators")
    root, results = exports
    assert results["sp8"] == {"aux_hidden_state_layer_ids": [2, 4, 6]}  # t + 1
    assert results["sp8-deeper"] == {"aux_hidden_state_layer_ids": [3, 5, 7]}
    good = speculators_shards(tmp_path / "good", write_fp8, [2, 4, 6])
    draft = place(root / "sp8", tmp_path / "draft")
    out = tmp_path / "c.yaml"
    res = cli(
        "infer", good, "--num-layers", L, "--vocab-size", VOCAB, "--arch", "Qwen3ForCausalLM",
        "--draft", draft, "-o", out,
    )  # fmt: skip
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    import yaml

    data = yaml.safe_load(out.read_text())
    assert data["method"] == "dflash" and data["serving"]["engine"] == "vllm"
    assert data["training"]["format"] == "speculators"
    layers = [s["layer"] for s in data["training"]["slots"]]
    assert layers == ["residual:2", "residual:4", "residual:6", f"residual:{L}"]

    res, found = check(cli, out)
    assert res.returncode == 0 and found == [], res.stdout

    place(root / "sp8-deeper", draft)  # speculators' conversion of the one-tap-deeper export
    res, found = check(cli, out)
    assert res.returncode == 1 and ("EC501", "error") in found, found
