"""Tiny DFlash and MTP drafts exported by the trainers' own exporters, for the tests (issue 38).

Run as a script, in its own process (``python tests/trainer_exports.py JOBS.json``): ModelOpt
patches transformers when it imports and takes seconds to load, so the test process never
imports it. Each job in the JSON list is one of:

- ``{"kind": "modelopt-dflash", "target": DIR, "out": DIR, "num_layers": L,
  "draft_layers": n, "taps": [...] or null}``: a randomly initialised tiny Qwen3 target
  (saved to ``target`` by transformers' ``save_pretrained``) converted to DFlash by
  nvidia-modelopt 0.47.0's own ``mtsp.convert(model, [("dflash", cfg)])`` and exported by
  its own ``export_speculative_decoding`` (``DFlashExporter``: z-lab's layout). With
  ``taps`` null the tap list is ModelOpt's own (``build_target_layer_ids``); a tap list
  ModelOpt refuses is reported as ``{"refused": message}``. With ``"markov_rank": r`` the
  draft is ModelOpt's DSpark (``projector_type: dspark``, exported by ``DSparkExporter``).
- ``{"kind": "speculators-dflash", "source": DIR, "target": DIR, "out": DIR}``: a z-lab-layout
  DFlash draft converted by speculators 0.9.0's own ``DFlashConverter`` (``speculators
  convert``'s DFlash path), the verifier's embedding and head read from ``target``.
- ``{"kind": "speculators-mtp", "target": DIR, "out": DIR, "num_layers": L, "hidden": H,
  "vocab": V}``: a tiny Qwen3 target with one seeded native MTP layer (``mtp.*``) converted
  by speculators 0.9.0's own ``MTPConverter``; the result is the converted config.json.

Prints one JSON line: a result per job (the taps ModelOpt trained with, or the refusal).
Everything is CPU and randomly initialised; nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import warnings
from typing import Any

H, VOCAB, MASK = 16, 512, 500

EXPORTERS = {
    "modelopt": ("modelopt.torch.speculative", "nvidia-modelopt==0.47.0"),
    "speculators": ("speculators.convert.dflash.converter", "speculators==0.9.0"),
    "specforge": ("specforge", "specforge==0.2.0"),
}
NEEDED = os.environ.get("EAGLE_CONTRACT_NEED_EXPORTERS") == "1"  # .ci/run: a skip is a failure


def installed(trainer: str) -> bool:
    """Whether the trainer's package is installed (found, not imported: no import cost)."""
    name = EXPORTERS[trainer][0].split(".")[0]
    return importlib.util.find_spec(name) is not None


def need(trainer: str) -> None:
    """Skip the calling test where the trainer is absent; fail instead where .ci/run asks
    for the exporters (``EAGLE_CONTRACT_NEED_EXPORTERS=1``)."""
    import pytest

    if installed(trainer):
        return
    pin = EXPORTERS[trainer][1]
    why = f"{pin} is not installed: pip install -e '.[exporters]' then pip install --no-deps {pin}"
    if NEEDED:
        pytest.fail(f"EAGLE_CONTRACT_NEED_EXPORTERS=1 but {why}", pytrace=False)
    pytest.skip(why)


def missing(trainer: str, error: BaseException | None = None) -> None:
    """Fail where .ci/run asks for the exporters (``EAGLE_CONTRACT_NEED_EXPORTERS=1``) and
    ``trainer`` is absent or does not import; else nothing (the caller skips or falls back)."""
    import pytest

    if NEEDED:
        pin = EXPORTERS[trainer][1]
        why = f"{pin} does not import ({error})" if error else f"{pin} is not installed"
        pytest.fail(f"EAGLE_CONTRACT_NEED_EXPORTERS=1 but {why}", pytrace=False)


def trainer_module(name: str) -> Any:
    """``pytest.importorskip(name)`` for a trainer's module, a failure where .ci/run asks
    for the exporters."""
    import importlib

    import pytest

    try:
        return importlib.import_module(name)
    except Exception as exc:  # any import failure: the trainer is not usable here
        trainer = name.split(".")[0]
        missing(trainer, exc)
        pin = EXPORTERS[trainer][1]
        pytest.skip(
            f"could not import {name!r}: {exc} (pip install -e '.[exporters]' then "
            f"pip install --no-deps {pin})"
        )


