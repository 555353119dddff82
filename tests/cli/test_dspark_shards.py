"""DSpark training shards (issue 38): ``infer`` detects SpecForge's DSpark files (format
``specforge-dspark``: the taps concatenated under ``hidden_states`` plus the target's
``target_last_hidden_states``), names the taps from the draft config's
``dflash_config.target_layer_ids`` and the target as ``final_norm``; ``check`` then passes the
good set, fails a set captured one layer deeper (EC401) and, with a serving section, a draft
config one tap off (EC501).

The shards are written in SpecForge 0.2.0's DSpark offline layout: where the ``specforge``
package imports (``pip install --no-deps specforge==0.2.0``, CPU), by its own registry's
capture layout (``algorithms/dspark/providers.py``: ``OfflineCaptureLayout.materialize``) and
read back by its own normalizer (``dflash_family_data.normalize_dspark_offline_sample``),
saved with ``torch.save``; otherwise by this project's writer of the same layout
(``shards/formats/specforge_dspark.py``), named so.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_dflash_shards import check, draft_dir
from test_dflash_shards import infer as dflash_infer
from trainer_exports import missing

pytestmark = pytest.mark.slow

L, H, VOCAB = 8, 16, 512
TAPS = [1, 3, 5]  # tap t = the output of layer t = residual:t+1
DRAFT = {
    "architectures": ["DSparkDraftModel"],
    "block_size": 8,
    "dflash_config": {"mask_token_id": 500, "target_layer_ids": TAPS, "markov_rank": 4},
    "dspark_markov_rank": 4,
    "hidden_size": H,
    "model_type": "qwen3",
    "num_hidden_layers": 3,
    "num_target_layers": L,
    "vocab_size": VOCAB,
}


def specforge_layout():
    """SpecForge's own DSpark offline capture layout and normalizer, or None."""
    try:
        from specforge.algorithms.common.dflash_family_data import (
            build_dspark_offline_normalizer,
        )
        from specforge.algorithms.dspark.providers import algorithm_providers
    except Exception as exc:  # any import failure: SpecForge is not usable here
        missing("specforge", exc)  # a failure under .ci/run
        return None
    [offline] = algorithm_providers().offline
    return offline.capture_layout, build_dspark_offline_normalizer(4096)


def write_set(root: Path, layers: list[int], seed: int = 0, n: int = 6) -> str:
    """n shards whose taps hold states of the residual streams ``layers`` (norm ~ 4 * k) and
    a post-norm target (norm ~ sqrt(H)); returns which writer wrote them."""
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
        last = torch.randn(T, H, generator=g)
        last = (last / last.norm(dim=-1, keepdim=True) * H**0.5).bfloat16()
        path = root / shard_name("specforge-dspark", i)
        if own is None:
            save(path, shard_dict("specforge-dspark", ids, mask, [*states, last]))
            continue
        layout, normalize = own
        record = layout.materialize(
            {
                "input_ids": ids,
                "loss_mask": mask,
                "aux_hidden_states": torch.cat(states, dim=-1).unsqueeze(0),
                "last_hidden_states": last.unsqueeze(0),
            }
        )
        normalize(dict(record))  # SpecForge's trainer reads it back
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(record, path)
    return "specforge" if own is not None else "this project's writer"


def infer(cli, tmp_path: Path, shards: Path, draft: Path) -> dict:
    return dflash_infer(cli, tmp_path, shards, draft, arch="Qwen3ForCausalLM")


def test_specforge_writes_the_layout_this_format_reads(tmp_path):
    """Where SpecForge imports, its record has exactly this format's keys."""
    own = specforge_layout()
    if own is None:
        pytest.skip("specforge 0.2.0 not importable here")
    import torch

    from pytest_eagle_contract.shards.formats import FORMATS, detect

    record = own[0].materialize(
        {
            "input_ids": torch.zeros(4, dtype=torch.long),
            "loss_mask": torch.ones(4, dtype=torch.long),
            "aux_hidden_states": torch.zeros(1, 4, 3 * H),
            "last_hidden_states": torch.zeros(1, 4, H),
        }
    )
    assert set(record) == FORMATS["specforge-dspark"].required_keys
    assert detect("rows_0-2000/data_0.ckpt", record.keys()) is FORMATS["specforge-dspark"]


