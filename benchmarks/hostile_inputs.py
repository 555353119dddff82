"""The hostile inputs of benchmarks/hostile_sweep.py, made in code, one folder each: shards,
contracts, target model folders, capture files, server answers (the SGLang stand-in of
tests/sglang_standin.py) and output paths. Most come from the regression cases of
tests/hostile/test_hostile_*.py; the rest are seeded random edits and contents."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import random
import shutil
import struct
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import kinds  # noqa: E402  (the test folders: the hostile tests' cases are reused)

sys.path.extend(kinds.folders())

import torch  # noqa: E402


@dataclass
class Case:
    surface: str
    name: str
    folder: Path
    argv: list[str]
    server: Callable[[], contextlib.AbstractContextManager[str]] | None = None  # {url}
    verify: Callable[[Path], str] | None = None  # what is missing afterwards ("" for nothing)
    # the matrix (benchmarks/hostile_matrix.py): the row's family and shell, the families
    # the run executes, folders outside ``folder`` it reads (checked unchanged too), and a
    # timeout of its own
    family: str = ""
    shell: str = "cli"
    covers: frozenset[str] = frozenset()
    watch: tuple[Path, ...] = ()
    timeout: float | None = None
    # the matrix's fs class (issue 41): the run's environment (None: unset), whether it runs
    # as an unprivileged user (tests/unprivileged.py) and the exit codes a normal run gives
    env: dict[str, str | None] = field(default_factory=dict)
    unprivileged: bool = False
    expect: tuple[int, ...] = ()


class _Payload:
    """Unpickling it creates PAYLOAD_RAN in the working folder."""

    def __init__(self, how: str) -> None:
        self.how = how

    def __reduce__(self) -> tuple[Any, ...]:
        if self.how == "exec":
            return (exec, ("open('PAYLOAD_RAN', 'w').close()",))
        if self.how == "system":
            return (os.system, ("touch PAYLOAD_RAN",))
        return (open, ("PAYLOAD_RAN", "w"))


def _random_tensor(rng: random.Random, rows: bool = False) -> torch.Tensor:
    dtypes = [
        torch.int64, torch.int32, torch.uint8, torch.uint16, torch.uint32, torch.uint64,
        torch.bool, torch.float32, torch.float16, torch.bfloat16, torch.float64,
        torch.float8_e4m3fn, torch.float8_e5m2, torch.complex64,
    ]  # fmt: skip
    sizes = [0, 1, 3, 12, 64, 192]
    shape = [rng.choice(sizes)] if rows else [rng.choice(sizes) for _ in range(rng.randint(0, 4))]
    fill = rng.choice([0.0, 1.0, -1.0, 511.0, 1e30, float("nan"), float("inf"), 0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = torch.full(shape, fill, dtype=torch.float64)
        if t.numel() and rng.random() < 0.5:
            t = t + torch.arange(t.numel(), dtype=torch.float64).reshape(shape)
        t = t.to(rng.choice(dtypes))
    if rng.random() < 0.1:
        return torch.nn.Parameter(t.float(), requires_grad=True)
    return t


def _random_shard(rng: random.Random) -> dict[Any, Any]:
    layouts = [
        ("input_ids", "loss_mask", "aux_hidden_state", "hidden_state"),
        ("input_ids", "loss_mask", "hidden_states"),
        ("input_ids", "hidden_state", "loss_mask"),
        ("id", "input_ids", "hidden_state", "aux_hidden_states"),
    ]
    out: dict[Any, Any] = {}
    for key in rng.choice(layouts):
        if rng.random() < 0.15:
            continue
        kind = rng.random()
        if key in ("input_ids", "loss_mask") and kind < 0.6:
            out[key] = _random_tensor(rng, rows=True)
        elif kind < 0.7:
            out[key] = _random_tensor(rng)
        elif kind < 0.85:
            out[key] = [_random_tensor(rng) for _ in range(rng.randint(0, 4))]
        else:
            out[key] = rng.choice([3, "x", None, 1.5, {"a": torch.zeros(2)}, [1, "a", None]])
    if rng.random() < 0.2:
        out[rng.choice([7, -1, "zz", ""])] = torch.zeros(3)
    return out


CKPT = "rows_0-2000/data_0.ckpt"  # the bad shard's place under shards/


def saved(obj: Any) -> bytes:
    """``obj`` as torch.save writes it."""
    with tempfile.TemporaryFile() as f:
        torch.save(obj, f)
        f.seek(0)
        return f.read()


def _shard_inputs(rng: random.Random) -> Iterator[tuple[str, str, bytes]]:
    """(name, file name under shards/, bytes)."""
    import test_hostile_shards as hs

    for name, (shard, _) in hs.CASES.items():
        yield name, CKPT, saved(shard)
    for how in ("exec", "system", "open"):
        yield f"payload {how}", CKPT, saved({**hs.good(), "input_ids": _Payload(how)})
    member = gzip.compress(bytes(64 << 20), compresslevel=9)
    yield "gzip bomb 3 GiB", "rows_0-2000/data_0.ckpt.gz", member * 48
    yield "gzip truncated", "rows_0-2000/data_0.ckpt.gz", gzip.compress(saved(hs.good()))[:-40]
    good = saved(hs.good())
    for i in range(8):
        yield f"truncated {i}", CKPT, good[: rng.randrange(1, len(good))]
    for i in range(8):
        data = bytearray(good)
        for _ in range(rng.randint(1, 16)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        yield f"flipped bytes {i}", CKPT, bytes(data)
    for i in range(40):
        name = rng.choice([CKPT, "rows_0-2000/data_0.ckpt.gz", "data_0.pt"])
        data = saved(_random_shard(rng))
        yield f"random {i}", name, gzip.compress(data) if name.endswith(".gz") else data
    for i in range(10):
        header = {
            rng.choice(["hidden_states", "token_ids", "x", ""]): {
                "dtype": rng.choice(["F32", "BF16", "I64", "U16", "F8_E4M3", "Q4", 5]),
                "shape": [rng.choice([0, 1, 12, 2**40, -1]) for _ in range(rng.randint(0, 3))],
                "data_offsets": [0, rng.choice([0, 8, 2**62])],
            }
            for _ in range(rng.randint(1, 3))
        }
        text = json.dumps(header).encode()
        blob = struct.pack("<Q", rng.choice([len(text), len(text) + 9, 2**63])) + text
        yield f"safetensors header {i}", "hidden_states/hs_0.safetensors", blob + bytes(64)


def shard_cases(root: Path, rng: random.Random) -> list[Case]:
    import test_hostile_shards as hs

    cases = []
    for i, (name, rel, data) in enumerate(_shard_inputs(rng)):
        folder = root / "shards" / f"{i:03d}"
        shard = folder / "shards" / rel
        shard.parent.mkdir(parents=True)
        shard.write_bytes(data)
        torch.save(hs.good(), shard.parent / "data_1.ckpt")  # checked after the bad one
        (folder / "out").mkdir()
        (folder / "contract.yaml").write_text(hs.CONTRACT_TEXT, "utf-8")
        check = ["check", "contract.yaml", "--sample", "all", "--no-sharpness"]
        verify = _each_shard_judged(Path(rel).name, "data_1.ckpt")
        cases += [
            Case(
                "shards", f"check: {name}", folder, [*check, "--json", "out/r.json"], None, verify
            ),
            Case("shards", f"inspect: {name}", folder, ["inspect", str(shard.relative_to(folder))]),
            Case("shards", f"infer: {name}", folder, ["infer", "shards", "--num-layers", "8"]),
        ]
    return cases


def _each_shard_judged(bad: str, good: str) -> Callable[[Path], str]:
    """The run went on: a finding for the bad shard, and the good one was checked too."""

    def verify(folder: Path) -> str:
        try:
            data = json.loads((folder / "out" / "r.json").read_text("utf-8"))
        except (OSError, ValueError):
            return "no report"
        if not any(str(f.get("file", "")).endswith(bad) for f in data["findings"]):
            return f"no finding for {bad}"
        if not any(str(u.get("shard", "")).endswith(good) for u in data["units"]):
            return f"{good} was not checked"
        return ""

    return verify


_NASTY = [
    "!!python/object/apply:os.system ['touch PAYLOAD_RAN']", "!!python/name:os.system",
    "*nowhere", "&a [*a]", "1e999", ".nan", "-1", str(2**40), str(2**70), "16.0", "[" * 300,
    "\x00", "\t", "'", "{", "---", "<<: {a: 1}", "!!binary aGVsbG8=", "\ud800",
    "residual:99999999", "[]", "{}", "null", "true",
]  # fmt: skip


def _mutated(rng: random.Random, text: str) -> bytes:
    lines = text.splitlines(keepends=True)
    for _ in range(rng.randint(1, 3)):
        how, i = rng.randrange(5), rng.randrange(len(lines))
        if how == 0:
            del lines[i]
        elif how == 1:
            lines.insert(i, lines[i])
        elif how == 2 and ":" in lines[i]:
            head = lines[i].split(":", 1)[0]
            lines[i] = f"{head}: {rng.choice(_NASTY)}\n"
        elif how == 3:
            lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
        else:
            lines.insert(i, " " * rng.randrange(8) + rng.choice(_NASTY) + "\n")
    data = bytearray("".join(lines).encode("utf-8", "surrogatepass"))
    if rng.random() < 0.2 and data:
        data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


def contract_cases(root: Path, rng: random.Random) -> list[Case]:
    import test_hostile_contracts as hc
    import test_hostile_shards as hs

    texts = [(name, data) for name, (data, _) in hc.CASES.items()]
    texts += [(f"edited {i}", _mutated(rng, hc.VALID)) for i in range(30)]
    texts += [(f"edited demo {i}", _mutated(rng, hs.CONTRACT_TEXT)) for i in range(30)]
    cases = []
    for i, (name, data) in enumerate(texts):
        folder = root / "contracts" / f"{i:03d}"
        (folder / "shards" / "rows_0-2000").mkdir(parents=True)
        torch.save(hs.good(), folder / "shards" / "rows_0-2000" / "data_0.ckpt")
        (folder / "c.yaml").write_bytes(data)
        argv = ["check", "c.yaml", "--sharpness"] if i % 2 else ["check", "c.yaml", "shards"]
        cases.append(Case("contracts", name, folder, argv))
    return cases


def model_cases(root: Path) -> list[Case]:
    import test_hostile_models as hm

    from pytest_eagle_contract.models.tiny import tiny_target
    from pytest_eagle_contract.shards.writing import write_shard

    base = root / "models" / "base"
    tiny_target(hm.SPEC).save_pretrained(base / "model")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, hm.SPEC.vocab_size, (24,), generator=g)
    states = [torch.randn(24, hm.SPEC.hidden_size, generator=g).bfloat16() for _ in range(3)]
    shard = write_shard(base / "shards", "speculators-v1", 0, ids, torch.ones(24).long(), states)
    changes = {
        **{k: v[0] for k, v in hm.CASES.items()},
        **{k: v[0] for k, v in hm.OPEN_CASES.items()},
    }
    cases = []
    for i, (name, change) in enumerate(changes.items()):
        folder = root / "models" / f"{i:03d}"
        shutil.copytree(base, folder)
        change(folder / "model")
        rel = str(shard.relative_to(base))
        cases.append(Case("models", name, folder, ["identify", rel, "--target-model", "model"]))
    return cases


def demo_world(root: Path) -> tuple[Path, Path, dict[str, Any]]:
    """A demo shard, the shipped contract, and what tests/hostile/test_hostile_captures.py's cases
    are made from."""
    from pytest_eagle_contract.capture.files import CaptureMeta, write_capture
    from pytest_eagle_contract.shards.discovery import discover
    from pytest_eagle_contract.shards.shard import Shard
    from pytest_eagle_contract.shells.demo import shipped_contract, write_demo_shards

    good, _ = write_demo_shards(root / "demo", shards=1)
    (path,) = discover(good)
    shard = Shard.load(path, path.name, "specforge", 64)
    aux = torch.cat([shard.slots[i].tensor for i in (0, 1, 2)], dim=-1)
    meta = CaptureMeta(layer_ids=(1, 3, 4), arch="LlamaForCausalLM", version="0.5.23")
    valid = write_capture(root / "valid", shard.sample.input_ids, aux, meta)
    import test_hostile_captures as hcap

    world = {
        "bytes": valid.read_bytes(),
        "aux": aux,
        "ids": shard.sample.input_ids,
        "meta": json.loads(CaptureMeta.from_json(hcap._meta_of(valid)).to_json()),
    }
    return path, Path(shipped_contract()), world


def capture_cases(root: Path, world: tuple[Path, Path, dict[str, Any]]) -> list[Case]:
    import test_hostile_captures as hcap

    shard, contract, data = world
    cases = []
    for i, (name, case) in enumerate(hcap._cases(data).items()):
        folder = root / "captures" / f"{i:03d}"
        (folder / "captures").mkdir(parents=True)
        shutil.copyfile(shard, folder / "data_0.ckpt")
        shutil.copyfile(contract, folder / "c.yaml")
        (folder / "c.yaml").write_text(
            (folder / "c.yaml").read_text().replace("../eagle-demo/good", "."), "utf-8"
        )
        hcap._write_case(data, folder / "captures", name, case)
        argv = ["check", "c.yaml", "data_0.ckpt", "--captures", "captures", "--checks", "capture"]
        cases.append(Case("captures", name, folder, argv))
    return cases


def vllm_file_cases(root: Path) -> list[Case]:
    """One hostile vLLM hidden-state file per case (tests/hostile/test_hostile_vllm_files.py),
    given to ``record --vllm-files`` beside the shipped contract: EC707 or exit 2, never a
    traceback."""
    import test_hostile_vllm_files as hv

    from pytest_eagle_contract.shells.demo import shipped_contract

    made = {**{n: (lambda p, d=d: p.write_bytes(d)) for n, d in hv.cases().items()}, **hv.SPECIAL}
    cases = []
    for i, (name, make) in enumerate(made.items()):
        folder = root / "vllm-files" / f"{i:03d}"
        (folder / "vllm").mkdir(parents=True)
        shutil.copyfile(shipped_contract(), folder / "c.yaml")
        make(folder / "vllm" / "cmpl-0.safetensors")
        argv = ["record", "c.yaml", "--vllm-files", "vllm", *hv.LAUNCH, "-o", "caps"]
        cases.append(Case("vllm-files", name, folder, argv))
    return cases


def gguf_cases(root: Path, rng: random.Random) -> list[Case]:
    """One hostile GGUF draft per case (tests/release/test_llamacpp.py's HOSTILE_GGUF, then random
    byte flips of a good one), given to ``resolve --engine llama.cpp --draft-config``: exit 2
    naming the file, never a traceback."""
    import test_llamacpp as tl

    good = root / "gguf-good.gguf"
    tl.gguf(good, [("eagle3.target_layers", tl._ARRAY, (tl._INT32, [2, 16, 29]))])
    data = good.read_bytes()
    made = dict(tl.HOSTILE_GGUF.items())
    for n in range(8):
        flipped = bytearray(data)
        for _ in range(3):
            flipped[rng.randrange(4, len(flipped))] = rng.randrange(256)
        made[f"flipped-{n}"] = (lambda p, b=bytes(flipped): p.write_bytes(b), "")
    cases = []
    for i, (name, (make, _)) in enumerate(made.items()):
        folder = root / "gguf" / f"{i:03d}"
        folder.mkdir(parents=True)
        make(folder / "draft.gguf")
        argv = ["resolve", "--engine", "llama.cpp", "--num-layers", "32"]
        cases.append(Case("gguf", name, folder, [*argv, "--draft-config", "draft.gguf"]))
    return cases


DRAFT_CONTRACT = """\
contract: hostile-draft
version: 1
target: {arch: LlamaForCausalLM, num_hidden_layers: 8, hidden_size: 16, vocab_size: 64}
training:
  format: specforge
  shards: shards
  slots: [{layer: "residual:2"}, {layer: "residual:4"}, {layer: "residual:6"}, {layer: final_norm}]
  draft: {rope_theta: 1000000.0, max_position_embeddings: 4096, fc_norm: false}
