"""Benchmark: false alarms of drafted contracts on fresh good shards (issue 22, item 5).

A contract drafted from good shards must pass fresh shards of the same pipeline. For each
scenario (a tiny real transformer), each contract seed and each shard format, this drafts
a contract from ``--draft`` good shards (``eagle-contract infer DIR``, with
``--target-model`` and without it, naming the slots by the format's defaults) and checks
``--fresh`` other good shards of the same pipeline (other token sequences, the same
target) as ``eagle-contract check CONTRACT DIR --sample all`` does, sharpness included.
Every finding on a fresh shard is a false alarm. The table counts them per rule code,
with the rate the drafts state for themselves beside the measured one.

    python benchmarks/false_alarms.py                   # 10 contracts x 100 fresh: 2-4 min, 2 cores
    python benchmarks/false_alarms.py --contracts 50 --first 10     # 5,000 more shards per row
    python benchmarks/false_alarms.py --show --notes    # each false alarm; why not sharp
    python benchmarks/false_alarms.py --formats speculators-v1 --scenarios flat --modes target

Scenarios (``models.tiny``'s random-weight Llama, 8 layers, H=64, vocab 512, its
shards 60-300 tokens long as in the tests):

- ``tiny``: the project's tiny target as the tests build it (each block's output grows
  x1.4 per layer, so adjacent layers' median norms are about 40 % apart).
- ``flat``: every block's output of the same scale, as in the deep layers of a large
  model: adjacent layers' median norms are 8-10 % apart, a few times the shard-to-shard
  spread, so norm bounds that separate neighbouring slots sit close to their medians.

The flow is infer's and check's own core, in-process: ``authoring.infer.draft_contract``
on the trusted shard files, the text parsed as ``check`` loads it, then
``planner.plan`` and ``planner.run_units`` on the fresh files. A draft that is not sharp
(``infer`` exits 1 and says why) is counted, and its fresh shards are not checked; for a
sharp one, check's sharpness item is infer's verdict (the same self-test on the same
contract), so it is not run twice.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMATS = ("specforge", "speculators-v1", "speculators", "eagle-legacy", "trtllm")
MODES = ("target", "defaults")  # infer --target-model DIR, or infer --num-layers L
SCENARIOS = ("tiny", "flat")
DTYPES = {"eagle-legacy": "float16"}  # EAGLE-1/2 shards are fp16, the others bf16
TOKENS = (60, 300)  # the range of shard lengths, as tests/shardgen.py
SEEDS_PER_CONTRACT = 100_000  # contract c's shards are seeds c * this + 0, 1, ...


@dataclass
class Tally:
    """One table row: a scenario, format and mode over every contract seed."""

    contracts: int = 0
    not_sharp: int = 0
    reference: int = 0  # drafts that turned on reference_capture
    shards: int = 0
    alarms: int = 0  # fresh shards with at least one error
    codes: Counter[str] = field(default_factory=Counter)  # shards per rule code
    contract_codes: Counter[str] = field(default_factory=Counter)  # contract-level errors
    stated: list[float] = field(default_factory=list)  # the drafts' own estimated rates
    notes: Counter[str] = field(default_factory=Counter)
    alarm_lines: list[str] = field(default_factory=list)  # what each false alarm said

    def add(self, other: Tally) -> None:
        self.contracts += other.contracts
        self.not_sharp += other.not_sharp
        self.reference += other.reference
        self.shards += other.shards
        self.alarms += other.alarms
        self.codes.update(other.codes)
        self.contract_codes.update(other.contract_codes)
        self.stated += other.stated
        self.notes.update(other.notes)
        self.alarm_lines += other.alarm_lines


# -- the target and its shards ------------------------------------------------------------


def build_target(scenario: str, root: Path) -> Path:
    """The scenario's tiny target, saved as an HF directory (what --target-model reads)."""
    import torch

    from pytest_eagle_contract.models.tiny import GROWTH, TinySpec, tiny_target

    model = tiny_target(TinySpec())
    if scenario == "flat":
        with torch.no_grad():
            for k, layer in enumerate(model.model.layers):
                layer.mlp.down_proj.weight.mul_(GROWTH**-k)  # every block alike
    elif scenario != "tiny":
        raise SystemExit(f"unknown scenario {scenario!r}: choose from {', '.join(SCENARIOS)}")
    path = root / f"target-{scenario}"
    model.save_pretrained(path)
    return path


_models: dict[Path, Any] = {}


def loaded(path: Path) -> Any:
    """The model saved at ``path``, loaded once per process (both false-alarm benchmarks)."""
    if path not in _models:
        from transformers import AutoModelForCausalLM

        _models[path] = AutoModelForCausalLM.from_pretrained(path).eval()
    return _models[path]


