"""A real llama.cpp for tests/test_llamacpp_live.py (``tox -e llamacpp-live``): its binaries,
the models it serves, and its runs.

The binaries come from ``scripts/build_llamacpp.py`` (the llama.cpp that the
llama-cpp-python 0.3.36 sdist vendors, cached per version). The models are made here, in
code and deterministically:

- the target: the demo probe's tiny Llama (``shells.demo.PROBE_SPEC``: 8 layers, H=64), trained
  on the structured corpus of ``models.trained``, with two tokens its corpus never holds added
  after its 64 (``<unk>`` 64 and ``</s>`` 65; zero rows in the embedding and the lm_head), so
  that llama.cpp's end-of-sequence id is one the target's greedy decoding does not produce
  (llama.cpp's SPM vocabulary otherwise takes id 2 for it, a corpus token) and its
  generation runs to ``-n``; saved with a character tokenizer (corpus id k is the k-th of
  ``CHARS``), so that a text prompt tokenizes to the corpus ids;
- the draft: a real EAGLE-3 draft distilled from that target (``models.trained.distill_draft``)
  on the layout llama.cpp feeds for ids [2, 4, 5] (residual:2, residual:4, residual:5: llama.cpp
  feeds the input of layer k for id k), its lm_head padded as the target's;
- GGUF files of both, by the vendored converter (f32), the draft once per aux-id list: the
  converter bakes the draft config's top-level ``eagle_aux_hidden_state_layer_ids`` as given.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERSION = "0.3.36"  # the llama-cpp-python sdist whose vendored llama.cpp is built
ROOT = Path(__file__).resolve().parent.parent
BUILD = "python scripts/build_llamacpp.py --instrumented"
CHARS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+/"  # one per corpus id
UNK, EOS = 64, 65  # the two tokens the corpus never holds
VOCAB = 66
TRAINED_IDS = [2, 4, 5]  # the draft is trained on what llama.cpp feeds for these
STEPS = 4  # draft length: --spec-draft-n-max 4, probe --steps 4
PROMPT, NEW = 16, 48  # prompt tokens, tokens generated (the probe's --length is their sum)


def cache() -> Path:
    env = os.environ.get("EAGLE_CONTRACT_LLAMACPP_CACHE")
    base = Path(env) if env else Path.home() / ".cache" / "eagle-contract" / "llamacpp"
    return base.expanduser() / VERSION


def binary(name: str) -> Path:
    return cache() / "bin" / name


def traced_binary() -> Path:
    """llama-speculative-simple linked with scripts/llamacpp-eagle3-trace.patch."""
    return cache() / "instrumented" / "bin" / "llama-speculative-simple"


def missing() -> str | None:
    """Why the live tests cannot run here, or None."""
    need = [binary("llama-speculative-simple"), binary("llama-server"), traced_binary()]
    need.append(cache() / "converter" / "convert_hf_to_gguf.py")
    absent = [str(p) for p in need if not p.exists()]
    if absent:
        return (
            f"llama.cpp not built ({absent[0]} missing): run `{BUILD}` (about 14 minutes on "
            "2 idle cores, cached per version) or `tox -e llamacpp-live`"
        )
    return None


# --- the models -------------------------------------------------------------------------


def text(ids: list[int]) -> str:
    return "".join(CHARS[i] for i in ids)


def ids_of(s: str) -> list[int]:
    return [CHARS.index(c) for c in s]


def _pad_rows(weight: Any, rows: int) -> Any:
    import torch

    extra = torch.zeros(rows - weight.shape[0], *weight.shape[1:], dtype=weight.dtype)
    return torch.cat([weight.detach(), extra])


def write_tokenizer(folder: Path) -> None:
    """A byte-fallback BPE over ``CHARS`` (no merges) with ``<unk>`` and ``</s>``, as the
    converter's Llama-HF vocabulary reads it (``gguf.LlamaHfVocab``): no BOS added, no space
    prefix, so a prompt's text is its ids, one character each."""
    from tokenizers import Tokenizer, decoders, models

    vocab = {c: i for i, c in enumerate(CHARS)} | {"<unk>": UNK, "</s>": EOS}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    tok.add_special_tokens(["<unk>", "</s>"])
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "<unk>",
        "eos_token": "</s>",
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "model_max_length": 4096,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1))


def make_target(folder: Path) -> Any:
    """The padded trained target, saved to ``folder`` with its tokenizer; returned in eval
    mode (66 tokens)."""
    import torch

    from pytest_eagle_contract.models.trained import trained_target
    from pytest_eagle_contract.shells.demo import PROBE_SPEC

    assert PROBE_SPEC.vocab_size == len(CHARS)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is faster, and deterministic
    try:
        model = trained_target(PROBE_SPEC)
    finally:
        torch.set_num_threads(threads)
    emb = model.get_input_embeddings()
    head = model.get_output_embeddings()
    with torch.no_grad():
        new_emb = torch.nn.Embedding(VOCAB, emb.weight.shape[1])
        new_emb.weight.copy_(_pad_rows(emb.weight, VOCAB))
        new_head = torch.nn.Linear(head.weight.shape[1], VOCAB, bias=False)
        new_head.weight.copy_(_pad_rows(head.weight, VOCAB))
    model.set_input_embeddings(new_emb)
    model.set_output_embeddings(new_head)
    model.config.vocab_size = VOCAB
    for config in (model.config, model.generation_config):
        config.eos_token_id = EOS
        config.bos_token_id = None
    model.eval()
    model.save_pretrained(folder, safe_serialization=True)
    write_tokenizer(folder)
    return model