serving: {engine: sglang, version: "0.5.9", draft_config: draft, context_length: 8192}
"""


def _tiny_shard(folder: Path, g: torch.Generator, vocab: int) -> None:
    """One 16-token SpecForge shard with zero states (H=16, three aux) under
    ``folder/shards``: what a contract-level family reads beside its hostile input."""
    import torch

    ids = torch.randint(0, vocab, (16,), generator=g)
    shard = {"input_ids": ids, "loss_mask": torch.ones(16, dtype=torch.long)}
    shard |= {"hidden_state": torch.zeros(1, 16, 16), "aux_hidden_state": torch.zeros(1, 16, 48)}
    (folder / "shards" / "rows_0-2000").mkdir(parents=True)
    torch.save(shard, folder / "shards" / "rows_0-2000" / "data_0.ckpt")


def draft_config_cases(root: Path, rng: random.Random) -> list[Case]:
    """One hostile draft folder per case (tests/unit/test_draft_config.py's bad configs, then
    random edits of a good config.json, then broken d2t/t2d maps), given to ``check
    --checks draft-config,vocabulary``: a finding or exit 2, never a traceback."""
    from safetensors.torch import save_file

    good = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": 16,
        "num_attention_heads": 2,
        "max_position_embeddings": 2048,
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0},
        "layer_types": ["sliding_attention"],
        "sliding_window": 512,
        "transformers_version": "5.0.0",
    }
    text = json.dumps(good, indent=2)
    configs: dict[str, bytes] = {
        "not-json": b"{not json",
        "array": b"[1, 2]",
        "theta-string": b'{"rope_theta": "1e6"}',
        "theta-nan": b'{"rope_theta": NaN}',
        "theta-huge": b'{"rope_theta": 1e400, "max_position_embeddings": 99999999999999999999}',
        "scaling-list": b'{"rope_scaling": [1, 2]}',
        "params-string": b'{"rope_parameters": "yarn"}',
        "type-number": b'{"rope_scaling": {"rope_type": 7}}',
        "layer-types-int": b'{"layer_types": 5, "sliding_window": 4}',
        "window-negative": b'{"sliding_window": -1, "layer_types": ["sliding_attention"]}',
        "flag-string": b'{"fc_norm": "yes"}',
        "deep": b"[" * 100000 + b"]" * 100000,
        "latin1": text.encode("utf-16"),
        "speculators-inner-list": b'{"speculators_config": {}, "transformer_layer_config": []}',
    }
    for n in range(6):
        configs[f"mutated-{n}"] = _mutated(rng, text)
    g = torch.Generator().manual_seed(0)
    maps: dict[str, dict[str, torch.Tensor]] = {
        "d2t-float": {"d2t": torch.rand(8, generator=g), "t2d": torch.ones(64, dtype=torch.bool)},
        "d2t-2d": {"d2t": torch.zeros(2, 4, dtype=torch.long)},
        "d2t-out-of-range": {"d2t": torch.full((8,), 10**12, dtype=torch.long)},
        "d2t-negative": {"d2t": torch.full((8,), -(10**12), dtype=torch.long)},
        "t2d-empty": {"t2d": torch.zeros(0, dtype=torch.bool)},
        "t2d-int8": {"t2d": torch.randint(-3, 3, (64,), dtype=torch.int8, generator=g)},
    }
    cases = []
    made = [(name, data, None) for name, data in configs.items()]
    made += [(name, text.encode(), weights) for name, weights in maps.items()]
    made.append(("weights-garbage", text.encode(), b"\x08\x00\x00\x00\x00\x00\x00\x00{}"))
    for i, (name, config, weights) in enumerate(made):
        folder = root / "draft-config" / f"{i:03d}"
        (folder / "draft").mkdir(parents=True)
        (folder / "c.yaml").write_text(DRAFT_CONTRACT)
        (folder / "draft" / "config.json").write_bytes(config)
        if isinstance(weights, bytes):
            (folder / "draft" / "model.safetensors").write_bytes(weights)
        elif weights is not None:
            save_file(weights, str(folder / "draft" / "model.safetensors"))
        _tiny_shard(folder, g, vocab=64)
        argv = ["check", "c.yaml", "--checks", "draft-config,vocabulary"]
        cases.append(Case("draft-config", name, folder, argv))
    return cases


def doctor_cases(root: Path, rng: random.Random) -> list[Case]:
    """:func:`draft_config_cases`' hostile draft folders given to ``doctor --draft draft
    --contract c.yaml --json`` (every seam that needs no shards, with the contract's
    serving side): a seam's finding or exit 2, never a traceback."""
    import dataclasses

    argv = ["doctor", "--draft", "draft", "--contract", "c.yaml", "--json"]
    return [
        dataclasses.replace(case, surface="doctor", argv=argv)
        for case in draft_config_cases(root / "doctor", rng)
    ]


