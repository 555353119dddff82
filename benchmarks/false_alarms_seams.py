"""Benchmark: false alarms and misses of the new seams' thresholds (issue 24 follow-up).

Stop 32 gave three seams thresholds that no run had measured. For each, this makes good
cases (fresh seeds of a good pipeline: every finding is a false alarm) and bad cases (a
real fault of the kind the threshold is for: every case without the finding is a miss),
runs the project's own core on them in-process and prints a table: cases, cases with the
finding, the rate (false alarms on good rows, misses on bad ones), and what was measured.

    python benchmarks/false_alarms_seams.py                  # 20 cases a row: ~1 min, 2 cores
    python benchmarks/false_alarms_seams.py --cases 100      # more seeds a row
    python benchmarks/false_alarms_seams.py --seams identity --show

Seams and cases (tiny real transformers targets made in code, ``models.tiny``'s Llama,
8 layers, H = 64, vocabulary 512, random weights; each case its own seed):

- ``precision`` (EC311 saturation > 1 %, EC313 a slot > 30 % below the smallest normal
  FP8 number; 10 % before this benchmark): the target's states on 60-300 fresh token
  ids, written as hs-connectors' ``FP8HiddenStatesConnector._write_tensors`` writes them
  (its ``quantize_tensor_to_fp8``, one scale per token over the k slots, then
  ``save_file``) into a speculators data folder
  with its Arrow rows, and checked by the ``precision`` family (``planner.plan`` and
  ``run_units`` on the files). Good: the writer on the format's default slots; on a target
  with one outlier channel (x100 from layer 1, as LLMs' outlier features); per token and
  slot scales; an ``embed`` slot beside deep ones. Bad: a scale 10x too small (clipping);
  an ``embed`` slot sharing its scale with deep slots that carry a massive activation
  (one channel x3000 or x10000 from layer 1, as in Kimi-K2.5's capture). A static
  per-tensor scale calibrated on another sequence, and the embed slot beside a x1000
  activation, are measured beside them. Each row also
  gives what the bf16 states lost: the largest slot's relative dequantization error
  (FP8 e4m3's own rounding of a slot scaled on its own is about 0.025).
- ``identity`` (EC622 relative error > 0.001 and > 1.5 x the bfloat16 storage error;
  0.001 alone before this benchmark; EC623 mean cosine < 0.9):
  ``models.identity.check_target_identity`` on 60-300 fresh token ids. Good: the target
  saved as bfloat16, as float16, and saved again as float32. Bad: a QuaRot-rotated twin
  (tests/unit/test_target_identity.py's), a target of another seed. Reported, not judged: an
  int8 round-to-nearest twin (its drift must show as a number: EC622) and an int4 one.
- ``vocabulary`` (EC933 coverage floor: the recorded one; with none recorded a warning
  below 0.95 and an error below 0.5; a warning, ``(w)``, does not fail the gate): a real
  byte-level BPE tokenizer (4,096 tokens) trained on the standard library's modules and
  the reference manual (shipped with every Python); the pipeline's documents are the
  modules cut into 1,500 characters (7,700 documents, 3.2 M tokens), each a row: BOS,
  the text, ``<|eot_id|>``, the first third the prompt. d2t/t2d are built from one half
  of the documents as SpecForge and speculators build them (the 1,024 most frequent
  loss-masked ids: the 32k-of-128k ratio of Llama 3 drafts), and
  ``checks.vocabulary.check_vocabulary`` runs on 20 fresh SpecForge shards of the other
  half, with no floor recorded and at the ratio the trainer printed when it built the
  map ("top N token frequency ratio") less 0.05, recorded as
  ``training.draft.min_vocab_coverage``. Good: that map. Bad: the map built by another
  revision of the tokenizer (retrained with the same settings on the text with one
  module in twenty seen twice: other merges, other ids); the map of a narrow corpus (3
  documents: a stale cache of a debugging run).
- ``dflash`` (issue 38; discrete rules, no tolerance: EC501, EC522, EC526, EC527, EC528 of
  the DFlash layout check, and EC401's norm bounds that ``infer`` draws for a DFlash shard
  set). Settings rows: a fresh random DFlash pipeline per seed (a target of 8-80 layers,
  2-8 distinct taps, block 4/8/16, a mask token inside a vocabulary of 32k-152k, served on
  SGLang 0.5.23 with its block or none, or vLLM 0.34.0 with 1..B-1 draft tokens), its
  contract's training slots the taps' layers (``check_layout`` in-process). Good: that
  pipeline. Bad: vLLM asked for B tokens (speculators #456), the draft's taps one layer
  deeper than trained, the tap list removed where SGLang's fallback spreads other layers,
  a repeated tap. Shards rows: the tiny target's real hidden states at taps [1, 3, 5]
  (``residual:2/4/6``) on 60-300 fresh token ids, 4 shards a set written in SpecForge's
  DFlash layout; the contract is ``infer``'s from 8 trusted shards of the same pipeline.
  Good: a fresh set. Bad: a set captured one layer deeper (taps [2, 4, 6]).
- ``family`` (issue 38; discrete rules: EC501, EC522, EC510 of the DFlash2 / DSpark layout
  check by the method's own rules, EC901 of the draft checkpoint, and EC401's norm bounds
  ``infer`` draws for a SpecForge DSpark shard set). Settings rows: a fresh random DFlash2 or
  DSpark pipeline per seed (a target of 8-80 layers, 2-8 distinct taps; DFlash2 under
  ``dflash_config.target_layer_ids``, DSpark under ``dspark_target_layer_ids`` with a Markov
  head; served on SGLang 0.5.23 or vLLM 0.34.0), its draft a safetensors checkpoint whose
  ``fc.weight`` is [H, taps x H] (``check_layout`` and ``check_draft`` in-process). Good: that
  pipeline. Bad: the draft's taps one layer deeper than trained (EC501); the tap list removed
  where SGLang's fallback spreads other layers (EC522); an fc one tap narrower (EC901).
  mlx-vlm rows: a DFlash draft on mlx-vlm 0.7.10 (``qwen3_5`` target, 30-80 layers) with its
  trained taps listed (good) or none, trained on other taps than the drafter's default
  ``[1, 8, 15, 22, 29]`` (bad: EC522). Shards rows: the tiny target's real hidden states at
  taps [1, 3, 5] and its final-norm state on 60-300 fresh token ids, 4 shards a set written in
  SpecForge's DSpark layout (``specforge-dspark``); the contract is ``infer``'s from 8 trusted
  shards. Good: a fresh set. Bad: a set captured one layer deeper.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
import kinds  # noqa: E402  (the test folders: the identity tests' targets are reused)

sys.path.extend(kinds.folders())
sys.path.insert(0, str(HERE))
from false_alarms import loaded  # noqa: E402  (the same model cache)

SEAMS = ("precision", "identity", "vocabulary", "dflash", "family")
TOKENS = (60, 300)  # shard lengths, as benchmarks/false_alarms.py and tests/shardgen.py
H, LAYERS, VOCAB = 64, 8, 512  # models.tiny's default target
BPE_VOCAB, DRAFT_VOCAB = 4096, 1024  # the tokenizer and draft vocabulary (32k of 128k)
FRESH_SHARDS = 20  # vocabulary: fresh shards per case


@dataclass
class Row:
    """One table row: a seam's case kind over its seeds."""

    seam: str
    case: str
    kind: str  # "good": findings are false alarms; "bad": cases without them are misses
    watched: tuple[str, ...]  # the codes the row is about
    cases: int = 0
    flagged: int = 0  # cases with one of the watched codes
    codes: Counter[str] = field(default_factory=Counter)  # cases per code, every code
    measured: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)  # vocabulary: the maps' own ratios
    lines: list[str] = field(default_factory=list)  # what each flagged case said

    def add(self, seed: int, codes: set[str], value: float, said: str = "") -> None:
        self.cases += 1
        self.codes.update(codes)
        self.measured.append(value)
        if codes & set(self.watched):
            self.flagged += 1
            self.lines.append(f"seed {seed}: {said}")