def make_draft(model: Any, folder: Path) -> Path:
    """A draft distilled from the unpadded ``model``'s first 64 tokens' worth on the layout
    llama.cpp feeds for ``TRAINED_IDS``, its lm_head padded to the target's 66 tokens, saved to
    ``folder`` (config: top-level ``eagle_aux_hidden_state_layer_ids`` = ``TRAINED_IDS``)."""
    import torch
    from safetensors.torch import load_file, save_file

    from pytest_eagle_contract.layers import Layer
    from pytest_eagle_contract.models.trained import distill_draft

    core = _unpadded(model)
    layers = tuple(Layer(i) for i in TRAINED_IDS)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is faster, and deterministic
    try:
        distill_draft(core, layers, TRAINED_IDS, folder, chain=STEPS)
    finally:
        torch.set_num_threads(threads)
    weights = load_file(str(folder / "model.safetensors"))
    weights["lm_head.weight"] = _pad_rows(weights["lm_head.weight"], VOCAB).contiguous()
    save_file(weights, str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    config.update(vocab_size=VOCAB, draft_vocab_size=VOCAB, max_position_embeddings=4096)
    config["rope_theta"] = 10000.0
    config["eagle_aux_hidden_state_layer_ids"] = list(TRAINED_IDS)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder


def _unpadded(model: Any) -> Any:
    """A copy of the padded target cut back to its 64 corpus tokens (what the draft trains
    on: prompts of corpus ids only)."""
    import copy

    import torch

    core = copy.deepcopy(model)
    n = len(CHARS)
    with torch.no_grad():
        emb = torch.nn.Embedding(n, core.config.hidden_size)
        emb.weight.copy_(model.get_input_embeddings().weight[:n])
        head = torch.nn.Linear(core.config.hidden_size, n, bias=False)
        head.weight.copy_(model.get_output_embeddings().weight[:n])
    core.set_input_embeddings(emb)
    core.set_output_embeddings(head)
    core.config.vocab_size = n
    return core.eval()


def draft_with_ids(draft: Path, ids: list[int], folder: Path) -> Path:
    """The draft's folder again with another top-level id list (same weights)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(draft / "model.safetensors", folder / "model.safetensors")
    config = json.loads((draft / "config.json").read_text())
    config["eagle_aux_hidden_state_layer_ids"] = list(ids)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder


def convert(src: Path, out: Path, target: Path | None = None) -> Path:
    """``src`` (an HF folder) to an f32 GGUF by the vendored converter (a draft with
    ``--target-model-dir``)."""
    conv = cache() / "converter"
    cmd = [sys.executable, str(conv / "convert_hf_to_gguf.py"), str(src)]
    cmd += ["--outtype", "f32", "--outfile", str(out)]
    if target is not None:
        cmd += ["--target-model-dir", str(target)]
    env = {**os.environ, "PYTHONPATH": str(conv / "gguf-py"), "NO_LOCAL_GGUF": "1"}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0 and out.is_file(), res.stdout + res.stderr
    return out


# --- the engine's runs ------------------------------------------------------------------

ROUND = re.compile(r"accepted (\d+)/(\d+) draft tokens")


@dataclass(frozen=True)
class Run:
    """One llama-speculative-simple run: the text it generated and each round's
    (accepted, drafted)."""

    generated: str
    rounds: list[tuple[int, int]]
    log: str


def speculate(
    target: Path,
    draft: Path,
    prompt: str,
    new: int = NEW,
    exe: Path | None = None,
    env: dict[str, str] | None = None,
) -> Run:
    """Greedy speculative decoding of ``prompt`` by llama.cpp with the EAGLE-3 ``draft``:
    draft length ``STEPS``, every draft token kept (no probability floor), ``-lv 5`` for the
    per-round ``accepted a/k`` lines."""
    cmd = [
        str(exe or binary("llama-speculative-simple")),
        "-m",
        str(target),
        "-md",
        str(draft),
        "--spec-type",
        "draft-eagle3",
        "--spec-draft-n-max",
        str(STEPS),
        "--spec-draft-n-min",
        "0",
        "--spec-draft-p-min",
        "0",
        "--temp",
        "0",
        "--top-k",
        "1",
        "--seed",
        "0",
        "-n",
        str(new),
        "-c",
        "512",
        "-t",
        "1",
        "-lv",
        "5",
        "-p",
        prompt,
    ]
    res = subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}
    )
    log = res.stdout + res.stderr
    assert res.returncode == 0, " ".join(cmd) + "\n" + log[-4000:]
    rounds = [(int(a), int(k)) for a, k in ROUND.findall(log)]
    out = res.stdout
    at = out.find(prompt)
    assert at >= 0, out[-2000:]
    tail = out[at + len(prompt) :]
    generated = "".join(c for c in tail.split("\n")[0] if c in CHARS)
    return Run(generated, rounds, log)


def read_trace(path: Path) -> list[Any]:
    """The records scripts/llamacpp-eagle3-trace.patch appends: per process() call, the
    ``[n_tokens, 3 * H]`` aux states the draft's fc is fed."""
    import numpy as np

    data = path.read_bytes()
    out, at = [], 0
    while at < len(data):
        n, width = np.frombuffer(data, dtype=np.int32, count=2, offset=at)
        at += 8
        rows = np.frombuffer(data, dtype=np.float32, count=int(n) * int(width), offset=at)
        out.append(rows.reshape(int(n), int(width)))
        at += 4 * int(n) * int(width)
    return out