TOKENIZER_CONTRACT = """\
contract: hostile-tokenizer
version: 1
target: {num_hidden_layers: 8, hidden_size: 16, vocab_size: 512}
training:
  format: specforge
  shards: shards
  slots: [{layer: residual:2}, {layer: residual:4}, {layer: residual:5}, {layer: final_norm}]
tokenizer:
  path: tok
  conversations: conv.jsonl
  bos: once
  thinking: on
  think_token_ids: [3, 4]
  assistant_header: [2, 3]
"""

# Chat templates that fail, escape or run past a bound (models/chat_template.py's sandbox)
HOSTILE_TEMPLATES = {
    "template-raise": "{{ raise_exception('refused') }}",
    "template-nested-range": "{% for i in range(99999) %}{% for j in range(99999) %}"
    "{% endfor %}{% endfor %}",
    "template-huge-output": "{% for i in range(99999) %}{{ 'x' * 99999 }}{% endfor %}",
    "template-repeat": "{{ 'x' * 10**12 }}",
    "template-power": "{{ 10 ** 10 ** 10 }}",
    "template-recursion": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "template-escape": "{{ messages.__class__.__mro__[1].__subclasses__() }}",
    "template-mutate": "{{ messages.append(1) }}",
    "template-syntax": "{% if %}",
    "template-format": "{{ '{0:999999999}'.format(1) }}",
    "template-format-nested": "{{ '{:>{w}}'.format(1, w=10**9) }}",
    "template-format-map": "{{ '{x:.999999999f}'.format_map({'x': 1.0}) }}",
    "template-percent": "{{ '%*d' % (10**9, 1) }}",
    "template-ljust": "{{ 'x'.ljust(10**9) }}",
    "template-replace": "{{ ('x' * 4000000).replace('x', 'y' * 4000000) }}",
    "template-center-filter": "{{ 'x' | center(10**9) }}",
    "template-format-filter": "{{ '%999999999d' | format(1) }}",
    "template-join-filter": "{{ range(99999) | join('y' * 4000000) }}",
    "template-tojson-indent": "{{ messages | tojson(indent=10**9) }}",
}