def write_shards(target: Path, fmt: str, seeds: range, root: Path) -> list[Path]:
    """Good shards of ``fmt``'s pipeline on ``target``, one per seed: the layers the
    format's trainer captures by default, the states as the trainer stores them."""
    import torch

    from pytest_eagle_contract.models.reference import capture_canonical
    from pytest_eagle_contract.shards.formats import FORMATS as REGISTRY
    from pytest_eagle_contract.shards.writing import write_data_config, write_shard

    model = loaded(target)
    config = model.config
    L, H, vocab = config.num_hidden_layers, config.hidden_size, config.vocab_size
    layers = REGISTRY[fmt].default_layers(L, {}, "LlamaForCausalLM")
    dtype = getattr(torch, DTYPES.get(fmt, "bfloat16"))
    if fmt == "speculators-v1":  # the generator writes its layer ids beside the shards
        write_data_config(root, [x.index - 1 for x in layers], H)
    paths = []
    for seed in seeds:
        g = torch.Generator().manual_seed(seed)
        tokens = int(torch.randint(TOKENS[0], TOKENS[1] + 1, (1,), generator=g))
        ids = torch.randint(0, vocab, (tokens,), generator=g)
        mask = torch.ones(tokens, dtype=torch.long)
        mask[: tokens // 3] = 0  # the prompt; the response trains
        states = _states(model, target, seed, ids, capture_canonical)
        slots = [states[x].to(dtype) for x in layers]
        paths.append(write_shard(root, fmt, seed % SEEDS_PER_CONTRACT, ids, mask, slots))
    return paths


_captured: dict[tuple[Path, int], Any] = {}


def _states(model: Any, target: Path, seed: int, ids: Any, capture: Any) -> Any:
    """Every canonical layer of one sequence (kept for the other formats of the job)."""
    key = (target, seed)
    if key not in _captured:
        _captured[key] = capture(model, ids)
    return _captured[key]


# -- one contract seed: infer, then check --------------------------------------------------


def run_job(job: tuple[str, Path, int, int, int, tuple[str, ...], tuple[str, ...]]) -> dict:
    """Contract seed ``c`` of ``scenario``: per format, ``draft`` trusted shards and
    ``fresh`` fresh ones written; per mode a contract drafted and the fresh shards checked."""
    import torch

    torch.set_num_threads(1)  # small tensors: one thread per process is fastest
    _, target, c, draft, fresh, formats, modes = job
    out: dict[tuple[str, str], Tally] = {}
    base = c * SEEDS_PER_CONTRACT
    with tempfile.TemporaryDirectory(prefix="false-alarms-") as tmp:
        for fmt in formats:
            root = Path(tmp) / fmt
            trusted = write_shards(target, fmt, range(base, base + draft), root / "trusted")
            others = write_shards(
                target, fmt, range(base + draft, base + draft + fresh), root / "fresh"
            )
            for mode in modes:
                out[(fmt, mode)] = _draft_and_check(target, fmt, mode, trusted, others, root)
            shutil.rmtree(root)
    _captured.clear()
    return {f"{fmt}|{mode}": tally for (fmt, mode), tally in out.items()}


def _draft_and_check(
    target: Path, fmt: str, mode: str, trusted: list[Path], fresh: list[Path], root: Path
) -> Tally:
    from pytest_eagle_contract.authoring.infer import InferRequest, draft_contract
    from pytest_eagle_contract.contract.model import parse_contract
    from pytest_eagle_contract.plan.planner import Runner, plan, run_units

    tally = Tally(contracts=1)
    path = root / f"{mode}.yaml"
    if mode == "target":  # eagle-contract infer DIR --target-model MODEL
        options: dict[str, Any] = {"target_model": target}
    else:  # eagle-contract infer DIR --num-layers L --vocab-size V (the format's defaults)
        model = loaded(target)
        options = {
            "num_layers": model.config.num_hidden_layers,
            "vocab_size": model.config.vocab_size,
        }
    drafted = draft_contract(
        InferRequest(trusted, f"{fmt}-{mode}", sample=None, where=path, **options)
    )
    contract = parse_contract(drafted.text, path)
    tally.stated.append(stated_rate(drafted.text))
    tally.reference += contract.target.reference_capture
    if not drafted.sharp:
        tally.not_sharp += 1
        for note in drafted.notes:
            tally.notes[note.split(" ", 1)[0] + " " + _kind(note)] += 1
        return tally
    path.write_text(drafted.text, encoding="utf-8")
    # check CONTRACT DIR --sample all; its sharpness item is infer's verdict (the same
    # self-test on the same contract), taken above, so it is not run a second time
    outcome = run_units(plan(contract, fresh, None, 0, without=("sharpness",)), Runner())
    per_file: dict[str, set[str]] = {}
    for f in outcome.findings:
        if f.severity != "error":
            continue
        if f.file:
            per_file.setdefault(f.file, set()).add(f.code)
            tally.alarm_lines.append(f"{f.file}: {f.code} {f.message} (expected {f.expected})")
        else:
            tally.contract_codes[f.code] += 1
    tally.shards = len(fresh)
    tally.alarms = len(per_file) if not tally.contract_codes else len(fresh)
    for codes in per_file.values():
        tally.codes.update(codes)
    return tally


def _kind(note: str) -> str:
    """The mutation class an EC801 note names, for the not-sharp tally."""
    for word in note.replace(":", " ").split():
        if "-" in word and word[0].isalpha() and word.islower():
            return word
    return ""


def stated_rate(text: str) -> float:
    """The false-alarm rate a drafted contract states for itself (NaN: it states none)."""
    import re

    found = re.search(r"estimated false alarms: (?:fewer than )?1 in ([\d,]+)", text, re.I)
    if found is None:
        return float("nan")
    return 1 / float(found[1].replace(",", ""))


# -- the table -----------------------------------------------------------------------------


def table(rows: dict[tuple[str, str, str], Tally]) -> str:
    import math

    head = (
        "scenario  format          mode      contracts  not sharp  ref.capture  "
        "fresh shards  false alarms  by code            rate        stated (mean)"
    )
    lines = [head, "-" * len(head)]
    for (scenario, fmt, mode), t in rows.items():
        codes = ",".join(f"{c}:{n}" for c, n in sorted((t.codes + t.contract_codes).items()))
        rate = f"{t.alarms / t.shards:.2e}" if t.shards else "-"
        if t.shards and not t.alarms:
            rate = f"0 (<{3 / t.shards:.1e})"  # the rule of three: 95 % upper bound
        known = [x for x in t.stated if not math.isnan(x)]
        stated = f"{sum(known) / len(known):.1e}" if known else "-"
        lines.append(
            f"{scenario:9s} {fmt:15s} {mode:9s} {t.contracts:9d}  {t.not_sharp:9d}  "
            f"{t.reference:11d}  {t.shards:12d}  {t.alarms:12d}  {codes or '-':17s}  "
            f"{rate:10s}  {stated}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contracts", type=int, default=10, help="contract seeds per row")
    parser.add_argument("--draft", type=int, default=10, help="trusted shards per contract")
    parser.add_argument("--fresh", type=int, default=100, help="fresh shards per contract")
    parser.add_argument("--formats", nargs="+", default=list(FORMATS), choices=FORMATS)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    parser.add_argument("--first", type=int, default=0, help="first contract seed")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--notes", action="store_true", help="why drafts were not sharp")
    parser.add_argument("--show", action="store_true", help="print every false alarm")
    args = parser.parse_args(argv)
    os.environ["EAGLE_CONTRACT_SHARPNESS_CACHE"] = "off"  # never a cache in the user's home
    started = time.perf_counter()
    rows: dict[tuple[str, str, str], Tally] = {
        (s, f, m): Tally() for s in args.scenarios for f in args.formats for m in args.modes
    }
    with tempfile.TemporaryDirectory(prefix="false-alarms-targets-") as tmp:
        targets = {s: build_target(s, Path(tmp)) for s in args.scenarios}
        jobs = [
            (s, targets[s], c, args.draft, args.fresh, tuple(args.formats), tuple(args.modes))
            for s in args.scenarios
            for c in range(args.first, args.first + args.contracts)
        ]
        if args.workers > 1:
            from pytest_eagle_contract.pool import executor, imap

            with executor(min(args.workers, len(jobs))) as pool:
                results = [(job, future.result()) for job, future in imap(run_job, jobs, pool)]
        else:
            results = [(job, run_job(job)) for job in jobs]
    for job, result in results:
        for key, tally in result.items():
            fmt, mode = key.split("|")
            tally.alarm_lines = [f"contract seed {job[2]}: {x}" for x in tally.alarm_lines]
            rows[(job[0], fmt, mode)].add(tally)
    print(
        f"drafted from {args.draft} shards, {args.fresh} fresh shards per contract, "
        f"contract seeds {args.first}..{args.first + args.contracts - 1}"
    )
    print(table(rows))
    if args.notes:
        for key, t in rows.items():
            for note, n in t.notes.most_common():
                print(f"{'/'.join(key)}: not sharp x{n}: {note}")
    if args.show:
        for key, t in rows.items():
            for line in t.alarm_lines:
                print(f"{'/'.join(key)}: {line}")
    print(f"{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
