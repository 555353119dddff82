"""DFlash training shards (issue 38): ``infer`` detects SpecForge's DFlash files and names
their slots from the draft config's taps, and ``check`` then passes the good set and fails a
one-tap shift (in the shards, and in the draft config) and a guessed tap list.

The shards are written in SpecForge 0.2.0's DFlash offline layout: where the ``specforge``
package imports (``pip install --no-deps specforge==0.2.0``, CPU), by its own registry's
capture layout (``algorithms/dflash/providers.py``: ``OfflineCaptureLayout.materialize``)
and read back by its own normalizer (``dflash_family_data.normalize_offline_sample``), saved
with ``torch.save`` as its ``scripts/prepare_hidden_states.py`` does; otherwise by this
project's writer of the same layout (``shards/formats/specforge_dflash.py``), named so.
Each tap's states have a norm that grows with its layer, so a set captured one layer deeper
is told apart by its norms (EC401).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trainer_exports import missing

pytestmark = pytest.mark.slow

L, H, VOCAB = 8, 16, 512
TAPS = [1, 3, 5]  # tap t = the output of layer t = residual:t+1
DRAFT = {
    "architectures": ["DFlashDraftModel"],
    "block_size": 8,
    "dflash_config": {"mask_token_id": 500, "target_layer_ids": TAPS},
    "hidden_size": H,
    "model_type": "qwen3",
    "num_hidden_layers": 3,
    "num_target_layers": L,
    "vocab_size": VOCAB,
}


def specforge_layout():
    """SpecForge's own DFlash offline capture layout and normalizer, or None."""
    try:
        from specforge.algorithms.common.dflash_family_data import normalize_offline_sample
        from specforge.algorithms.dflash.providers import algorithm_providers
    except Exception as exc:  # any import failure: SpecForge is not usable here
        missing("specforge", exc)  # a failure under .ci/run
        return None
    [offline] = algorithm_providers().offline
    return offline.capture_layout, normalize_offline_sample


def write_set(root: Path, layers: list[int], seed: int = 0, n: int = 6) -> str:
    """n shards whose taps hold states of the residual streams ``layers`` (norm ~ 4 * k);
    returns which writer wrote them."""
    import torch

    from pytest_eagle_contract.shards.writing import save, shard_dict, shard_name

    g = torch.Generator().manual_seed(seed)
    own = specforge_layout()
    for i in range(n):
        T = 40 + 4 * i
        ids = torch.randint(0, VOCAB, (T,), generator=g)
        mask = torch.ones(T, dtype=torch.long)
        states = []
        for k in layers:
            x = torch.randn(T, H, generator=g)
            states.append((x / x.norm(dim=-1, keepdim=True) * 4.0 * k).bfloat16())
        path = root / shard_name("specforge-dflash", i)
        if own is None:
            save(path, shard_dict("specforge-dflash", ids, mask, states))
            continue
        layout, normalize = own
        record = layout.materialize(
            {
                "input_ids": ids,
                "loss_mask": mask,
                "aux_hidden_states": torch.cat(states, dim=-1).unsqueeze(0),
            }
        )
        normalize(record, max_len=4096)  # SpecForge's trainer reads it back
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(record, path)
    return "specforge" if own is not None else "this project's writer"


def draft_dir(tmp_path: Path, data: dict) -> Path:
    d = tmp_path / "draft"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(data, indent=2))
    return d


def infer(cli, tmp_path: Path, shards: Path, draft: Path, arch: str = "LlamaForCausalLM") -> dict:
    """``infer SHARDS --draft DIR`` for the tiny target; the contract it wrote."""
    import yaml

    out = tmp_path / "c.yaml"
    res = cli(
        "infer", shards, "--num-layers", L, "--vocab-size", VOCAB, "--arch", arch,
        "--draft", draft, "-o", out,
    )  # fmt: skip
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    return yaml.safe_load(out.read_text())