def tokenizer_cases(root: Path, rng: random.Random) -> list[Case]:
    """One hostile tokenizer folder or conversations file per case, given to ``check
    --checks tokenizer,tokens,token-parity``: a finding or exit 2, never a traceback, a
    hang or a template's code outside the sandbox."""
    from tokenizer_data import LLAMA3, make_tokenizer

    good = make_tokenizer(root / "tokenizer-good", LLAMA3)
    raw = (good / "tokenizer.json").read_text()
    config = (good / "tokenizer_config.json").read_text()
    conv = json.dumps({"conversations": [{"role": "user", "content": "Hi"}]}) + "\n"
    folders: dict[str, dict[str, bytes | str]] = {
        "json-garbage": {"tokenizer.json": b"{not json"},
        "json-deep": {"tokenizer.json": b"[" * 100000 + b"]" * 100000},
        "json-array": {"tokenizer.json": b"[1, 2]"},
        "json-model-wrong": {"tokenizer.json": '{"model": {"type": "BPE", "vocab": 5}}'},
        "no-tokenizer-json": {"tokenizer.json": ""},
        "remote-code-only": {
            "tokenizer.json": "",
            "tokenizer_config.json": '{"auto_map": {"AutoTokenizer": ["x.X", null]}}',
        },
        "template-not-text": {"tokenizer_config.json": '{"chat_template": 7}'},
        "template-list": {"tokenizer_config.json": '{"chat_template": [{"name": 1}]}'},
        "special-dict": {"tokenizer_config.json": '{"bos_token": {"content": 5}}'},
        "conversations-garbage": {"conv.jsonl": bytes(rng.randrange(256) for _ in range(4096))},
        "conversations-deep": {"conv.jsonl": b"[" * 100000 + b"]" * 100000 + b"\n"},
        "conversations-roles": {"conv.jsonl": '{"messages": [{"role": 5, "content": []}]}\n'},
    }
    for name, template in HOSTILE_TEMPLATES.items():
        folders[name] = {"chat_template.jinja": template}
    for n in range(4):
        folders[f"tokenizer-mutated-{n}"] = {"tokenizer.json": _mutated(rng, raw)}
        folders[f"config-mutated-{n}"] = {"tokenizer_config.json": _mutated(rng, config)}
    cases = []
    g = torch.Generator().manual_seed(1)
    for i, (name, files) in enumerate(folders.items()):
        folder = root / "tokenizer" / f"{i:03d}"
        tok = folder / "tok"
        tok.mkdir(parents=True)
        for item in good.iterdir():
            (tok / item.name).write_bytes(item.read_bytes())
        (folder / "conv.jsonl").write_text(conv)
        for file, data in files.items():
            target = folder / file if file == "conv.jsonl" else tok / file
            if data == "":
                target.unlink()
            elif isinstance(data, bytes):
                target.write_bytes(data)
            else:
                target.write_text(data)
        (folder / "c.yaml").write_text(TOKENIZER_CONTRACT)
        _tiny_shard(folder, g, vocab=300)
        argv = ["check", "c.yaml", "--checks", "tokenizer,tokens,token-parity"]
        cases.append(Case("tokenizer", name, folder, argv))
    return cases