def test_infer_detects_dspark_shards_and_names_taps(cli, tmp_path):
    good = tmp_path / "good"
    writer = write_set(good, [t + 1 for t in TAPS])
    data = infer(cli, tmp_path, good, draft_dir(tmp_path, DRAFT))
    assert data["method"] == "dspark", writer
    assert data["training"]["format"] == "specforge-dspark"
    layers = [s["layer"] for s in data["training"]["slots"]]
    assert layers == [*(f"residual:{t + 1}" for t in TAPS), "final_norm"]
    assert data["training"]["fc_input"] == [0, 1, 2]


def test_infer_then_check_passes_good_and_fails_shifts(cli, tmp_path):
    good, shifted = tmp_path / "good", tmp_path / "shifted"
    write_set(good, [t + 1 for t in TAPS])
    write_set(shifted, [t + 2 for t in TAPS], seed=1)  # captured one layer deeper
    draft = draft_dir(tmp_path, DRAFT)
    data = infer(cli, tmp_path, good, draft)
    contract = tmp_path / "c.yaml"
    # infer drafts the serving section: SpecForge's pipeline serves by SGLang, from the
    # first release whose DSpark rules are read (method_rules.json)
    assert data["serving"]["engine"] == "sglang" and data["serving"]["version"] == ">=0.5.16"
    assert (contract.parent / data["serving"]["draft_config"]).resolve() == draft.resolve()

    res, found = check(cli, contract)  # the layout check resolves the taps in every release
    assert res.returncode == 0 and found == [], res.stdout

    res, found = check(cli, contract, shifted)  # the shards one tap off
    assert res.returncode == 1 and ("EC401", "error") in found, found

    # the draft config one tap off is EC501 by SGLang's DSpark rules
    shifted = {**DRAFT["dflash_config"], "target_layer_ids": [t + 1 for t in TAPS]}
    draft_dir(tmp_path, {**DRAFT, "dflash_config": shifted})
    res, found = check(cli, contract)
    assert res.returncode == 1 and ("EC501", "error") in found, found


def test_dspark_shards_without_a_draft_say_what_to_pass(cli, tmp_path):
    good = tmp_path / "good"
    write_set(good, [t + 1 for t in TAPS])
    res = cli("infer", good, "--num-layers", L, "--vocab-size", VOCAB, "-o", tmp_path / "c.yaml")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "dflash_config.target_layer_ids" in " ".join(res.stderr.split())


def test_infer_fits_dspark_bounds_with_its_self_test(cli, tmp_path):
    """On a real (tiny) target, whose final-norm state and pre-norm last layer have close
    norms, infer's bounds must pass the sharpness self-test: before the fitting contract kept
    ``method: dspark`` it did not load, the fit took the widest bounds and every good check
    failed with EC801 (target-twin). The states are the target's own (models.tiny)."""
    import torch

    from pytest_eagle_contract.layers import Layer
    from pytest_eagle_contract.models.reference import capture_canonical
    from pytest_eagle_contract.models.tiny import TinySpec, tiny_target
    from pytest_eagle_contract.shards.writing import save, shard_dict, shard_name

    model = tiny_target(TinySpec(num_layers=L, hidden_size=64, vocab_size=VOCAB)).eval()

    def write(root: Path, seed: int, n: int) -> None:
        g = torch.Generator().manual_seed(seed)
        for i in range(n):
            ids = torch.randint(0, VOCAB, (60 + 20 * i,), generator=g)
            with torch.no_grad():
                got = capture_canonical(model, ids)
            states = [got[Layer(t + 1)].bfloat16() for t in TAPS] + [got[Layer(-1)].bfloat16()]
            mask = torch.ones(len(ids), dtype=torch.long)
            data = shard_dict("specforge-dspark", ids, mask, states)
            save(root / shard_name("specforge-dspark", i), data)

    trusted, fresh = tmp_path / "trusted", tmp_path / "fresh"
    write(trusted, 0, 8)
    write(fresh, 1, 4)
    draft = draft_dir(tmp_path, {**DRAFT, "hidden_size": 64})
    data = infer(cli, tmp_path, trusted, draft)
    assert data["training"]["format"] == "specforge-dspark"
    res, found = check(cli, tmp_path / "c.yaml", fresh)
    assert res.returncode == 0 and found == [], res.stdout
