"""The vocabulary family: d2t/t2d provenance and coverage of the shards' loss-masked tokens.

The maps are built as SpecForge and speculators build them (the most frequent loss-masked
target ids, sorted; ``d2t[i] = target_id - i``; ``t2d`` a bool mask), in code here: neither
trainer installs on this machine without a GPU stack."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from serving_cases import tiny_contract

from pytest_eagle_contract.checks.vocabulary import check_vocabulary, d2t_sha256
from pytest_eagle_contract.contract.model import load_contract
from pytest_eagle_contract.shards.writing import write_shard

H, V, N = 16, 300, 64  # hidden, target vocabulary, draft vocabulary

SLOTS = ["residual:2", "residual:4", "residual:6", "final_norm"]


def contract_text(draft: str, extra: str) -> str:
    """The tiny target's contract (SpecForge shards under shards), the draft's keys ``draft``,
    served by SGLang from the draft folder; ``extra``, top-level sections after."""
    text = tiny_contract("tiny", SLOTS, "sglang", None, size=(H, V), draft=draft)
    return text + "  draft_config: draft\n" + extra


def build_maps(counts: Counter[int], n: int = N) -> tuple[torch.Tensor, torch.Tensor]:
    """d2t/t2d as SpecForge's generate_vocab_mapping_file and speculators'
    build_vocab_mappings_from_distribution make them."""
    chosen = sorted(counts, key=lambda t: (-counts[t], t))[:n]
    for filler in range(n):  # too few counted ids: 0, 1, ... fill the rest
        if len(chosen) >= n:
            break
        if filler not in chosen:
            chosen.append(filler)
    chosen.sort()
    d2t = torch.tensor(chosen, dtype=torch.long) - torch.arange(n)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[chosen] = True
    return d2t, t2d


def shards(root: Path, rows: list[list[int]]) -> Counter[int]:
    """SpecForge shards of ``rows`` (the second half of each is loss-masked); their counts."""
    counts: Counter[int] = Counter()
    g = torch.Generator().manual_seed(0)
    for i, row in enumerate(rows):
        ids = torch.tensor(row)
        mask = torch.zeros(len(row), dtype=torch.long)
        mask[len(row) // 2 :] = 1
        counts.update(ids[mask == 1].tolist())
        states = [torch.randn(len(row), H, generator=g) for _ in range(4)]
        write_shard(root, "specforge", i, ids, mask, states)
    return counts


def draft(folder: Path, d2t: torch.Tensor, t2d: torch.Tensor) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    save_file(
        {"d2t": d2t, "t2d": t2d, "fc.weight": torch.zeros(H, 3 * H)}, folder / "m.safetensors"
    )


def setup(tmp_path: Path, draft_keys: str = "    {}", extra: str = "", maps=None):
    g = torch.Generator().manual_seed(1)
    rows = [torch.randint(0, 40, (32,), generator=g).tolist() for _ in range(4)]
    counts = shards(tmp_path / "shards", rows)
    d2t, t2d = maps(counts) if maps else build_maps(counts)
    draft(tmp_path / "draft", d2t, t2d)
    (tmp_path / "c.yaml").write_text(contract_text(draft_keys, extra))
    contract = load_contract(tmp_path / "c.yaml")
    paths = sorted((tmp_path / "shards").rglob("*.ckpt"))
    assert paths
    return contract, paths, d2t


def codes(found) -> list[tuple[str, str]]:
    return sorted((f.code, f.severity) for f in found)


def test_the_map_built_from_the_shards_covers_them(tmp_path):
    c, paths, d2t = setup(tmp_path)
    sha = d2t_sha256(d2t.numpy())
    assert sha == hashlib.sha256(d2t.numpy().astype("<i8").tobytes()).hexdigest()
    found = check_vocabulary(tmp_path / "draft", contract=c, shard_paths=paths)
    assert codes(found) == [("EC932", "warning")] and sha in found[0].hint  # no provenance
    c, paths, _ = setup(tmp_path, f"    d2t_sha256: {sha}")
    assert check_vocabulary(tmp_path / "draft", contract=c, shard_paths=paths) == []


def test_a_map_from_another_corpus_is_ec933(tmp_path):
    # speculators#1081: a stale cache's map, consistent with itself, wrong for this data
    other = Counter(range(200, 300))
    c, paths, _ = setup(tmp_path, "    min_vocab_coverage: 0.9", maps=lambda _: build_maps(other))
    found = check_vocabulary(tmp_path / "draft", contract=c, shard_paths=paths)
    assert ("EC933", "error") in codes(found)
    assert "0.0%" in next(f.message for f in found if f.code == "EC933")


def test_a_low_floor_passes_a_narrow_map(tmp_path):
    # a map holding the 10 most frequent ids of 40: below the 95% default, above 0.2
    def narrow(counts):
        return build_maps(Counter(dict(counts.most_common(10))), n=10)

    c, paths, _ = setup(tmp_path, "    min_vocab_coverage: 0.9", maps=narrow)
    assert ("EC933", "error") in codes(
        check_vocabulary(tmp_path / "draft", contract=c, shard_paths=paths)
    )
    c, paths, _ = setup(tmp_path, "    min_vocab_coverage: 0.2", maps=narrow)
    assert ("EC933", "error") not in codes(
        check_vocabulary(tmp_path / "draft", contract=c, shard_paths=paths)
    )


def test_with_no_floor_recorded_the_default_warns_and_only_a_gross_miss_fails(tmp_path):
    # a correct map's coverage is its pipeline's (84 % in benchmarks/false_alarms_seams.py):
    # the 0.95 default says so and asks for the floor; below half it is an error
    def keep(top):
        return lambda counts: build_maps(Counter(dict(counts.most_common(top))), n=top)

    c, paths, _ = setup(tmp_path, maps=keep(20))
    found = check_vocabulary(tmp_path / "draft", contract=c, shard_paths=paths)
    ec933 = next(f for f in found if f.code == "EC933")
    share = float(ec933.found)
    assert ec933.severity == "warning" and 0.5 <= share < 0.95, share
    assert "the default 95%" in ec933.message and "min_vocab_coverage" in ec933.hint
    c, paths, _ = setup(tmp_path, maps=keep(3))
    found = check_vocabulary(tmp_path / "draft", contract=c, shard_paths=paths)
    ec933 = next(f for f in found if f.code == "EC933")
    assert ec933.severity == "error" and float(ec933.found) < 0.5, ec933.found


def test_a_rebuilt_map_is_ec931(tmp_path):
    c, _paths, _ = setup(tmp_path, '    d2t_sha256: "' + "0" * 64 + '"')
    found = check_vocabulary(tmp_path / "draft", contract=c, shard_paths=())
    assert codes(found) == [("EC931", "error")]


def test_a_map_of_another_tokenizer_is_ec930(tmp_path):
    extra = "tokenizer:\n  files_sha256: " + "a" * 64 + "\n"
    c, _paths, _ = setup(tmp_path, "    vocab_tokenizer_sha256: " + "b" * 64, extra)
    assert codes(check_vocabulary(tmp_path / "draft", contract=c)) == [("EC930", "error")]
    c, _paths, _ = setup(tmp_path, "    vocab_tokenizer_sha256: " + "a" * 64, extra)
    assert check_vocabulary(tmp_path / "draft", contract=c) == []


def test_an_eos_outside_the_map_is_ec934(tmp_path):
    # the data trains on EOS (id 39 here), the map was built without it
    def without_eos(counts):
        return build_maps(Counter({t: n for t, n in counts.items() if t != 39}), n=30)

    sha = "    min_vocab_coverage: 0.5"
    extra = "tokenizer:\n  eos_token_id: 39\n"
    c, paths, _ = setup(tmp_path, sha, extra, maps=without_eos)
    found = check_vocabulary(tmp_path / "draft", contract=c, shard_paths=paths)
    assert ("EC934", "error") in codes(found) and "39 (eos token)" in found[-1].message
    c, paths, _ = setup(tmp_path, sha, extra)
    assert ("EC934", "error") not in codes(
        check_vocabulary(tmp_path / "draft", contract=c, shard_paths=paths)
    )


def test_no_maps_and_unreadable_inputs(tmp_path):
    (tmp_path / "draft").mkdir()
    assert check_vocabulary(tmp_path / "draft", contract=None) == []  # the whole vocabulary
    (tmp_path / "draft" / "m.safetensors").write_bytes(b"\x00" * 7)
    found = check_vocabulary(tmp_path / "draft", contract=None)
    assert [f.code for f in found] == ["EC009"]
    c, _paths, _ = setup(tmp_path / "x")
    (tmp_path / "bad.ckpt").write_bytes(b"not a shard")
    found = check_vocabulary(
        tmp_path / "x" / "draft", contract=c, shard_paths=[tmp_path / "bad.ckpt"]
    )
    assert "EC009" in [f.code for f in found]


def byte_level_tokenizer(folder: Path) -> dict[str, int]:
    """A byte-level BPE tokenizer.json (GPT-2's alphabet), saved by ``tokenizers``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=V,
        special_tokens=["<|eot|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(["the draft drafts the tokens " * 20], trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    vocab: dict[str, int] = tok.get_vocab()
    return vocab


def test_byte_tokens_outside_the_map_are_ec935(tmp_path):
    vocab = byte_level_tokenizer(tmp_path / "tok")
    byte_ids = sorted(i for t, i in vocab.items() if len(t) == 1)[:40]
    merged = sorted(i for t, i in vocab.items() if len(t) > 1 and i < V)
    assert len(byte_ids) == 40 and merged

    def without_bytes(counts):
        return build_maps(Counter({t: 1 for t in merged}), n=len(merged))

    g = torch.Generator().manual_seed(1)
    rows = [[byte_ids[int(k)] for k in torch.randint(0, 40, (32,), generator=g)] for _ in range(2)]
    rows += [[merged[k % len(merged)] for k in range(32)] for _ in range(2)]
    counts = shards(tmp_path / "shards", rows)
    extra = "tokenizer:\n  path: tok\n"
    keys = "    min_vocab_coverage: 0.1"
    for maps, want in ((without_bytes, True), (build_maps, False)):
        d2t, t2d = maps(counts)
        draft(tmp_path / "draft", d2t, t2d)
        (tmp_path / "c.yaml").write_text(contract_text(keys, extra))
        c = load_contract(tmp_path / "c.yaml")
        paths = sorted((tmp_path / "shards").rglob("*.ckpt"))
        found = check_vocabulary(tmp_path / "draft", contract=c, shard_paths=paths)
        assert (("EC935", "warning") in codes(found)) is want, found


def test_a_character_level_vocabulary_has_no_byte_tokens(tmp_path):
    """Single characters of a vocabulary that lacks byte-level BPE's full 256-character
    alphabet are ordinary tokens: a map without them is EC933's business (coverage), never
    EC935's (the false alarm this guards: every letter of a small WordLevel vocabulary was
    called a byte token)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("!?.,")
    words = ["the", "draft", "tokens"]
    vocab = {t: i for i, t in enumerate(["<unk>", *letters, *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    (tmp_path / "tok").mkdir()
    tok.save(str(tmp_path / "tok" / "tokenizer.json"))
    single = [vocab[t] for t in letters]
    g = torch.Generator().manual_seed(2)
    rows = [[single[int(k)] for k in torch.randint(0, len(single), (32,), generator=g)]]
    rows += [[vocab[w] for w in words] * 10 for _ in range(3)]
    counts = shards(tmp_path / "shards", rows)
    kept = [vocab[w] for w in words]
    d2t, t2d = build_maps(Counter({t: 1 for t in kept}), n=len(kept))
    draft(tmp_path / "draft", d2t, t2d)
    (tmp_path / "c.yaml").write_text(
        contract_text("    min_vocab_coverage: 0.9", "tokenizer:\n  path: tok\n")
    )
    c = load_contract(tmp_path / "c.yaml")
    paths = sorted((tmp_path / "shards").rglob("*.ckpt"))
    found = check_vocabulary(tmp_path / "draft", contract=c, shard_paths=paths)
    assert counts and "EC935" not in {f.code for f in found}, found
    assert any(f.code == "EC933" for f in found), found  # the letters are missed all the same


def test_a_d2t_far_outside_the_vocabulary_allocates_nothing(tmp_path):
    # found by the hostile sweep: i + d2t[i] near 1e12 once made a bool array that long
    c, paths, _ = setup(tmp_path, "    min_vocab_coverage: 0.5")
    save_file({"d2t": torch.full((N,), 10**12)}, tmp_path / "draft" / "m.safetensors")
    found = check_vocabulary(tmp_path / "draft", contract=c, shard_paths=paths)
    assert ("EC933", "error") in codes(found)


@pytest.mark.slow
def test_cli_checks_vocabulary(tmp_path):
    def other(_):
        return build_maps(Counter(range(200, 300)))

    setup(tmp_path, maps=other)
    argv = ["check", str(tmp_path / "c.yaml"), "--checks", "vocabulary"]
    res = subprocess.run(
        [sys.executable, "-m", "pytest_eagle_contract", *argv],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 1, res.stderr
    assert "EC933" in res.stdout and "EC932" in res.stdout


def test_coverage_is_of_the_shards_the_command_names(tmp_path):
    """Issue 37 item 1: the map covers the contract's own shards; the folder the command
    names holds other ids (EC933), and a folder of no shard is said, not passed (EC009)."""
    setup(tmp_path, "    min_vocab_coverage: 0.9")  # the map: built from tmp_path/shards
    g = torch.Generator().manual_seed(2)
    shards(tmp_path / "other", [torch.randint(200, 300, (32,), generator=g).tolist()] * 2)
    (tmp_path / "empty").mkdir()

    def check(*paths: Path) -> subprocess.CompletedProcess[str]:
        argv = ["check", str(tmp_path / "c.yaml"), *map(str, paths), "--checks", "vocabulary"]
        return subprocess.run(
            [sys.executable, "-m", "pytest_eagle_contract", *argv], capture_output=True, text=True
        )

    own = check()
    assert own.returncode == 0 and "EC933" not in own.stdout, own.stdout + own.stderr
    named = check(tmp_path / "other")
    assert named.returncode == 1 and "EC933" in named.stdout, named.stdout + named.stderr
    empty = check(tmp_path / "empty")
    assert empty.returncode == 0, empty.stdout + empty.stderr
    assert "EC009" in empty.stdout and "no shard files under" in empty.stdout, empty.stdout
    assert empty.stdout.strip().splitlines()[0].startswith("passed, incomplete")