def http_cases(root: Path, world: tuple[Path, Path, dict[str, Any]]) -> list[Case]:
    import socketserver

    import test_hostile_http as hh
    from sglang_standin import Launch, SGLangStandin

    # the stand-in's own errors (a client that hung up at its cap) are not the CLI's
    socketserver.BaseServer.handle_error = lambda *_: None  # type: ignore[method-assign]

    shard, contract, _ = world
    faults: dict[str, tuple[str, Any]] = {
        **{f"generate {k}": ("/generate", f) for k, (f, _) in hh.GENERATE.items()},
        **{f"server_info {k}": ("/server_info", hh._answer(v)) for k, v in hh.SERVER_INFO.items()},
        **{f"model_info {k}": ("/model_info", hh._answer(v)) for k, v in hh.MODEL_INFO.items()},
        "server_info 5MB": (
            "/server_info",
            hh._answer({"version": "0.5.23", "pad": "x" * (5 << 20)}),
        ),
    }
    cases = []
    for i, (name, (where, fault)) in enumerate(faults.items()):
        folder = root / "http" / f"{i:03d}"
        folder.mkdir(parents=True)
        shutil.copyfile(shard, folder / "data_0.ckpt")

        def server(where: str = where, fault: Any = fault) -> Any:
            script = hh.Script({where: [fault]}, always=hh.LOOP)
            return SGLangStandin(Launch(mode="aux", layer_ids=[1, 3, 4], fault=script))

        argv = ["check", str(contract), "data_0.ckpt", "--checks", "capture"]
        argv += ["--sglang-url", "{url}", "--sglang-timeout", "5"]
        cases.append(Case("http", name, folder, argv, server))
    for name, fault in (("trickle", hh._trickle), ("silent", hh._hang)):
        folder = root / "http" / name
        folder.mkdir(parents=True)
        for k in range(3):  # one deadline for the run, not one per shard
            shutil.copyfile(shard, folder / f"data_{k}.ckpt")

        def dead(fault: Any = fault) -> Any:
            return SGLangStandin(Launch(fault=fault))

        argv = ["check", str(contract), ".", "--sample", "all", "--checks", "capture"]
        argv += ["--sglang-url", "{url}", "--sglang-timeout", "5"]
        cases.append(Case("http", name, folder, argv, dead))
    return cases