# -- the precision seam: FP8 shards as hs-connectors writes them ------------------------


def _target(root: Path, name: str, seed: int = 0, massive: float = 1.0) -> Path:
    """The tiny target (``massive``: channel 0 of layer 1's MLP output that many times
    larger: an outlier channel every later layer carries), saved under ``root``."""
    path = root / name
    if not path.exists():
        import torch

        from pytest_eagle_contract.models.tiny import TinySpec, tiny_target

        model = tiny_target(TinySpec(num_layers=LAYERS, hidden_size=H, vocab_size=VOCAB, seed=seed))
        if massive != 1.0:
            with torch.no_grad():
                model.model.layers[1].mlp.down_proj.weight[0].mul_(massive)
        model.save_pretrained(path)
    return path


def _ids(seed: int, vocab: int = VOCAB) -> Any:
    import torch

    g = torch.Generator().manual_seed(seed)
    tokens = int(torch.randint(TOKENS[0], TOKENS[1] + 1, (1,), generator=g))
    return torch.randint(0, vocab, (tokens,), generator=g)


def _fp8_max() -> float:
    import torch

    return float(torch.finfo(torch.float8_e4m3fn).max)


def writer(states: Any) -> tuple[Any, Any]:
    """hs-connectors' own quantization (one scale per token across the slots)."""
    from hs_connectors.fp8_utils import quantize_tensor_to_fp8

    return quantize_tensor_to_fp8(states)


def per_slot(states: Any) -> tuple[Any, Any]:
    """One scale per token and slot ([T, k, 1]): each slot quantized on its own."""
    import torch

    pairs = [writer(states[:, j]) for j in range(states.shape[1])]
    return (
        torch.stack([q for q, _ in pairs], dim=1),
        torch.stack([s for _, s in pairs], dim=1),
    )


def too_small(states: Any) -> tuple[Any, Any]:
    """A writer whose scale is 10x too small: every value above a tenth of the token's
    largest clipped at +-448 (the cast clamps, as a writer that clamps before it)."""
    import torch

    fp32 = states.float()
    amax = fp32.abs().amax(dim=(1, 2), keepdim=True)
    scale = (amax / _fp8_max() / 10).clamp(min=1e-12)
    top = _fp8_max()
    return (fp32 / scale).clamp(-top, top).to(torch.float8_e4m3fn), scale


def calibrated(reference: Any) -> Callable[[Any], tuple[Any, Any]]:
    """A static per-tensor scale (FP8 activation calibration): amax of ``reference``, a
    calibration sequence of the same pipeline, over 448; values beyond it clip."""
    import torch

    scale = reference.float().abs().amax() / _fp8_max()

    def write(states: Any) -> tuple[Any, Any]:
        top = _fp8_max()
        fp8 = (states.float() / scale).clamp(-top, top).to(torch.float8_e4m3fn)
        return fp8, scale.reshape(1, 1, 1)

    return write


@dataclass(frozen=True)
class FP8Case:
    case: str
    kind: str
    watched: tuple[str, ...]
    massive: float = 1.0
    layers: tuple[int, ...] = (2, 4, 5, 8)  # speculators' default for 8 layers
    write: str = "writer"


PRECISION = (
    FP8Case("hs-connectors writer", "good", ("EC311", "EC313")),
    FP8Case("writer, outlier channel x100", "good", ("EC311", "EC313"), massive=100),
    FP8Case("writer, per token and slot scales", "good", ("EC311", "EC313"), write="per_slot"),
    FP8Case("writer, embed slot beside deep ones", "good", ("EC311", "EC313"), layers=(0, 2, 5, 8)),
    FP8Case("scale 10x too small (clips)", "bad", ("EC311",), write="too_small"),
    FP8Case("static scale from another sequence", "report", ("EC311",), write="calibrated"),
    FP8Case("embed slot, massive activation x1000", "report", ("EC313",), 1e3, layers=(0, 2, 5, 8)),
    FP8Case("embed slot, massive activation x3000", "bad", ("EC313",), 3000, layers=(0, 2, 5, 8)),
    FP8Case("embed slot, massive activation x10000", "bad", ("EC313",), 1e4, layers=(0, 2, 5, 8)),
)