def modelopt_dflash(job: dict[str, Any]) -> dict[str, Any]:
    import modelopt.torch.speculative as mtsp
    import torch
    from modelopt.torch.export import export_speculative_decoding
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    small = {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8}
    config = Qwen3Config(
        hidden_size=H,
        intermediate_size=2 * H,
        num_hidden_layers=job["num_layers"],
        vocab_size=VOCAB,
        max_position_embeddings=256,
        **small,
    )
    model = Qwen3ForCausalLM(config)
    model.save_pretrained(job["target"])
    arch: dict[str, Any] = {"num_hidden_layers": job["draft_layers"], **small}
    arch["intermediate_size"] = 2 * H
    if job.get("taps") is not None:
        arch["target_layer_ids"] = job["taps"]
    if job.get("markov_rank"):  # DSpark: the DFlash mode with ModelOpt's DSpark head
        arch |= {"projector_type": "dspark", "markov_rank": job["markov_rank"]}
    cfg = {
        "dflash_block_size": 8,
        "dflash_mask_token_id": MASK,
        "dflash_architecture_config": arch,
    }
    try:
        mtsp.convert(model, [("dflash", cfg)])
    except ValueError as err:  # ModelOpt's own check of an explicit tap list
        return {"refused": str(err)}
    export_speculative_decoding(model, export_dir=job["out"])
    return {"taps": list(model.target_layer_ids)}


def speculators_dflash(job: dict[str, Any]) -> dict[str, Any]:
    from speculators.convert.dflash.converter import DFlashConverter

    DFlashConverter().convert(job["source"], job["out"], base_model=job["target"])
    with open(os.path.join(job["out"], "config.json")) as f:
        return {"aux_hidden_state_layer_ids": json.load(f)["aux_hidden_state_layer_ids"]}


def speculators_mtp(job: dict[str, Any]) -> dict[str, Any]:
    """A tiny Qwen3 target with one native MTP layer (``mtp.*``, the Qwen3-Next / Qwen3.5
    naming speculators 0.9.0's ``MTPConverter`` reads: ``mtp.fc``, ``mtp.norm``,
    ``mtp.pre_fc_norm_hidden``, ``mtp.pre_fc_norm_embedding``, ``mtp.layers.0.*``), its
    weights seeded, then converted by that ``MTPConverter`` (``speculators convert``'s MTP path,
    which also reloads the result: ``MTPDraftModel.from_pretrained``)."""
    import torch
    from safetensors.torch import load_file, save_file
    from speculators.convert.mtp.converter import MTPConverter
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer

    torch.manual_seed(0)
    h = job["hidden"]
    config = Qwen3Config(
        hidden_size=h, intermediate_size=2 * h, num_hidden_layers=job["num_layers"],
        vocab_size=job["vocab"], max_position_embeddings=512, num_attention_heads=2,
        num_key_value_heads=1, head_dim=h // 2, mtp_num_hidden_layers=1,
    )  # fmt: skip
    Qwen3ForCausalLM(config).save_pretrained(job["target"])
    weights_path = os.path.join(job["target"], "model.safetensors")
    weights = load_file(weights_path)
    layer = Qwen3DecoderLayer(config, layer_idx=0).state_dict()
    weights |= {f"mtp.layers.0.{k}": v.contiguous() for k, v in layer.items()}
    weights["mtp.fc.weight"] = torch.randn(h, 2 * h) / (2 * h) ** 0.5
    for norm in ("norm", "pre_fc_norm_hidden", "pre_fc_norm_embedding"):
        weights[f"mtp.{norm}.weight"] = torch.ones(h)
    save_file(weights, weights_path, metadata={"format": "pt"})
    MTPConverter().convert(job["target"], job["out"], base_model=job["target"])
    with open(os.path.join(job["out"], "config.json")) as f:
        return {"config": json.load(f)}


RUNNERS = {
    "modelopt-dflash": modelopt_dflash,
    "speculators-dflash": speculators_dflash,
    "speculators-mtp": speculators_mtp,
}


def main(jobs_path: str) -> None:
    warnings.simplefilter("ignore")
    with open(jobs_path) as f:
        jobs = json.load(f)
    results = [RUNNERS[job["kind"]](job) for job in jobs]
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1])