def output_cases(root: Path) -> list[Case]:
    import test_hostile_shards as hs

    def project(name: str) -> Path:
        folder = root / "outputs" / name
        (folder / "shards" / "rows_0-2000").mkdir(parents=True)
        torch.save(hs.good(), folder / "shards" / "rows_0-2000" / "data_0.ckpt")
        (folder / "contract.yaml").write_text(hs.CONTRACT_TEXT, "utf-8")
        (folder / "notes.txt").write_text("mine\n")
        return folder

    shard = "shards/rows_0-2000/data_0.ckpt"
    check = ["check", "contract.yaml", "--no-sharpness", "--sample", "all"]
    infer = ["infer", "shards", "--num-layers", "8"]
    asks = {
        "--json onto a shard": [*check, "--json", shard],
        "--json onto the contract": [*check, "--json", "contract.yaml"],
        "--json inside the shard folder": [*check, "--json", "shards/r.json"],
        "--json onto another file": [*check, "--json", "notes.txt"],
        "--json /dev/full": [*check, "--json", "/dev/full"],
        "--json onto a folder": [*check, "--json", "shards"],
        "--html-report onto a shard": [*check, "--html-report", shard],
        "--sharpness --json onto the contract": [
            "check", "contract.yaml", "--sharpness", "--json", "contract.yaml"
        ],
        "infer -o onto an existing contract": [*infer, "-o", "contract.yaml"],
        "infer -o --force onto a shard": [*infer, "-o", shard, "--force"],
        "infer -o inside the shard folder": [*infer, "-o", "shards/c.yaml"],
        "infer -o /dev/full --force": [*infer, "-o", "/dev/full", "--force"],
        "record -o the shard folder": [
            "record", "contract.yaml", "--sglang-url", "http://127.0.0.1:9", "-o", "shards"
        ],
        "demo --out through a link": ["demo", "--out", "out/demo"],
    }  # fmt: skip
    cases = []
    for i, (name, argv) in enumerate(asks.items()):
        folder = project(f"{i:03d}")
        if name.startswith("demo"):
            (folder / "victim").mkdir()
            (folder / "out" / "demo").mkdir(parents=True)
            (folder / "out" / "demo" / "good").symlink_to(folder / "victim")
        cases.append(Case("outputs", name, folder, argv))
    return cases