def run_precision(seeds: range, root: Path) -> list[Row]:
    import torch
    from hs_connectors.fp8_utils import dequantize_fp8_tensor
    from safetensors.torch import save_file

    from pytest_eagle_contract.contract.model import load_contract
    from pytest_eagle_contract.layers import Layer
    from pytest_eagle_contract.models.reference import capture_canonical
    from pytest_eagle_contract.plan.planner import plan, run_units
    from pytest_eagle_contract.shards.writing import write_speculators_dataset

    rows = []
    for number, spec in enumerate(PRECISION):
        row = Row("precision", spec.case, spec.kind, spec.watched)
        model = loaded(_target(root, f"target-x{spec.massive:g}", massive=spec.massive))
        folder = root / f"fp8-{number}"
        data = folder / "data"
        written: list[tuple[Any, Any]] = []
        harm: list[float] = []
        write = {"writer": writer, "per_slot": per_slot, "too_small": too_small}.get(spec.write)
        if write is None:  # calibrated on the states of a sequence of its own
            calibration = capture_canonical(model, _ids(10**6 + number))
            write = calibrated(torch.stack([calibration[Layer(k)] for k in spec.layers], 1))
        for i, seed in enumerate(seeds):
            ids = _ids(seed)
            captured = capture_canonical(model, ids)
            states = torch.stack([captured[Layer(k)] for k in spec.layers], dim=1)
            states = states.to(torch.bfloat16)  # what the engine hands the connector
            fp8, scales = write(states)
            save_file(  # FP8HiddenStatesConnector._write_tensors' file
                {"hidden_states": fp8, "token_ids": ids, "hidden_states_scales": scales},
                str(_mkdir(data / "hidden_states") / f"hs_{i}.safetensors"),
            )
            mask = (torch.arange(len(ids)) >= len(ids) // 3).long()
            written.append((ids, mask))
            harm.append(_harm(states, dequantize_fp8_tensor(fp8, scales)))
        write_speculators_dataset(data, written)
        slots = "".join(f"    - {{layer: {Layer(k)}, dtype: bfloat16}}\n" for k in spec.layers)
        (folder / "c.yaml").write_text(
            "contract: fp8\nversion: 1\n"
            f"target: {{num_hidden_layers: {LAYERS}, hidden_size: {H}, vocab_size: {VOCAB}}}\n"
            "training:\n  format: speculators\n  shards: data/hidden_states\n  slots:\n" + slots,
            encoding="utf-8",
        )
        outcome = run_units(plan(load_contract(folder / "c.yaml"), None, None, 0, ("precision",)))
        per_file: dict[str, set[str]] = {}
        said: dict[str, list[str]] = {}
        for f in outcome.findings:
            name = Path(f.file or "").name
            per_file.setdefault(name, set()).add(f.code)
            said.setdefault(name, []).append(f"{f.code} {f.message}")
        for i, seed in enumerate(seeds):
            name = f"hs_{i}.safetensors"
            row.add(seed, per_file.get(name, set()), harm[i], "; ".join(said.get(name, [])))
        rows.append(row)
    return rows


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _harm(states: Any, read: Any) -> float:
    """The largest slot's relative dequantization error, ||read - states|| / ||states||
    (FP8 e4m3's own rounding of a slot scaled by itself: about 0.025)."""
    worst = 0.0
    for j in range(states.shape[1]):
        x = states[:, j].float()
        worst = max(worst, float((read[:, j].float() - x).norm() / x.norm()))
    return worst


# -- the target-identity seam ---------------------------------------------------------------


def run_identity(seeds: range, root: Path) -> list[Row]:
    import torch
    from test_target_identity import fake_quantized, rotated

    from pytest_eagle_contract.layers import Layer
    from pytest_eagle_contract.models.identity import check_target_identity, compare_targets
    from pytest_eagle_contract.models.target import TargetModel
    from pytest_eagle_contract.models.tiny import TinySpec, tiny_target

    def saved(name: str, seed: int, change: Callable[[Any], Any]) -> Path:
        spec = TinySpec(num_layers=LAYERS, hidden_size=H, vocab_size=VOCAB, seed=seed)
        path = root / f"{name}-{seed}"
        change(tiny_target(spec)).save_pretrained(path)
        return path

    cases: list[tuple[str, str, tuple[str, ...], Callable[[int], Path]]] = [
        ("saved as bfloat16", "good", ("EC622", "EC623"),
         lambda s: saved("bf16", s, lambda m: m.to(torch.bfloat16))),
        ("saved as float16", "good", ("EC622", "EC623"),
         lambda s: saved("fp16", s, lambda m: m.to(torch.float16))),
        ("saved again (float32)", "good", ("EC622", "EC623"),
         lambda s: saved("again", s, lambda m: m)),
        ("QuaRot-rotated twin", "bad", ("EC623",), lambda s: saved("rotated", s, rotated)),
        ("a target of another seed", "bad", ("EC623",),
         lambda s: saved("other", s + 10**6, lambda m: m)),
        ("int8 twin (drift as a number)", "report", ("EC622",),
         lambda s: saved("int8", s, fake_quantized)),
        ("int4 twin", "report", ("EC622", "EC623"),
         lambda s: saved("int4", s, lambda m: fake_quantized(m, 4))),
    ]  # fmt: skip
    rows = [Row("identity", case, kind, watched) for case, kind, watched, _ in cases]
    for seed in seeds:
        training = saved("training", seed, lambda m: m)
        ids = _ids(seed).tolist()
        for row, (_, _, _, make) in zip(rows, cases):
            serving = make(seed)
            found = check_target_identity(training, serving, tokens=ids)
            pair = TargetModel.open(training), TargetModel.open(serving)
            drift = compare_targets(*pair, [Layer(k) for k in range(LAYERS + 1)], ids)
            worst = max(d.rel_error for d in drift)
            said = "; ".join(f"{f.code} {f.found}" for f in found)
            row.add(seed, {f.code for f in found}, worst, said)
    return rows


# -- the vocabulary seam ------------------------------------------------------------------


def corpus() -> tuple[list[str], list[str]]:
    """The pipeline's documents and the tokenizer's wider training text, both shipped
    with every Python: the standard library's modules (tests and IDLE left out) cut into
    1,500-character documents, and those modules with the reference manual's topics."""
    import pydoc_data.topics

    lib = Path(os.__file__).parent
    files = sorted(
        f
        for f in lib.rglob("*.py")
        if not {"test", "tests", "idlelib", "site-packages"} & set(f.relative_to(lib).parts)
    )
    texts = [f.read_text(encoding="utf-8", errors="replace") for f in files]
    docs = [t[i : i + 1500] for t in texts for i in range(0, len(t), 1500)]
    docs = [d for d in docs if len(d) >= 500]
    topics = [pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics)]
    return docs, texts + topics


