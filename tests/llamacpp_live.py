"""A real llama.cpp for tests/live/test_llamacpp_live.py (``tox -e llamacpp-live``): its binaries,
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
    """Why the live tests cannot run here, or None. They run where asked for only
    (``tox -e llamacpp-live`` sets EAGLE_CONTRACT_NEED_LLAMACPP=1): a build left in the cache
    by an earlier session must not change what the default suite runs."""
    if os.environ.get("EAGLE_CONTRACT_NEED_LLAMACPP") != "1":
        return (
            "real llama.cpp: not asked for (tox -e llamacpp-live, or "
            "EAGLE_CONTRACT_NEED_LLAMACPP=1 after `" + BUILD + "` and pip install sentencepiece)"
        )
    import importlib.util

    if importlib.util.find_spec("sentencepiece") is None:
        return "the vendored converter imports sentencepiece: pip install sentencepiece"
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

SPEC_FLAGS = [  # greedy chain drafting of STEPS tokens, every draft token kept
    "--spec-type",
    "draft-eagle3",
    "--spec-draft-n-max",
    str(STEPS),
    "--spec-draft-n-min",
    "0",
    "--spec-draft-p-min",
    "0",
]


def trace(target: Path, draft: Path, prompt: str, out: Path) -> None:
    """One short greedy run of the instrumented llama-speculative-simple on ``prompt``,
    appending what the draft's fc is fed to ``out`` (read with :func:`read_trace`)."""
    cmd = [str(traced_binary()), "-m", str(target), "-md", str(draft), *SPEC_FLAGS]
    cmd += ["--temp", "0", "-n", "2", "-c", "512", "-t", "1", "-p", prompt]
    env = {**os.environ, "EAGLE_CONTRACT_EAGLE3_TRACE": str(out)}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, " ".join(cmd) + "\n" + (res.stdout + res.stderr)[-4000:]


ROUND = re.compile(r"accepted +(\d+)/ *(\d+) draft tokens")
SUMMARY = re.compile(r"draft acceptance = [0-9.]+ \( *(\d+) accepted / *(\d+) generated\)")


@dataclass(frozen=True)
class Completion:
    """One request to llama-server: the tokens it generated, each speculative round's
    (accepted, drafted) from its log, and its own counters (``timings``)."""

    tokens: list[int]
    rounds: list[tuple[int, int]]
    draft_n: int
    draft_n_accepted: int


class Server:
    """llama-server with the EAGLE-3 draft, one slot, on 127.0.0.1, ``LLAMA_TRACE=1`` so that
    it logs one ``accepted a/k draft tokens`` line per round (tools/server/server-context.cpp);
    its log read by a thread while it runs (llama.cpp's logger drains from a thread of its
    own, and a process that exits loses what it holds: common/log.cpp)."""

    def __init__(self, target: Path, draft: Path) -> None:
        self.cmd = [str(binary("llama-server")), "-m", str(target), "-md", str(draft)]
        self.cmd += [*SPEC_FLAGS, "-c", "512", "-np", "1", "-t", "1", "--host", "127.0.0.1"]
        self.cmd.append("--metrics")  # the exact rounds, for eagle-contract measure
        self.lines: list[str] = []
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Server:
        import socket
        import threading
        import time
        import urllib.request

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "LLAMA_TRACE": "1"}
        self.proc = subprocess.Popen(
            [*self.cmd, "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        stream = self.proc.stderr
        assert stream is not None
        threading.Thread(target=lambda: self.lines.extend(stream), daemon=True).start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "llama-server exited:\n" + "".join(self.lines)[-3000:]
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        log = "".join(self.lines)[-3000:]
        raise AssertionError(f"llama-server did not come up in 120 s:\n{log}")

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def complete(self, prompt: list[int], new: int = NEW) -> Completion:
        """Greedy completion of the token ids ``prompt`` (no prompt cache: each request
        prefills its whole prompt); the rounds are the log's lines between this request's
        start and its own acceptance summary."""
        import time
        import urllib.request

        seen = len(self.lines)
        body = {
            "prompt": prompt,
            "n_predict": new,
            "temperature": 0.0,
            "top_k": 1,
            "cache_prompt": False,
            "return_tokens": True,
            "seed": 0,
        }
        request = urllib.request.Request(
            self.url + "/completion",
            json.dumps(body).encode(),
            {"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as r:
            answer = json.loads(r.read())
        deadline = time.monotonic() + 30
        while not any(SUMMARY.search(x) for x in self.lines[seen:]):
            assert time.monotonic() < deadline, "no acceptance summary:\n" + "".join(
                self.lines[seen:]
            )
            time.sleep(0.05)
        log = self.lines[seen:]
        end = next(i for i, x in enumerate(log) if SUMMARY.search(x))
        rounds = [(int(m[1]), int(m[2])) for x in log[:end] if (m := ROUND.search(x))]
        timings = answer["timings"]
        return Completion(
            [int(t) for t in answer["tokens"]],
            rounds,
            int(timings["draft_n"]),
            int(timings["draft_n_accepted"]),
        )


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