def check(cli, contract: Path, *shards: Path):
    res = cli("check", contract, *shards, "--json")
    assert "Traceback" not in res.stderr, res.stderr
    findings = json.loads(res.stdout)["findings"]
    return res, sorted({(f["code"], f["severity"]) for f in findings})


def test_infer_detects_dflash_shards_and_names_taps(cli, tmp_path):
    good = tmp_path / "good"
    writer = write_set(good, [t + 1 for t in TAPS])
    data = infer(cli, tmp_path, good, draft_dir(tmp_path, DRAFT))
    assert data["method"] == "dflash", writer
    assert data["training"]["format"] == "specforge-dflash"
    assert [s["layer"] for s in data["training"]["slots"]] == [f"residual:{t + 1}" for t in TAPS]
    assert data["training"]["target_slot"] is None
    assert data["training"]["fc_input"] == [0, 1, 2]
    assert data["serving"]["engine"] == "sglang"


def test_infer_then_check_passes_good_and_fails_shifts_and_guesses(cli, tmp_path):
    good, shifted = tmp_path / "good", tmp_path / "shifted"
    write_set(good, [t + 1 for t in TAPS])
    write_set(shifted, [t + 2 for t in TAPS], seed=1)  # captured one layer deeper
    draft = draft_dir(tmp_path, DRAFT)
    infer(cli, tmp_path, good, draft)
    contract = tmp_path / "c.yaml"

    res, found = check(cli, contract)
    assert res.returncode == 0 and found == [], res.stdout

    res, found = check(cli, contract, shifted)  # the shards one tap off
    assert res.returncode == 1 and ("EC401", "error") in found, found

    draft_dir(
        tmp_path,
        {
            **DRAFT,
            "dflash_config": {"mask_token_id": 500, "target_layer_ids": [t + 1 for t in TAPS]},
        },
    )
    res, found = check(cli, contract)  # the draft config one tap off
    assert res.returncode == 1 and ("EC501", "error") in found, found

    guessed = {k: v for k, v in DRAFT.items() if k != "dflash_config"} | {"mask_token_id": 500}
    draft_dir(tmp_path, guessed)  # no tap list: SGLang spreads 3 taps over 1..L-3 = [1, 3, 5]
    res, found = check(cli, contract)
    assert res.returncode == 0 and ("EC522", "error") not in found, found
    draft_dir(tmp_path, guessed | {"num_hidden_layers": 4})  # 4 guessed taps: not the 3 trained
    res, found = check(cli, contract)
    assert res.returncode == 1 and ("EC522", "error") in found, found


def test_specforge_dflash_shards_without_a_draft(cli, tmp_path):
    """Without --draft the layers cannot be named (SpecForge has no default DFlash taps):
    a usage error that says so; with --layers the contract is DFlash's."""
    import yaml

    good = tmp_path / "good"
    write_set(good, [t + 1 for t in TAPS], n=3)
    res = cli("infer", good, "--num-layers", L, "--hidden-size", H, "-o", tmp_path / "x.yaml")
    assert res.returncode == 2 and "no default layers" in res.stderr
    res = cli(
        "infer", good, "--layers", "residual:2", "residual:4", "residual:6",
        "--hidden-size", H, "-o", tmp_path / "c.yaml",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    data = yaml.safe_load((tmp_path / "c.yaml").read_text())
    assert data["method"] == "dflash" and "serving" not in data


def test_dflash_format_under_another_method_is_refused(cli, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "contract: x\nversion: 1\n"
        f"target: {{num_hidden_layers: {L}, hidden_size: {H}}}\n"
        "training:\n  format: specforge-dflash\n  target_slot: null\n"
        "  slots:\n    - {layer: residual:2}\n    - {layer: residual:4}\n"
    )
    res = cli("check", path)
    assert res.returncode == 2
    assert "specforge-dflash files are dflash's: the contract needs method: dflash" in res.stderr