def run_vocabulary(seeds: range, root: Path) -> list[Row]:
    import random

    import numpy as np
    import torch
    from safetensors.torch import save_file
    from tokenizer_data import LLAMA3, make_tokenizer
    from transformers import AutoTokenizer

    from pytest_eagle_contract.checks.vocabulary import check_vocabulary, d2t_sha256
    from pytest_eagle_contract.contract.model import load_contract
    from pytest_eagle_contract.shards.writing import write_shard

    docs, wide = corpus()
    folders = {  # the next revision: the same settings, some text seen once more
        "served": make_tokenizer(root / "tok", LLAMA3, vocab_size=BPE_VOCAB, text=wide),
        "revision": make_tokenizer(
            root / "tok2", LLAMA3, vocab_size=BPE_VOCAB, text=[*wide, *wide[::20]]
        ),
    }
    rows_of: dict[str, list[tuple[Any, Any]]] = {}
    for name, folder in folders.items():  # each document as a training row
        tok = AutoTokenizer.from_pretrained(str(folder))
        eot = tok.convert_tokens_to_ids("<|eot_id|>")
        encoded = tok(docs, add_special_tokens=False)["input_ids"]
        rows_of[name] = [_row([tok.bos_token_id, *ids, eot]) for ids in encoded]
    vocab = len(AutoTokenizer.from_pretrained(str(folders["served"])))

    def built(name: str, chosen: list[int]) -> tuple[Any, Any, float]:
        """The map of ``chosen`` documents' trained ids, and the share of them it holds
        (the "top N token frequency ratio" SpecForge prints when it builds the map)."""
        ids = np.concatenate([rows_of[name][i][0][rows_of[name][i][1] != 0] for i in chosen])
        counts = np.bincount(ids, minlength=vocab)
        d2t, t2d = vocab_maps(counts, vocab)
        return d2t, t2d, float(counts[t2d.numpy()].sum() / counts.sum())

    makers: list[tuple[str, str, Callable[[list[int], random.Random], Any]]] = [
        ("map of the pipeline's corpus", "good", lambda half, _: built("served", half)),
        ("map of another tokenizer revision", "bad", lambda half, _: built("revision", half)),
        ("map of a narrow corpus (3 documents)", "bad",
         lambda half, rng: built("served", rng.sample(half, 3))),
    ]  # fmt: skip
    rows = []
    for case, kind, _ in makers:
        rows.append(Row("vocabulary", f"{case}, none recorded", kind, ("EC933",)))
        rows.append(Row("vocabulary", f"{case}, its ratio - {MARGIN}", kind, ("EC933",)))
    for seed in seeds:
        rng = random.Random(seed)
        order = list(range(len(docs)))
        rng.shuffle(order)
        half, fresh = order[: len(docs) // 2], order[len(docs) // 2 :][:FRESH_SHARDS]
        folder = root / f"vocab-{seed}"
        g = torch.Generator().manual_seed(seed)
        paths = []
        for i, doc in enumerate(fresh):
            ids, mask = (torch.from_numpy(a) for a in rows_of["served"][doc])
            states = [torch.randn(len(ids), 16, generator=g) for _ in range(4)]
            paths.append(write_shard(folder / "shards", "specforge", i, ids, mask, states))
        trained = np.concatenate(
            [rows_of["served"][i][0][rows_of["served"][i][1] != 0] for i in fresh]
        )
        for number, (_, _, make) in enumerate(makers):
            d2t, t2d, ratio = make(half, rng)
            draft = _mkdir(folder / f"draft-{number}")
            save_file({"d2t": d2t, "t2d": t2d}, str(draft / "model.safetensors"))
            share = float(t2d.numpy()[trained].mean())
            for row, floor in zip(rows[2 * number : 2 * number + 2], (None, ratio - MARGIN)):
                contract = folder / f"c-{number}.yaml"
                contract.write_text(
                    _vocab_contract(
                        vocab, folders["served"], d2t_sha256(d2t.numpy()), draft, floor
                    ),
                    encoding="utf-8",
                )
                found = check_vocabulary(draft, contract=load_contract(contract), shard_paths=paths)
                said = "; ".join(f"{f.code} {f.message}" for f in found)
                gate = {f.code if f.severity == "error" else f"{f.code}(w)" for f in found}
                row.add(seed, gate, share, f"{said} (its ratio {ratio:.4f})")
                row.ratios.append(ratio)
    return rows


MARGIN = 0.05  # below the ratio the trainer printed: the recorded floor


def _row(ids: list[int]) -> tuple[Any, Any]:
    """Ids and loss mask of a training row: the first third is the prompt."""
    import numpy as np

    start = len(ids) // 3
    return np.asarray(ids, dtype=np.int64), np.asarray(
        [0] * start + [1] * (len(ids) - start), dtype=np.int64
    )


def _vocab_contract(vocab: int, tokenizer: Path, sha: str, draft: Path, floor: float | None) -> str:
    recorded = "" if floor is None else f", min_vocab_coverage: {floor:.4f}"
    return (
        "contract: vocabulary\nversion: 1\n"
        f"target: {{num_hidden_layers: 8, hidden_size: 16, vocab_size: {vocab}}}\n"
        f"tokenizer: {{path: {tokenizer}}}\n"
        "training:\n  format: specforge\n  shards: shards\n  slots:\n"
        "    - {layer: residual:2}\n    - {layer: residual:4}\n"
        "    - {layer: residual:6}\n    - {layer: final_norm}\n"
        f"  draft: {{d2t_sha256: {sha}{recorded}}}\n"
        f"serving: {{engine: sglang, draft_config: {draft}}}\n"
    )


def vocab_maps(counts: Any, vocab: int, n: int = DRAFT_VOCAB) -> tuple[Any, Any]:
    """d2t/t2d as SpecForge's generate_vocab_mapping_file and speculators' build the map
    from ``counts`` (per id): the ``n`` most frequent ids (ties by id; 0, 1, ... fill a
    short count), sorted."""
    import numpy as np
    import torch

    seen = np.flatnonzero(counts)
    chosen = sorted(seen.tolist(), key=lambda t: (-int(counts[t]), t))[:n]
    taken = set(chosen)
    filler = (i for i in range(vocab) if i not in taken)
    chosen += [next(filler) for _ in range(n - len(chosen))]
    chosen.sort()
    d2t = torch.tensor(chosen, dtype=torch.long) - torch.arange(n)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[chosen] = True
    return d2t, t2d


# -- the table ------------------------------------------------------------------------------


# -- the dflash seam: DFlash settings and DFlash shards ---------------------------------------

DFLASH_TAPS = (1, 3, 5)  # the shards rows' taps on the 8-layer tiny target


def _dflash_pipeline(rng: Any) -> dict[str, Any]:
    """A random good DFlash pipeline: target depth, taps, block, mask token, engine, launch."""
    L = rng.randint(8, 80)
    n = rng.randint(2, min(8, L - 2))
    taps = sorted(rng.sample(range(0, L - 2), n))
    block = rng.choice([4, 8, 16])
    vocab = rng.choice([32000, 128256, 151936])
    engine = rng.choice(["sglang", "vllm"])
    if engine == "sglang":
        launch = rng.choice(["", f" --speculative-num-draft-tokens {block}"])
        launch = "python -m sglang.launch_server --speculative-algorithm DFLASH" + launch
    else:
        k = rng.randint(1, block - 1)
        launch = (
            "vllm serve t --speculative-config "
            f'\'{{"method": "dflash", "num_speculative_tokens": {k}}}\''
        )
    return {
        "L": L,
        "taps": taps,
        "block": block,
        "vocab": vocab,
        "mask": rng.randrange(vocab),
        "engine": engine,
        "version": "0.5.23" if engine == "sglang" else "0.34.0",
        "launch": launch,
        "draft_layers": n,
    }


def _dflash_codes(root: Path, p: dict[str, Any], trained: list[int]) -> set[str]:
    """The DFlash layout check's codes for pipeline ``p`` whose draft was trained on taps
    ``trained`` (its contract's training slots)."""
    import json

    from pytest_eagle_contract.checks.layout import check_layout
    from pytest_eagle_contract.contract.model import parse_contract

    dflash: dict[str, Any] = {"mask_token_id": p["mask"]}
    if p["taps"] is not None:
        dflash["target_layer_ids"] = p["taps"]
    draft = {
        "architectures": ["DFlashDraftModel"],
        "block_size": p["block"],
        "dflash_config": dflash,
        "hidden_size": 64,
        "num_hidden_layers": p["draft_layers"],
        "num_target_layers": p["L"],
        "vocab_size": p["vocab"],
    }
    _mkdir(root / "draft")
    (root / "draft" / "config.json").write_text(json.dumps(draft))
    slots = "".join(f"    - {{layer: residual:{t + 1}}}\n" for t in trained)
    text = (
        "contract: d\nversion: 1\nmethod: dflash\n"
        f"target: {{arch: Qwen3ForCausalLM, num_hidden_layers: {p['L']}, hidden_size: 64, "
        f"vocab_size: {p['vocab']}}}\n"
        f"training:\n  target_slot: null\n  slots:\n{slots}"
        f'serving:\n  engine: {p["engine"]}\n  version: "{p["version"]}"\n'
        f"  draft_config: draft\n  launch: {json.dumps(p['launch'])}\n"
    )
    contract = parse_contract(text, root / "c.yaml")
    return {f.code for f in check_layout(contract) if f.severity == "error"}


DFLASH_WATCHED = ("EC501", "EC522", "EC526", "EC527", "EC528")


def run_dflash(seeds: range, root: Path) -> list[Row]:
    import random

    from pytest_eagle_contract.engines.dflash import zlab_formula

    rows = {
        "good": Row("dflash", "settings: a fresh good DFlash pipeline", "good", DFLASH_WATCHED),
        "k": Row("dflash", "settings: vLLM num_speculative_tokens = block_size", "bad", ("EC526",)),
        "shift": Row("dflash", "settings: the draft's taps one layer deeper", "bad", ("EC501",)),
        "guess": Row("dflash", "settings: no tap list, SGLang's spread differs", "bad", ("EC522",)),
        "dup": Row("dflash", "settings: a repeated tap", "bad", ("EC528",)),
    }
    for seed in seeds:
        rng = random.Random(seed)
        p = _dflash_pipeline(rng)
        trained = list(p["taps"])
        codes = _dflash_codes(root, p, trained)
        rows["good"].add(seed, codes, p["L"], ", ".join(sorted(codes)))
        bad = dict(p, engine="vllm", version="0.34.0")
        bad["launch"] = (
            "vllm serve t --speculative-config "
            f'\'{{"method": "dflash", "num_speculative_tokens": {p["block"]}}}\''
        )
        rows["k"].add(seed, _dflash_codes(root, bad, trained), p["L"])
        shifted = dict(p, taps=[t + 1 for t in trained])
        rows["shift"].add(seed, _dflash_codes(root, shifted, trained), p["L"])
        spread = zlab_formula(p["L"], p["draft_layers"])
        other = trained if spread != trained else [t + 1 for t in trained]
        guessed = dict(p, taps=None, engine="sglang", version="0.5.23", launch="")
        rows["guess"].add(seed, _dflash_codes(root, guessed, other), p["L"])
        dup = dict(p, taps=[trained[0], *trained[:-1]])
        rows["dup"].add(seed, _dflash_codes(root, dup, trained), p["L"])
    return [*rows.values(), *_dflash_shards(seeds, root)]


def _dflash_set(model: Any, folder: Path, seed: int, taps: tuple[int, ...], n: int) -> None:
    import torch

    from pytest_eagle_contract.layers import Layer
    from pytest_eagle_contract.models.reference import capture_canonical
    from pytest_eagle_contract.shards.writing import save, shard_dict, shard_name

    for i in range(n):
        ids = _ids(seed * 100 + i)
        captured = capture_canonical(model, ids)
        states = [captured[Layer(t + 1)].to(torch.bfloat16) for t in taps]
        mask = (torch.arange(len(ids)) >= len(ids) // 3).long()
        data = shard_dict("specforge-dflash", ids, mask, states)
        save(folder / shard_name("specforge-dflash", i), data)


def _dflash_shards(seeds: range, root: Path) -> list[Row]:
    import json

    from pytest_eagle_contract.authoring.infer import InferRequest, draft_contract
    from pytest_eagle_contract.contract.model import parse_contract
    from pytest_eagle_contract.plan.planner import plan, run_units

    model = loaded(_target(root, "target"))
    draft = _mkdir(root / "shards-draft")
    (draft / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["DFlashDraftModel"],
                "block_size": 8,
                "dflash_config": {"mask_token_id": 500, "target_layer_ids": list(DFLASH_TAPS)},
                "hidden_size": H,
                "num_hidden_layers": 3,
                "num_target_layers": LAYERS,
                "vocab_size": VOCAB,
            }
        )
    )
    trusted = _mkdir(root / "trusted")
    _dflash_set(model, trusted, 10**6, DFLASH_TAPS, 8)
    where = root / "c.yaml"
    drafted = draft_contract(
        InferRequest(
            [trusted], "dflash", num_layers=LAYERS, vocab_size=VOCAB, arch="LlamaForCausalLM",
            draft=draft, where=where, draft_ref=str(draft),
        )
    )  # fmt: skip
    contract = parse_contract(drafted.text, where)
    good = Row("dflash", "shards: a fresh set of the same pipeline", "good", ("EC401",))
    deeper = Row("dflash", "shards: a set captured one layer deeper", "bad", ("EC401",))
    for seed in seeds:
        for row, taps in ((good, DFLASH_TAPS), (deeper, tuple(t + 1 for t in DFLASH_TAPS))):
            folder = _mkdir(root / f"set-{row.kind}-{seed}")
            _dflash_set(model, folder, seed, taps, 4)
            outcome = run_units(plan(contract, [folder], None, 0))
            codes = {f.code for f in outcome.findings if f.severity == "error"}
            said = "; ".join(f"{f.code} {f.message}" for f in outcome.findings)
            row.add(seed, codes, len(codes), said[:300])
    return [good, deeper]


FAMILY_WATCHED = ("EC501", "EC522", "EC510", "EC901")


def _family_codes(root: Path, p: dict[str, Any], trained: list[int], fc_taps: int) -> set[str]:
    """The errors of the layout check (by the method's rules) and the draft checkpoint check
    for DFlash2 / DSpark pipeline ``p``, trained on ``trained``, its fc ``fc_taps`` taps wide."""
    import json

    import torch
    from safetensors.torch import save_file

    from pytest_eagle_contract.checks.draft import check_draft
    from pytest_eagle_contract.checks.layout import check_layout
    from pytest_eagle_contract.contract.model import parse_contract

    draft: dict[str, Any] = {"hidden_size": 64, "num_hidden_layers": p["draft_layers"]}
    if p["method"] == "dflash2":
        draft["architectures"] = ["DFlash2DraftModel"]
        draft["dflash_config"] = {"mask_token_id": 1}
        if p["taps"] is not None:
            draft["dflash_config"]["target_layer_ids"] = p["taps"]
    else:
        draft |= {"architectures": ["Qwen3DSparkModel"], "dspark_markov_rank": 8}
        if p["taps"] is not None:
            draft["dspark_target_layer_ids"] = p["taps"]
    folder = _mkdir(root / "family-draft")
    (folder / "config.json").write_text(json.dumps(draft))
    save_file({"fc.weight": torch.zeros(64, fc_taps * 64)}, str(folder / "model.safetensors"))
    slots = "".join(f"    - {{layer: residual:{t + 1}}}\n" for t in trained)
    text = (
        f"contract: f\nversion: 1\nmethod: {p['method']}\n"
        f"target: {{arch: {p['arch']}, num_hidden_layers: {p['L']}, hidden_size: 64}}\n"
        f"training:\n  target_slot: null\n  slots:\n{slots}"
        f'serving:\n  engine: {p["engine"]}\n  version: "{p["version"]}"\n'
        f"  draft_config: {folder}\n"
    )
    contract = parse_contract(text, root / "c.yaml")
    found = [*check_layout(contract), *check_draft(contract, None)]
    return {f.code for f in found if f.severity == "error"}


def _mlx_codes(root: Path, L: int, taps: list[int] | None, trained: list[int]) -> set[str]:
    """The DFlash layout check's errors for a qwen3_dflash draft on mlx-vlm 0.7.10."""
    import json

    from pytest_eagle_contract.checks.layout import check_layout
    from pytest_eagle_contract.contract.model import parse_contract

    dc: dict[str, Any] = {"mask_token_id": 1}
    if taps is not None:
        dc["target_layer_ids"] = taps
    folder = _mkdir(root / "mlx-draft")
    (folder / "config.json").write_text(
        json.dumps({"model_type": "qwen3", "num_hidden_layers": 5, "dflash_config": dc})
    )
    slots = "".join(f"    - {{layer: residual:{t + 1}}}\n" for t in trained)
    text = (
        "contract: m\nversion: 1\nmethod: dflash\n"
        f"target: {{arch: qwen3_5, num_hidden_layers: {L}, hidden_size: 64, vocab_size: 512}}\n"
        f"training:\n  target_slot: null\n  slots:\n{slots}"
        f'serving:\n  engine: mlx\n  version: "0.7.10"\n  draft_config: {folder}\n'
    )
    contract = parse_contract(text, root / "m.yaml")
    return {f.code for f in check_layout(contract) if f.severity == "error"}


def run_family(seeds: range, root: Path) -> list[Row]:
    import random

    from pytest_eagle_contract.engines.dflash import MLX_DEFAULT_TAPS, zlab_formula

    rows = {
        "good": Row("family", "settings: a fresh good DFlash2/DSpark pipeline", "good",
                    FAMILY_WATCHED),
        "shift": Row("family", "settings: the draft's taps one layer deeper", "bad", ("EC501",)),
        "guess": Row("family", "settings: no tap list, SGLang's spread differs", "bad", ("EC522",)),
        "fc": Row("family", "checkpoint: fc one tap narrower", "bad", ("EC901",)),
        "mlx": Row("family", "mlx-vlm: the trained taps listed", "good", ("EC522", "EC510")),
        "mlxguess": Row("family", "mlx-vlm: no list, default differs from trained", "bad",
                        ("EC522",)),
    }  # fmt: skip
    for seed in seeds:
        rng = random.Random(seed)
        L = rng.randint(8, 80)
        n = rng.randint(2, min(8, L - 2))
        engine = rng.choice(["sglang", "vllm"])
        p = {
            "method": rng.choice(["dflash2", "dspark"]),
            "L": L,
            "taps": sorted(rng.sample(range(0, L - 2), n)),
            "engine": engine,
            "version": "0.5.23" if engine == "sglang" else "0.34.0",
            "arch": "Qwen3ForCausalLM",
            "draft_layers": n,
        }
        trained = list(p["taps"])
        codes = _family_codes(root, p, trained, n)
        rows["good"].add(seed, codes, L, f"{p['method']} {engine}: " + ", ".join(sorted(codes)))
        shifted = dict(p, taps=[t + 1 for t in trained])
        rows["shift"].add(seed, _family_codes(root, shifted, trained, n), L)
        spread = zlab_formula(L, n)
        other = trained if spread != trained else [t + 1 for t in trained]
        guessed = dict(p, taps=None, engine="sglang", version="0.5.23")
        rows["guess"].add(seed, _family_codes(root, guessed, other, n), L)
        rows["fc"].add(seed, _family_codes(root, p, trained, n - 1), L)
        M = rng.randint(30, 80)
        listed = sorted(rng.sample(range(0, M - 1), 5))
        codes = _mlx_codes(root, M, listed, listed)
        rows["mlx"].add(seed, codes, M, ", ".join(sorted(codes)))
        default = list(MLX_DEFAULT_TAPS)
        other = listed if listed != default else [t + 1 for t in default]
        rows["mlxguess"].add(seed, _mlx_codes(root, M, None, other), M)
    return [*rows.values(), *_dspark_shards(seeds, root)]


def _dspark_set(model: Any, folder: Path, seed: int, taps: tuple[int, ...], n: int) -> None:
    import torch

    from pytest_eagle_contract.layers import Layer
    from pytest_eagle_contract.models.reference import capture_canonical
    from pytest_eagle_contract.shards.writing import save, shard_dict, shard_name

    for i in range(n):
        ids = _ids(seed * 100 + i)
        captured = capture_canonical(model, ids)
        states = [captured[Layer(t + 1)].to(torch.bfloat16) for t in taps]
        states.append(captured[Layer(-1)].to(torch.bfloat16))  # final_norm
        mask = (torch.arange(len(ids)) >= len(ids) // 3).long()
        data = shard_dict("specforge-dspark", ids, mask, states)
        save(folder / shard_name("specforge-dspark", i), data)


def _dspark_shards(seeds: range, root: Path) -> list[Row]:
    import json

    from pytest_eagle_contract.authoring.infer import InferRequest, draft_contract
    from pytest_eagle_contract.contract.model import parse_contract
    from pytest_eagle_contract.plan.planner import plan, run_units

    model = loaded(_target(root, "target"))
    draft = _mkdir(root / "dspark-draft")
    (draft / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["DSparkDraftModel"],
                "dflash_config": {"mask_token_id": 500, "target_layer_ids": list(DFLASH_TAPS),
                                  "markov_rank": 4},
                "hidden_size": H,
                "num_hidden_layers": 3,
                "vocab_size": VOCAB,
            }
        )
    )  # fmt: skip
    trusted = _mkdir(root / "dspark-trusted")
    _dspark_set(model, trusted, 10**6, DFLASH_TAPS, 8)
    where = root / "d.yaml"
    drafted = draft_contract(
        InferRequest(
            [trusted], "specforge-dspark", num_layers=LAYERS, vocab_size=VOCAB,
            arch="LlamaForCausalLM", draft=draft, where=where, draft_ref=str(draft),
        )
    )  # fmt: skip
    contract = parse_contract(drafted.text, where)
    good = Row("family", "DSpark shards: a fresh set of the same pipeline", "good", ("EC401",))
    deeper = Row("family", "DSpark shards: a set captured one layer deeper", "bad", ("EC401",))
    for seed in seeds:
        for row, taps in ((good, DFLASH_TAPS), (deeper, tuple(t + 1 for t in DFLASH_TAPS))):
            folder = _mkdir(root / f"dspark-{row.kind}-{seed}")
            _dspark_set(model, folder, seed, taps, 4)
            outcome = run_units(plan(contract, [folder], None, 0))
            codes = {f.code for f in outcome.findings if f.severity == "error"}
            said = "; ".join(f"{f.code} {f.message}" for f in outcome.findings)
            row.add(seed, codes, len(codes), said[:300])
    return [good, deeper]


def thresholds() -> dict[str, str]:
    """Each seam's thresholds, as the code has them."""
    from pytest_eagle_contract.checks.precision import MAX_SATURATION, MAX_UNDERFLOW
    from pytest_eagle_contract.checks.vocabulary import UNRECORDED_ERROR, UNRECORDED_WARNING
    from pytest_eagle_contract.models.identity import BASIS_FLOOR, DRIFT_NOISE, STORAGE_MARGIN

    return {
        "precision": f"EC311 saturation > {MAX_SATURATION:.0%}; EC313 a slot > "
        f"{MAX_UNDERFLOW:.0%} below the smallest normal",
        "identity": f"EC622 relative error > {DRIFT_NOISE:g} and > {STORAGE_MARGIN:g} x the "
        f"bfloat16 storage error; EC623 mean cosine < {BASIS_FLOOR:g}",
        "vocabulary": f"EC933 coverage < the recorded min_vocab_coverage; none recorded: a "
        f"warning < {UNRECORDED_WARNING:g}, an error < {UNRECORDED_ERROR:g}",
        "dflash": "EC526 draft tokens > block_size - 1 (vLLM) or block != block_size (SGLang); "
        "EC527 mask id absent/negative/>= vocab; EC528 repeated or negative taps; EC501/EC522 "
        "trained != served; EC401 infer's norm bounds on DFlash shards",
        "family": "EC501/EC522 trained != served by the method's own rules; EC901 fc width != "
        "taps x target hidden; EC401 infer's norm bounds on SpecForge DSpark shards",
    }


MEASURED = {
    "precision": "slot error",
    "identity": "worst rel. error",
    "vocabulary": "coverage",
    "dflash": "L or codes",
    "family": "L or codes",
}


def table(rows: list[Row]) -> str:
    head = (
        f"{'seam':10s}  {'case':58s}  {'kind':6s}  {'watched':11s}  {'cases':>5s}  "
        f"{'flagged':>7s}  {'rate':18s}  {'by code':22s}  measured (min .. max)"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        if r.kind == "good":
            rate = (
                f"{r.flagged / r.cases:.2f} false alarms"
                if r.flagged
                else (
                    f"0 (<{3 / r.cases:.2f})"  # the rule of three: 95 % upper bound
                )
            )
        elif r.kind == "bad":
            missed = r.cases - r.flagged
            rate = f"{missed / r.cases:.2f} missed" if missed else f"0 missed (<{3 / r.cases:.2f})"
        else:
            rate = f"{r.flagged / r.cases:.2f} reported"
        codes = ",".join(f"{c}:{n}" for c, n in sorted(r.codes.items())) or "-"
        low, high = min(r.measured), max(r.measured)
        what = MEASURED[r.seam]
        span = f"{what} {low:.4g} .. {high:.4g}"
        if r.ratios:
            span += f" (its ratio {min(r.ratios):.4g} .. {max(r.ratios):.4g})"
        lines.append(
            f"{r.seam:10s}  {r.case:58s}  {r.kind:6s}  {'/'.join(r.watched):11s}  {r.cases:5d}  "
            f"{r.flagged:7d}  {rate:18s}  {codes:22s}  {span}"
        )
    return "\n".join(lines)


RUNS: dict[str, Callable[[range, Path], list[Row]]] = {
    "precision": run_precision,
    "identity": run_identity,
    "vocabulary": run_vocabulary,
    "dflash": run_dflash,
    "family": run_family,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=20, help="seeds per row")
    parser.add_argument("--first", type=int, default=0, help="first seed")
    parser.add_argument("--seams", nargs="+", default=list(SEAMS), choices=SEAMS)
    parser.add_argument("--show", action="store_true", help="what each flagged case said")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)  # small tensors: one thread is fastest, and leaves a core
    os.environ["EAGLE_CONTRACT_SHARPNESS_CACHE"] = "off"
    from transformers.utils import logging

    logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    logging.set_verbosity_error()
    started = time.perf_counter()
    seeds = range(args.first, args.first + args.cases)
    rows: list[Row] = []
    timings = []
    with tempfile.TemporaryDirectory(prefix="false-alarms-seams-") as tmp:
        for seam in args.seams:
            began = time.perf_counter()
            rows += RUNS[seam](seeds, _mkdir(Path(tmp) / seam))
            timings.append(f"{seam} {time.perf_counter() - began:.0f} s")
    print(f"seeds {seeds.start}..{seeds.stop - 1}, one case per seed and row")
    for seam in args.seams:
        print(f"  {seam}: {thresholds()[seam]}")
    print(table(rows))
    if args.show:
        for r in rows:
            for line in r.lines:
                print(f"{r.seam}/{r.case}: {line}")
    print(f"{time.perf_counter() - started:.0f} s ({', '.join(timings)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
