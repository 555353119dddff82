"""The hostile-input sweep as a matrix (issue 22): input class x check family x shell.

Every input class of benchmarks/hostile_sweep.py -- shards, speculators Arrow datasets,
contracts, target model folders, draft folders, capture files, answers of the SGLang
stand-in, output paths -- is run through every check family that reads it, in every shell.
The ``fs`` class (issue 41) is the place a run writes rather than what it reads: a home of
another user's, a read-only or a file home, an ``XDG_CACHE_HOME`` that is a file or
read-only, a read-only checkout, each run by an unprivileged user (tests/unprivileged.py:
``nobody``, else root without its capabilities), through check, infer -o, audit, validate,
the pytest gate and a user's ``eagle_capture`` test with no capture source:

    cli           eagle-contract check ... --checks FAMILY (or the command: audit, identify,
                  inspect, infer, probe, record)
    pytest        pytest --eagle-contract CONTRACT --eagle-shards DIR ...
    pytest -n 2   the same under pytest-xdist

The contract is part of the input: the variant that switches a family on goes with it (a
contract naming the tiny target with ``target.reference_capture`` for ``evidence``, one
with ``serving.draft_config`` for ``draft``, a floor, a draft and a target for ``probe``,
``--captures`` for ``capture``). A pytest run runs every default family the variant
switches on, and the table names the variant; the on-request ``draft`` family runs with
``--eagle-checks draft``.

Each run ends in one class, the first that applies (benchmarks/hostile_sweep.py):

    payload ran   a marker file a payload would create exists
    overwrote     a file of the input (its folder, or the shared world it reads) changed
    hang          still running at the timeout (killed, with its xdist workers)
    >4GB          peak RSS over 4 GiB, or the run ran out of memory
    traceback     a Python traceback in the output; an exit code outside 0/1/2 (CLI) or
                  0/1/4 (pytest: 4 is a usage error, pytest.UsageError; 2 = interrupted by
                  a collection error, 3 = INTERNALERROR, 5 = no items); in pytest also an
                  item that failed with a raw exception rather than a finding, a collection
                  error, an INTERNALERROR or a crashed xdist worker (benchmarks/
                  hostile_matrix_guard.py)
    changed verdict  (fs) not the exit code a normal run of the cell gives
    no finding    a shard's default ``check`` has no finding for the bad file, or skipped
                  the good one beside it; (fs) the cell's report lacks the bad shard's
                  finding, or a skip of ``eagle_capture`` names no option to pass
    zero compared the run passed ("ok") on 0 shards while running a family that compares
                  shards (every per-shard family, token-parity): its report (check's
                  ``--json``, the plugin's ``--eagle-json-report``) says "ok ... on 0
                  shard(s)"
    ok            none of the above

    python benchmarks/hostile_sweep.py --matrix [--quick] [--classes shards,drafts]
        [--families evidence,probe] [--shells cli,pytest] [--only SUBSTRING] [--jobs 2]
        [--keep] [--fresh]

``--quick`` runs one input per (class, family, shell) cell, a different input in each cell
(under three minutes on 2 cores); the full form runs every input in every cell, the xdist
shell on every ``--n2-every``-th input (default 4).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
import kinds  # noqa: E402  (the test folders: the hostile tests' cases are reused)

sys.path.extend(kinds.folders())
sys.path.insert(0, str(HERE))

import torch  # noqa: E402
from hostile_inputs import (  # noqa: E402
    CKPT,
    Case,
    _each_shard_judged,
    _mutated,
    _Payload,
    _shard_inputs,
    demo_world,
    output_cases,
    saved,
)

SHELLS = ("cli", "pytest", "pytest -n 2")
CLASSES = (
    "shards",
    "datasets",
    "contracts",
    "models",
    "drafts",
    "captures",
    "http",
    "serving",
    "fs",
    "outputs",
)
EXTRA_FAMILIES = ("audit",)  # not a registry family: eagle-contract audit
T, H, V = 12, 64, 512  # test_hostile_shards.good(): the demo's widths
GUARD = ["-p", "hostile_matrix_guard"]
USER_TEST = """\
def test_user_fixture(eagle_shard, eagle_capture):
    assert eagle_shard is not None
"""
USER_SHARD_TEST = """\
def test_user_fixture(eagle_shard, eagle_contract):
    assert eagle_shard is not None
"""


# -- the shared world: a tiny target, a draft of its widths, a capture of good()'s ids -----


@dataclass
class World:
    root: Path
    model: Path
    draft: Path
    captures: Path
    capture_data: dict[str, Any]
    demo: tuple[Path, Path, dict[str, Any]] | None = None
    tokenizer: Path | None = None  # tok/ (a trained BPE, Llama-3 template) and conv.jsonl

    @property
    def watch(self) -> tuple[Path, ...]:
        extra = (self.tokenizer,) if self.tokenizer is not None else ()
        return (self.model, self.draft, self.captures, *extra)


def write_draft(folder: Path, hidden: int = H, vocab: int = V) -> Path:
    """A random-weight EAGLE-3 draft of the target's widths (models.trained's)."""
    from safetensors.torch import save_file

    from pytest_eagle_contract.models.trained import random_draft

    config, weights = random_draft(hidden, vocab, [1, 3, 4], torch.Generator().manual_seed(0))
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def capture_data(folder: Path) -> dict[str, Any]:
    """A valid capture of test_hostile_shards.good() written in ``folder``, and what
    test_hostile_captures' cases are made from: good()'s ids and aux states, the capture's
    bytes and metadata."""
    import test_hostile_captures as hcap
    import test_hostile_shards as hs

    from pytest_eagle_contract.capture.files import CaptureMeta, write_capture

    good = hs.good()
    aux = good["aux_hidden_state"][0]
    meta = CaptureMeta(layer_ids=(1, 3, 4), arch="LlamaForCausalLM", version="0.5.23")
    valid = write_capture(folder, good["input_ids"], aux, meta)
    return {
        "bytes": valid.read_bytes(),
        "aux": aux,
        "ids": good["input_ids"],
        "meta": json.loads(CaptureMeta.from_json(hcap._meta_of(valid)).to_json()),
    }


def build_world(root: Path, http: bool) -> World:
    from pytest_eagle_contract.models.tiny import tiny_target
    from pytest_eagle_contract.shells.demo import SPEC

    w = root / "world"
    tiny_target(SPEC).save_pretrained(w / "model")
    write_draft(w / "draft")
    data = capture_data(w / "captures")
    demo = demo_world(w) if http else None
    return World(w, w / "model", w / "draft", w / "captures", data, demo, tokens_world(w))


def tokens_world(w: Path) -> Path:
    """A tokenizer folder and the conversation the shards' ``data_0`` is matched to (the
    token families' inputs beside each hostile shard)."""
    from tokenizer_data import LLAMA3, make_tokenizer

    folder = w / "tokenizer"
    make_tokenizer(folder / "tok", LLAMA3)
    row = {
        "conversations": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"},
        ]
    }
    (folder / "conv.jsonl").write_text(json.dumps(row) + "\n")
    return folder


# -- contracts: the variants that switch families on ---------------------------------------


def variant(
    base: str,
    *,
    model: Path | None = None,
    reference: bool = False,
    draft: Path | None = None,
    floor: bool = False,
    serving_model: Path | None = None,
    tokenizer: Path | None = None,
) -> str:
    """``base`` with ``target.model``, ``target.reference_capture``, ``serving.draft_config``,
    ``serving.min_accept_length`` and ``serving.target_model`` added (each key's section
    must open a line)."""
    out = []
    for line in base.splitlines(keepends=True):
        out.append(line)
        if line.startswith("target:"):
            if model is not None:
                out.append(f"  model: {model}\n")
            if reference:
                out.append("  reference_capture: true\n")
        elif line.startswith("serving:"):
            if draft is not None:
                out.append(f"  draft_config: {draft}\n")
            if floor:
                out.append("  min_accept_length: 1.0\n")
            if serving_model is not None:
                out.append(f"  target_model: {serving_model}\n")
    if tokenizer is not None:  # a section of its own, at the end
        out.append(
            f"\ntokenizer:\n  path: {tokenizer}/tok\n  conversations: {tokenizer}/conv.jsonl\n"
            "  bos: once\n  thinking: mixed\n  think_token_ids: [3, 4]\n"
            "  assistant_header: [2, 3]\n  vocab_size: 300\n"
        )
    return "".join(out)


SPECULATORS = f"""\
contract: speculators-hostile
version: 1
target:
  arch: LlamaForCausalLM
  num_hidden_layers: 8
  hidden_size: {H}
  vocab_size: {V}
  dtype: bfloat16
training:
  format: speculators
  shards: shards/hidden_states
  slots:
    - {{layer: residual:2, norm: {{min: 0.5, max: 50}}}}
    - {{layer: residual:4, norm: {{min: 0.5, max: 50}}}}
    - {{layer: residual:5, norm: {{min: 0.5, max: 50}}}}
    - {{layer: residual:8, norm: {{min: 0.5, max: 50}}}}
  fc_input: [0, 1, 2]
  target_slot: 3
serving:
  engine: sglang
  version: ">=0.5.13"
  arch: LlamaForCausalLM
  aux_layer_ids: [1, 3, 4]
"""


def _base_text() -> str:
    import test_hostile_shards as hs

    return hs.CONTRACT_TEXT


def write_variants(folder: Path, world: World, base: str, model: Path | None = None) -> None:
    """c-base.yaml, c-target.yaml (the tiny target, reference capture), c-draft.yaml (a
    draft folder) and c-probe.yaml (target, draft, floor) in ``folder``."""
    model = model or world.model
    draft = folder / "draft" if (folder / "draft").exists() else world.draft
    (folder / "c-base.yaml").write_text(base, "utf-8")
    (folder / "c-target.yaml").write_text(variant(base, model=model, reference=True), "utf-8")
    (folder / "c-draft.yaml").write_text(variant(base, draft=draft), "utf-8")
    probe = variant(base, model=model, reference=True, draft=draft, floor=True)
    (folder / "c-probe.yaml").write_text(probe, "utf-8")
    # the folder (hostile in the models class) as the serving target beside the good one
    identity = variant(base, model=world.model, serving_model=model)
    (folder / "c-identity.yaml").write_text(identity, "utf-8")
    if world.tokenizer is not None:  # the token families beside the folder's shards
        tokens = variant(base, tokenizer=world.tokenizer)
        (folder / "c-tokens.yaml").write_text(tokens, "utf-8")
        # the shards only on the command line: training.shards names a folder of no shard
        named = re.sub(r"(?m)^  shards:.*$", f"  shards: {ELSEWHERE}", tokens, count=1)
        (folder / "c-tokens-named.yaml").write_text(named, "utf-8")
        (folder / ELSEWHERE).mkdir(exist_ok=True)


# -- cells: a family in a shell, and the argv that runs it ---------------------------------


@dataclass(frozen=True)
class Cell:
    family: str  # the row's label: a family, a command, or (pytest) the variant's families
    shell: str
    argv: Callable[[Path, World], list[str]]
    covers: Callable[[], frozenset[str]]  # the families the run executes
    verify: bool = False  # a shard's default check: the bad file has a finding
    user_test: str = ""  # a user's test file using the plugin's fixtures (pytest)
    heavy: bool = False  # slow (xdist): the full form runs it on every --n2-every-th input
    timeout: float | None = None
    expect: tuple[int, ...] = ()  # the exit codes a normal run gives (the fs class)
    judge: Callable[[Path], str] | None = None  # what is missing afterwards ("" for nothing)


def _families(
    text: str,
    checks: Iterable[str] | None = None,
    *,
    target: bool = False,
    capture: bool = False,
    no_sharpness: bool = False,
    measure: bool = False,
) -> frozenset[str]:
    """The families ``planner.families`` runs for a valid contract ``text`` and options, with
    ``shards`` (the files family: read errors) when a per-shard family runs."""
    from pytest_eagle_contract.contract.model import parse_contract
    from pytest_eagle_contract.plan.planner import families
    from pytest_eagle_contract.plan.registry import BY_NAME

    with tempfile.TemporaryDirectory() as tmp:
        contract = parse_contract(text, Path(tmp, "c.yaml"))
        chosen = families(
            contract,
            checks,
            without=("sharpness",) if no_sharpness else (),
            target_model=Path(tmp) if target else None,
            capture=capture,
            measure=measure,
        )
    names = {f.name for f in chosen}
    if any(BY_NAME[n].scope == "shard" for n in names):
        names.add("shards")
    return frozenset(names)


def _ref(base: str = "") -> Callable[..., str]:
    """A contract text for ``_families``: the variant of ``base`` (the demo's by default)."""

    def text(**kw: Any) -> str:
        return variant(base or _base_text(), **kw)

    return text


def _fam(
    checks: Iterable[str] | None = None,
    *,
    base: str = "",
    contract: dict[str, Any] | None = None,
    **options: Any,
) -> Callable[[], frozenset[str]]:
    def covers() -> frozenset[str]:
        kw = dict(contract or {})
        kw = {
            k: (
                Path("/x")
                if v is True and k in ("model", "draft", "serving_model", "tokenizer")
                else v
            )
            for k, v in kw.items()
        }
        return _families(_ref(base)(**kw), checks, **options)

    return covers


def _only(*names: str) -> Callable[[], frozenset[str]]:
    return lambda: frozenset(names)


def _check(contract: str, *paths: str, extra: Iterable[str] = ()) -> list[str]:
    return ["check", contract, *paths, "--sample", "all", *extra, "--json", "out/r.json"]


def _pytest(
    contract: str, shards: Iterable[str], *extra: str, n2: bool = False, tests: bool = False
) -> list[str]:
    argv = ["pytest", "-c", "out/pytest.ini", "--rootdir", ".", "-p", "no:cacheprovider"]
    # a basetemp of its own: pytest's clean-up of old ones in /tmp/pytest-of-USER is not
    # the plugin's (a 1,100-level tree left there by a killed run crashes every session)
    argv += ["--basetemp", "out/basetemp", *GUARD, "-q", "-rfE", "--eagle-contract", contract]
    # its summary: no cell passes on 0 shards compared
    argv += ["--eagle-json-report", "out/r.json"]
    for s in shards:
        argv += ["--eagle-shards", s]
    argv += ["--eagle-sample", "all", *extra, "out/tests"]
    if n2:
        argv += ["-n", "2"]
    return argv


def _alone(
    family: str, contract: str, *, label: str = "", on: dict[str, Any] | None = None, base: str = ""
) -> Cell:
    """``check CONTRACT --checks FAMILY`` in the CLI: the family alone, under the contract
    variant that ``on`` names (``label``: the row's name, the family's by default)."""
    return Cell(
        label or family,
        "cli",
        lambda f, w: _check(contract, extra=["--checks", family]),
        _fam([family], base=base, contract=on),
    )


def _xdist(cell: Cell) -> Cell:
    """The pytest ``cell`` under pytest-xdist (``-n 2``): slow, so every --n2-every-th input."""
    return replace(
        cell,
        shell="pytest -n 2",
        argv=lambda f, w: [*cell.argv(f, w), "-n", "2"],
        heavy=True,
        timeout=180,
    )


def _audit(contract: str, *paths: str) -> list[str]:
    return ["audit", contract, *paths, "--json", "out/a.json", "--cache", "out/cache"]


def audit_cells(contract: str) -> list[Cell]:
    """``audit`` on both backends: the local pool, and (where Ray is installed: the ``ray``
    extra, ``tox -e hostile-ray``) a local Ray cluster the sweep starts once
    (:func:`ray_cluster`), which each run joins with ``--address auto``: one task per file."""
    local = Cell("audit", "cli", lambda f, w: _audit(contract, "shards"), _only("audit"))
    if importlib.util.find_spec("ray") is None:
        return [local]
    ray = Cell(
        "audit --backend ray",
        "cli",
        lambda f, w: [*_audit(contract, "shards"), "--backend", "ray", "--address", "auto"],
        _only("audit"),
    )
    return [local, ray]


@contextlib.contextmanager
def ray_cluster(wanted: bool) -> Iterator[None]:
    """A local Ray cluster (2 CPUs, no dashboard) for the ``--backend ray`` cells, started
    outside the sweep's address-space cap (Ray's own processes reserve more than the cap,
    and the runs that join it run uncapped: hostile_runner._child) and stopped after."""
    if not wanted:
        yield
        return
    ray = [sys.executable, "-m", "ray.scripts.scripts"]
    start = [*ray, "start", "--head", "--num-cpus=2", "--include-dashboard=false"]
    subprocess.run([*start, "--disable-usage-stats"], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run([*ray, "stop", "--force"], check=False, capture_output=True)


TARGET_ON = {"model": True, "reference": True}
IDENTITY_ON = {"model": True, "serving_model": True}
PROBE_ON = {"model": True, "reference": True, "draft": True, "floor": True}
TOKENS_ON = {"tokenizer": True}
TOKEN_FAMILIES = ("tokenizer", "tokens", "token-parity")
ELSEWHERE = "not-these-shards"  # c-tokens-named.yaml's training.shards: a folder, no shard


def shards_of(base: str) -> str:
    """The ``training.shards`` of a contract text (``shards``, ``shards/hidden_states``),
    its comment left out."""
    line = next(x for x in base.splitlines() if x.startswith("  shards:"))
    return line.split(":", 1)[1].split("#", 1)[0].strip()


def _seam_cells(
    label: str, contract: str, names: tuple[str, ...], on: dict[str, Any], base: str
) -> list[Cell]:
    """Contract-level families beside a folder's shards, under the ``contract`` variant that
    ``on`` names: each alone in the CLI, together in pytest and pytest -n 2."""
    together = Cell(
        label,
        "pytest",
        lambda f, w: _pytest(
            contract, ["shards"], "--eagle-checks", ",".join(names), "--eagle-no-sharpness"
        ),
        _fam(names, base=base, contract=on, no_sharpness=True),
    )
    alone = [_alone(n, contract, on=on, base=base) for n in names]
    return [*alone, together, _xdist(together)]


def token_cells(base: str = "") -> list[Cell]:
    """The token families (c-tokens.yaml: the world's tokenizer folder and conversations),
    and token-parity on the shards the command names (c-tokens-named.yaml's own
    training.shards is a folder of no shard: a run that read the contract's shards instead
    compares nothing and said "ok: 1 checks on 0 shard(s)", which the sweep's ``zero
    compared`` rule fails)."""
    shards = shards_of(base or _base_text())
    named = [
        Cell(
            "token-parity (shards named)",
            "cli",
            lambda f, w: _check("c-tokens-named.yaml", shards, extra=["--checks", "token-parity"]),
            _fam(["token-parity"], base=base, contract=TOKENS_ON),
        ),
        Cell(
            "token-parity (shards named)",
            "pytest",
            lambda f, w: _pytest("c-tokens-named.yaml", [shards], "--eagle-checks", "token-parity"),
            _fam(["token-parity"], base=base, contract=TOKENS_ON),
        ),
    ]
    cells = _seam_cells("token families", "c-tokens.yaml", TOKEN_FAMILIES, TOKENS_ON, base)
    return [*cells, *named]


DRAFT_ON = {"draft": True}
DRAFT_FAMILIES = ("draft-config", "vocabulary")


def draft_seam_cells(base: str = "") -> list[Cell]:
    """The draft's config and vocabulary map (c-draft.yaml: the draft folder as
    serving.draft_config; the map's coverage reads the shards)."""
    return _seam_cells("draft-config+vocabulary", "c-draft.yaml", DRAFT_FAMILIES, DRAFT_ON, base)


def shard_cells(shard: str, base: str = "") -> list[Cell]:
    """The cells of a class whose input is shard files under ``shards/`` (``shard``: the bad
    file, for the commands that take one)."""
    fam = lambda *a, **k: _fam(*a, base=base, **k)  # noqa: E731
    caps = ["--captures", "{captures}"]
    cells = [
        Cell(
            "default",
            "cli",
            lambda f, w: _check("c-base.yaml", extra=["--no-sharpness"]),
            fam(no_sharpness=True),
            verify=True,
        ),
        *(
            _alone(name, "c-base.yaml", base=base)
            for name in ("structure", "values", "norms", "layout")
        ),
        _alone("evidence", "c-target.yaml", on=TARGET_ON, base=base),
        Cell(
            "evidence --target-model",
            "cli",
            lambda f, w: _check(
                "c-base.yaml",
                extra=[
                    "--target-model",
                    str(w.model),
                    "--reference-capture",
                    "--checks",
                    "evidence",
                ],
            ),
            fam(["evidence"], target=True),
        ),
        Cell(
            "capture",
            "cli",
            lambda f, w: _check("c-base.yaml", extra=[*caps, "--checks", "capture"]),
            fam(["capture"], capture=True),
        ),
        *audit_cells("c-base.yaml"),
        Cell("inspect", "cli", lambda f, w: ["inspect", shard], _only()),
        Cell(
            "identify",
            "cli",
            lambda f, w: ["identify", shard, "--target-model", str(w.model)],
            _only(),
        ),
        Cell(
            "shard families+evidence+capture",
            "pytest",
            lambda f, w: _pytest(
                "c-target.yaml",
                ["shards"],
                "--eagle-captures",
                "{captures}",
                "--eagle-no-sharpness",
            ),
            fam(contract=TARGET_ON, capture=True, no_sharpness=True),
        ),
        Cell(
            "shard families, batched",
            "pytest",
            lambda f, w: _pytest(
                "c-base.yaml", ["shards"], "--eagle-batch", "2", "--eagle-no-sharpness"
            ),
            fam(no_sharpness=True),
        ),
        Cell(
            "fixtures eagle_shard",
            "pytest",
            lambda f, w: _pytest("c-base.yaml", ["shards"], "--eagle-no-sharpness"),
            fam(no_sharpness=True),
            user_test=USER_SHARD_TEST,
        ),
        Cell(
            "shard families+evidence+capture",
            "pytest -n 2",
            lambda f, w: _pytest(
                "c-base.yaml",
                ["shards"],
                "--eagle-target-model",
                str(w.model),
                "--eagle-reference-capture",
                "--eagle-captures",
                "{captures}",
                "--eagle-no-sharpness",
                n2=True,
            ),
            fam(target=True, capture=True, no_sharpness=True),
            heavy=True,
            timeout=180,
        ),
        *token_cells(base),
        *draft_seam_cells(base),
    ]
    return cells


def _with_captures(argv: list[str], world: World) -> list[str]:
    return [str(world.captures) if a == "{captures}" else a for a in argv]


# -- the inputs of each class: (name, make(folder, world)) ---------------------------------

Make = Callable[[Path, World], None]


def _good_shard(folder: Path) -> None:
    """test_hostile_shards.good() as the one shard under ``folder/shards``."""
    import test_hostile_shards as hs

    (folder / "shards" / CKPT).parent.mkdir(parents=True)
    torch.save(hs.good(), folder / "shards" / CKPT)


def _prepare(folder: Path, user_test: str = "") -> None:
    (folder / "out" / "tests").mkdir(parents=True, exist_ok=True)
    (folder / "out" / "pytest.ini").write_text("[pytest]\n")
    if user_test:
        (folder / "out" / "tests" / "test_user.py").write_text(user_test)


def shard_inputs(rng: random.Random) -> list[tuple[str, Make]]:
    import test_hostile_shards as hs

    full = lambda v, dtype=torch.int64: torch.full((T,), v, dtype=dtype)  # noqa: E731
    extra = {  # ids a target-model contract runs the target on (the reference capture)
        "ids past the vocabulary (600)": hs.good(input_ids=full(600)),
        "ids -1": hs.good(input_ids=full(-1)),
        "ids int64 max": hs.good(input_ids=full(2**63 - 1)),
        "ids int32 2**31-1": hs.good(input_ids=full(2**31 - 1, torch.int32)),
        "ids 1.0 floats": hs.good(input_ids=torch.ones(T)),
        "bf16 states of Inf": hs.good(hidden_state=torch.full((1, T, H), float("inf")).bfloat16()),
        "states 1e38 float32": hs.good(aux_hidden_state=torch.full((1, T, 3 * H), 1e38)),
        "states float64": hs.good(aux_hidden_state=torch.randn(1, T, 3 * H, dtype=torch.float64)),
        "states float8_e5m2": hs.good(
            aux_hidden_state=torch.randn(1, T, 3 * H).to(torch.float8_e5m2)
        ),
        "one token": {k: v[..., :1, :] if v.dim() == 3 else v[:1] for k, v in hs.good().items()},
    }
    inputs = [(n, CKPT, saved(d)) for n, d in extra.items()]
    out: list[tuple[str, Make]] = []
    for name, rel, data in [*_shard_inputs(rng), *inputs]:

        def make(folder: Path, world: World, rel: str = rel, data: bytes = data) -> None:
            shard = folder / "shards" / rel
            shard.parent.mkdir(parents=True, exist_ok=True)
            shard.write_bytes(data)
            torch.save(hs.good(), shard.parent / "data_1.ckpt")  # checked after the bad one
            write_variants(folder, world, _base_text())

        out.append((f"{name} [{Path(rel).name}]", make))
    return out


def _shard_rel(name: str) -> str:
    return "shards/" + {
        "data_0.ckpt.gz": "rows_0-2000/data_0.ckpt.gz",
        "data_0.pt": "data_0.pt",
        "hs_0.safetensors": "hidden_states/hs_0.safetensors",
    }.get(name.rsplit("[", 1)[-1].rstrip("]"), CKPT)


# speculators Arrow datasets ---------------------------------------------------------------

ARROW = "data-00000-of-00001.arrow"


def _arrow_bytes(table: Any, stream: bool = True) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    writer = pa.ipc.new_stream if stream else pa.ipc.new_file
    with writer(sink, table.schema) as w:
        w.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _speculators_shards(folder: Path, n: int = 2) -> tuple[list[int], list[int]]:
    """hidden_states/hs_{i}.safetensors of good()'s ids and states; (ids, mask) of a row."""
    import test_hostile_shards as hs
    from safetensors.torch import save_file

    good = hs.good()
    states = torch.cat(
        [good["aux_hidden_state"][0].reshape(T, 3, H), good["hidden_state"][0].reshape(T, 1, H)],
        dim=1,
    ).contiguous()
    (folder / "shards" / "hidden_states").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        save_file(
            {"hidden_states": states, "token_ids": good["input_ids"]},
            str(folder / "shards" / "hidden_states" / f"hs_{i}.safetensors"),
        )
    mask = [0] * 4 + [1] * (T - 4)
    return [int(x) for x in good["input_ids"]], mask


class _Evil:
    """An Arrow extension type as PyExtensionType writes it (CVE-2023-47248): its
    serialized form is a pickle that creates PAYLOAD_RAN."""

    @staticmethod
    def table(marker_how: str = "open") -> Any:
        import pickle

        import pyarrow as pa

        payload = pickle.dumps(_Payload(marker_how))

        class Evil(pa.ExtensionType):
            def __init__(self) -> None:
                super().__init__(pa.list_(pa.int64()), "arrow.py_extension_type")

            def __arrow_ext_serialize__(self) -> bytes:
                return payload

            @classmethod
            def __arrow_ext_deserialize__(cls, storage_type: Any, serialized: bytes) -> Any:
                return cls()

        evil = Evil()
        ids = pa.ExtensionArray.from_storage(evil, pa.array([[1, 2]] * 2))
        return pa.table({"input_ids": ids, "loss_mask": pa.array([[1, 1]] * 2)})


def dataset_inputs(rng: random.Random) -> list[tuple[str, Make]]:
    import pyarrow as pa

    ids0 = list(range(T))
    mask0 = [0] * 4 + [1] * (T - 4)
    L = pa.list_

    def tbl(ids: Any = None, mask: Any = None, **more: Any) -> Any:
        cols: dict[str, Any] = {}
        if ids is not None:
            cols["input_ids"] = ids
        if mask is not None:
            cols["loss_mask"] = mask
        cols.update(more)
        return pa.table(cols)

    def good_table(ids: list[int]) -> Any:
        return tbl([ids] * 2, [mask0] * 2, seq_len=[T, T])

    # name -> table (or bytes, or a function of the good ids giving one)
    tables: dict[str, Any] = {
        "valid": lambda ids: good_table(ids),
        "ids strings": tbl([["a"] * T] * 2, [mask0] * 2),
        "ids floats": tbl([[0.5] * T] * 2, [mask0] * 2),
        "ids NaN floats": tbl([[float("nan")] * T] * 2, [mask0] * 2),
        "ids nested lists": tbl([[[1]] * T] * 2, [mask0] * 2),
        "ids nulls inside": tbl([[None] * T, ids0], [mask0] * 2),
        "ids null row": tbl(pa.array([None, ids0], L(pa.int64())), [mask0] * 2),
        "ids negative": tbl([[-5] * T] * 2, [mask0] * 2),
        "ids out of vocab 2**40": tbl([[2**40] * T] * 2, [mask0] * 2),
        "ids int64 max": tbl([[2**63 - 1] * T] * 2, [mask0] * 2),
        "ids 600 (past vocab 512)": tbl([[600] * T] * 2, [mask0] * 2),
        "ids uint64 max": tbl(pa.array([[2**64 - 1] * T] * 2, L(pa.uint64())), [mask0] * 2),
        "ids int8": tbl(pa.array([ids0] * 2, L(pa.int8())), [mask0] * 2),
        "ids bool": tbl(pa.array([[True] * T] * 2, L(pa.bool_())), [mask0] * 2),
        "ids large_list": tbl(pa.array([ids0] * 2, pa.large_list(pa.int64())), [mask0] * 2),
        "ids fixed_size_list": tbl(pa.array([ids0] * 2, L(pa.int64(), T)), [mask0] * 2),
        "ids list_view": tbl(pa.array([ids0] * 2, pa.list_view(pa.int64())), [mask0] * 2)
        if hasattr(pa, "list_view")
        else b"",
        "ids struct": tbl(pa.array([{"a": 1}] * 2), [mask0] * 2),
        "ids int column": tbl([1, 2], [mask0] * 2),
        "ids dictionary": tbl(pa.array(["x", "y"]).dictionary_encode(), [mask0] * 2),
        "ids T + 5": tbl([list(range(T + 5))] * 2, [mask0] * 2),
        "ids empty rows": tbl([[]] * 2, [[]] * 2),
        "mask 2 and -1": tbl([ids0] * 2, [[2, -1] + [1] * (T - 2)] * 2),
        "mask floats": tbl([ids0] * 2, [[0.5] * T] * 2),
        "mask uint64 max": tbl([ids0] * 2, pa.array([[2**64 - 1] * T] * 2, L(pa.uint64()))),
        "mask all zero": tbl([ids0] * 2, [[0] * T] * 2),
        "mask shorter": tbl([ids0] * 2, [[1] * 3] * 2),
        "no loss_mask": tbl([ids0] * 2),
        "no input_ids": tbl(None, [mask0] * 2),
        "no columns": pa.table({"x": [1, 2]}),
        "one row for two files": tbl([ids0], [mask0]),
        "zero rows": pa.table(
            {"input_ids": pa.array([], L(pa.int64())), "loss_mask": pa.array([], L(pa.int64()))}
        ),
        "100000 rows": tbl([ids0] * 100_000, [mask0] * 100_000),
        "500 columns": pa.table(
            {
                "input_ids": [ids0] * 2,
                "loss_mask": [mask0] * 2,
                **{f"c{i}": [i, i] for i in range(500)},
            }
        ),
        "seq_len 10**12": tbl([ids0] * 2, [mask0] * 2, seq_len=[10**12, -1]),
        "schema metadata 2 MiB": pa.table(
            {"input_ids": [ids0] * 2, "loss_mask": [mask0] * 2}
        ).replace_schema_metadata({"pad": "x" * (2 << 20)}),
        "schema metadata 900 KiB": pa.table(
            {"input_ids": [ids0] * 2, "loss_mask": [mask0] * 2}
        ).replace_schema_metadata({"pad": "x" * (900 << 10)}),
        "extension type with a pickle": "evil",
        "extension name metadata only": pa.table(
            {
                "input_ids": pa.array([ids0] * 2),
                "loss_mask": pa.array([mask0] * 2),
            }
        ).cast(
            pa.schema(
                [
                    pa.field(
                        "input_ids", L(pa.int64()), metadata={"ARROW:extension:name": "my.ext"}
                    ),
                    pa.field("loss_mask", L(pa.int64())),
                ]
            )
        ),
    }
    raw: dict[str, bytes] = {
        "empty file": b"",
        "text": b"not an arrow file\n",
        "continuation, size -1": b"\xff\xff\xff\xff" + struct.pack("<i", -1) + bytes(64),
        "continuation, size 2**31-1": b"\xff\xff\xff\xff" + struct.pack("<i", 2**31 - 1),
        "old format, size 1 MiB": struct.pack("<i", 1 << 20) + bytes(16),
        "schema only, no batches": b"",  # filled below
        "zeros 1 MiB": bytes(1 << 20),
    }
    good_bytes = _arrow_bytes(good_table(ids0))
    raw["schema only, no batches"] = good_bytes[: good_bytes.find(b"\xff\xff\xff\xff", 8)]
    raw["file format (ARROW1), not a stream"] = _arrow_bytes(good_table(ids0), stream=False)
    for i in range(6):
        raw[f"truncated {i}"] = good_bytes[: rng.randrange(1, len(good_bytes))]
    for i in range(8):
        data = bytearray(good_bytes)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        raw[f"flipped bytes {i}"] = bytes(data)
    for i in range(8):
        kind = rng.choice(
            [pa.int64(), pa.int32(), pa.uint32(), pa.float32(), pa.string(), pa.bool_()]
        )
        n = rng.choice([0, 1, 2, 3])
        length = rng.choice([0, 1, T, T + 1])
        values: Any = [[rng.randint(-3, 700) for _ in range(length)] for _ in range(n)]
        if kind == pa.string():
            values = [[str(x) for x in row] for row in values]
        elif kind == pa.bool_():
            values = [[bool(x % 2) for x in row] for row in values]
        with contextlib.suppress(Exception):
            mask = [[rng.choice([0, 1, 2]) for _ in range(length)] for _ in range(n)]
            tables[f"random table {i}"] = pa.table(
                {
                    "input_ids": pa.array(values, L(kind)),
                    "loss_mask": pa.array(mask, L(pa.int64())),
                }
            )

    out: list[tuple[str, Make]] = []

    def add(name: str, write: Callable[[Path, list[int]], None]) -> None:
        def make(folder: Path, world: World) -> None:
            ids, _ = _speculators_shards(folder)
            write(folder / "shards", ids)
            write_variants(folder, world, SPECULATORS)

        out.append((name, make))

    for name, table in tables.items():
        if isinstance(table, bytes):
            continue

        def write(root: Path, ids: list[int], table: Any = table) -> None:
            if table == "evil":
                (root / ARROW).write_bytes(_arrow_bytes(_Evil.table()))
                return
            t = table(ids) if callable(table) else table
            (root / ARROW).write_bytes(_arrow_bytes(t))

        add(name, write)
    for name, data in raw.items():
        add(name, lambda root, ids, data=data: (root / ARROW).write_bytes(data))

    def two_schemas(root: Path, ids: list[int]) -> None:
        (root / "data-00000-of-00002.arrow").write_bytes(_arrow_bytes(tbl([ids], [mask0])))
        (root / "data-00001-of-00002.arrow").write_bytes(
            _arrow_bytes(tbl([["a"] * T], [[1.5] * T]))
        )

    add("two files, schemas differ", two_schemas)
    add(
        "one of two files",
        lambda root, ids: (root / "data-00000-of-00002.arrow").write_bytes(
            _arrow_bytes(tbl([ids], [mask0]))
        ),
    )
    add("a folder named like it", lambda root, ids: (root / ARROW).mkdir())
    add("a FIFO named like it", lambda root, ids: os.mkfifo(root / ARROW))
    add("a link to /dev/zero", lambda root, ids: (root / ARROW).symlink_to("/dev/zero"))
    add("a link to /etc/passwd", lambda root, ids: (root / ARROW).symlink_to("/etc/passwd"))
    add("a link loop", lambda root, ids: (root / ARROW).symlink_to(root / ARROW))
    add(
        "state.json garbage",
        lambda root, ids: (
            (
                (root / ARROW).write_bytes(_arrow_bytes(good_table(ids))),
                (root / "state.json").write_text("{"),
            )
            and None
        ),
    )
    add(
        "sparse 8 GiB after a valid stream",
        lambda root, ids: _sparse(root / ARROW, _arrow_bytes(good_table(ids)), 8 << 30),
    )
    return out


def _sparse(path: Path, head: bytes, size: int) -> None:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)


# contracts ----------------------------------------------------------------------------


def contract_inputs(rng: random.Random, world_paths: tuple[Path, Path]) -> list[tuple[str, Make]]:
    import test_hostile_contracts as hc

    model, draft = world_paths
    base = _base_text()
    full = variant(base, model=model, reference=True, draft=draft, floor=True)
    texts: list[tuple[str, bytes]] = [(n, d) for n, (d, _) in hc.CASES.items()]
    texts += [(f"edited {i}", _mutated(rng, hc.VALID)) for i in range(20)]
    texts += [(f"edited demo {i}", _mutated(rng, base)) for i in range(20)]
    texts += [(f"edited full {i}", _mutated(rng, full)) for i in range(40)]
    # the keys that switch families on, given hostile values
    for key, section in (
        ("model", "target"),
        ("reference_capture", "target"),
        ("draft_config", "serving"),
        ("min_accept_length", "serving"),
        ("max_accept_drop", "serving"),
    ):
        for value in (
            "/dev/zero",
            "/etc/passwd",
            ".",
            "..",
            "''",
            "-1",
            "1e308",
            ".nan",
            "[1]",
            "{a: 1}",
            "/nonexistent",
            "x" * 300,
            "c.yaml",
            "shards",
        ):
            lines = []
            for line in full.splitlines(keepends=True):
                if line.startswith(f"  {key}:"):
                    continue
                lines.append(line)
                if line.startswith(f"{section}:"):
                    lines.append(f"  {key}: {value}\n")
            texts.append((f"{section}.{key}: {value[:20]}", "".join(lines).encode()))

    out: list[tuple[str, Make]] = []
    for name, data in texts:

        def make(folder: Path, world: World, data: bytes = data) -> None:
            _good_shard(folder)
            (folder / "c.yaml").write_bytes(data)

        out.append((name, make))
    return out


def contract_cells() -> list[Cell]:
    full = PROBE_ON
    every = Cell(
        "every default family",
        "pytest",
        lambda f, w: _pytest("c.yaml", ["shards"], "--eagle-captures", "{captures}"),
        _fam(contract=full, capture=True),
    )
    return [
        Cell(
            "every default family",
            "cli",
            lambda f, w: _check("c.yaml", "shards", extra=["--captures", "{captures}"]),
            _fam(contract=full, capture=True),
        ),
        _alone("draft", "c.yaml", on=full),
        Cell(
            "sharpness", "cli", lambda f, w: ["check", "c.yaml", "--sharpness"], _fam(["sharpness"])
        ),
        *audit_cells("c.yaml"),
        every,
        _xdist(every),
    ]


# target model folders ---------------------------------------------------------------------


def model_inputs() -> list[tuple[str, Make]]:
    import test_hostile_models as hm

    changes = {
        **{k: v[0] for k, v in hm.CASES.items()},
        **{k: v[0] for k, v in hm.OPEN_CASES.items()},
    }
    out: list[tuple[str, Make]] = []
    for name, change in changes.items():

        def make(folder: Path, world: World, change: Any = change) -> None:
            shutil.copytree(world.model, folder / "model", symlinks=True)
            change(folder / "model")
            _good_shard(folder)
            write_variants(folder, world, _base_text(), model=folder / "model")

        out.append((name, make))
    return out


SHARD = f"shards/{CKPT}"


def _probe_cmd(draft: str, model: str) -> list[str]:
    return [
        "probe",
        "c-probe.yaml",
        "--draft",
        draft,
        "--target-model",
        model,
        "--sequences",
        "2",
        "--length",
        "24",
        "--prompt",
        "8",
    ]


IDENTITY_PYTEST = Cell(
    "target-identity",
    "pytest",
    lambda f, w: _pytest(
        "c-identity.yaml", [], "--eagle-checks", "target-identity", "--eagle-no-sharpness"
    ),
    _fam(["target-identity"], contract=IDENTITY_ON),
)


def model_cells() -> list[Cell]:
    return [
        Cell(
            "evidence --target-model",
            "cli",
            lambda f, w: _check(
                "c-base.yaml",
                "shards",
                extra=["--target-model", "model", "--reference-capture", "--checks", "evidence"],
            ),
            _fam(["evidence"], target=True),
        ),
        _alone("evidence", "c-target.yaml", on=TARGET_ON),
        _alone("probe", "c-probe.yaml", on=PROBE_ON),
        _alone("draft", "c-probe.yaml", on=PROBE_ON),
        _alone("target-identity", "c-identity.yaml", on=IDENTITY_ON),
        IDENTITY_PYTEST,
        _xdist(IDENTITY_PYTEST),
        Cell(
            "identify", "cli", lambda f, w: ["identify", SHARD, "--target-model", "model"], _only()
        ),
        Cell("probe (command)", "cli", lambda f, w: _probe_cmd(str(w.draft), "model"), _only()),
        Cell(
            "shard families+evidence+probe",
            "pytest",
            lambda f, w: _pytest("c-probe.yaml", ["shards"], "--eagle-no-sharpness"),
            _fam(contract=PROBE_ON, no_sharpness=True),
        ),
        Cell(
            "--eagle-target-model",
            "pytest -n 2",
            lambda f, w: _pytest(
                "c-base.yaml",
                ["shards"],
                "--eagle-target-model",
                "model",
                "--eagle-reference-capture",
                "--eagle-no-sharpness",
                n2=True,
            ),
            _fam(target=True, no_sharpness=True),
            heavy=True,
            timeout=180,
        ),
    ]


# draft folders ----------------------------------------------------------------------------


def _edited(mapping: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``mapping`` with each of ``changes`` set, or dropped where its value is None."""
    out = dict(mapping)
    for k, v in changes.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def _cfg(**changes: Any) -> Callable[[Path], None]:
    def change(d: Path) -> None:
        config = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps(_edited(config, changes)))

    return change


def _tensors(**changes: Any) -> Callable[[Path], None]:
    def change(d: Path) -> None:
        from safetensors.torch import load_file, save_file

        weights = _edited(load_file(str(d / "model.safetensors")), changes)
        save_file({k: v.contiguous() for k, v in weights.items()}, str(d / "model.safetensors"))

    return change


def _weights_bytes(f: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def change(d: Path) -> None:
        p = d / "model.safetensors"
        p.write_bytes(f(p.read_bytes()))

    return change


def _replaced(name: str, by: Callable[[Path], object]) -> Callable[[Path], None]:
    """A change that puts ``by(path)`` (a link, a FIFO, a folder) where the file ``name``
    of the draft folder was."""

    def change(d: Path) -> None:
        (d / name).unlink()
        by(d / name)

    return change


def _pickled_draft(d: Path) -> None:
    (d / "model.safetensors").unlink()
    torch.save({"fc.weight": _Payload("exec")}, d / "pytorch_model.bin")


def _sparse_config(d: Path) -> None:
    with open(d / "config.json", "r+b") as f:
        f.truncate(65 << 20)


def draft_inputs() -> list[tuple[str, Make]]:
    ids_key = "eagle_config"
    f32 = torch.float32
    changes: dict[str, Callable[[Path], None]] = {
        "config-list": lambda d: (d / "config.json").write_text("[1, 2]"),
        "config-not-json": lambda d: (d / "config.json").write_text("{"),
        "config-utf16": lambda d: (d / "config.json").write_bytes(
            (d / "config.json").read_text().encode("utf-16")
        ),
        "config-deep": lambda d: (d / "config.json").write_text("[" * 100_000 + "]" * 100_000),
        "config-sparse-65MiB": _sparse_config,
        "config-missing": lambda d: (d / "config.json").unlink(),
        "config-link-dev-zero": _replaced("config.json", lambda p: p.symlink_to("/dev/zero")),
        "config-fifo": _replaced("config.json", os.mkfifo),
        "config-a-folder": _replaced("config.json", Path.mkdir),
        "hidden-size-float": _cfg(hidden_size=64.0),
        "hidden-size-string": _cfg(hidden_size="64"),
        "hidden-size-zero": _cfg(hidden_size=0),
        "hidden-size-2**40": _cfg(hidden_size=2**40),
        "hidden-size-missing": _cfg(hidden_size=None),
        "heads-zero": _cfg(num_attention_heads=0),
        "heads-3": _cfg(num_attention_heads=3),
        "kv-heads-zero": _cfg(num_key_value_heads=0),
        "kv-heads-3": _cfg(num_key_value_heads=3),
        "layers-zero": _cfg(num_hidden_layers=0),
        "layers-2": _cfg(num_hidden_layers=2),
        "vocab-zero": _cfg(vocab_size=0),
        "vocab-2**40": _cfg(vocab_size=2**40),
        "draft-vocab-zero": _cfg(draft_vocab_size=0),
        "draft-vocab-string": _cfg(draft_vocab_size="x"),
        "draft-vocab-1e9": _cfg(draft_vocab_size=10**9),
        "target-hidden-zero": _cfg(target_hidden_size=0),
        "intermediate-zero": _cfg(intermediate_size=0),
        "eps-nan": lambda d: (d / "config.json").write_text(
            (d / "config.json").read_text().replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": NaN')
        ),
        "eps-string": _cfg(rms_norm_eps="tiny"),
        "rope-theta-zero": _cfg(rope_theta=0),
        "rope-theta-negative": _cfg(rope_theta=-1.0),
        "rope-scaling-yarn-0": _cfg(rope_scaling={"rope_type": "yarn", "factor": 0}),
        "rope-scaling-garbage": _cfg(rope_scaling="x"),
        "head-dim-7": _cfg(head_dim=7),
        "head-dim-zero": _cfg(head_dim=0),
        "max-positions-zero": _cfg(max_position_embeddings=0),
        "architectures-string": _cfg(architectures="Llama"),
        "architectures-ints": _cfg(architectures=[5]),
        "aux-ids-string": _cfg(**{ids_key: {"eagle_aux_hidden_state_layer_ids": "1,3,4"}}),
        "aux-ids-floats": _cfg(**{ids_key: {"eagle_aux_hidden_state_layer_ids": [1.5, 3, 4]}}),
        "aux-ids-negative": _cfg(**{ids_key: {"eagle_aux_hidden_state_layer_ids": [-1, 3, 4]}}),
        "aux-ids-huge": _cfg(**{ids_key: {"eagle_aux_hidden_state_layer_ids": [2**62, 3, 4]}}),
        "aux-ids-empty": _cfg(**{ids_key: {"eagle_aux_hidden_state_layer_ids": []}}),
        "aux-ids-2000": _cfg(**{ids_key: {"eagle_aux_hidden_state_layer_ids": list(range(2000))}}),
        "aux-ids-bools": _cfg(**{ids_key: {"eagle_aux_hidden_state_layer_ids": [True, 3, 4]}}),
        "eagle-config-list": _cfg(**{ids_key: [1, 3, 4]}),
        "eagle-config-missing": _cfg(**{ids_key: None}),
        "weights-garbage": lambda d: (d / "model.safetensors").write_bytes(b"garbage" * 9),
        "weights-empty": lambda d: (d / "model.safetensors").write_bytes(b""),
        "weights-truncated": _weights_bytes(lambda b: b[: len(b) // 2]),
        "weights-huge-header": _weights_bytes(lambda b: struct.pack("<Q", 1 << 62) + b[8:]),
        "weights-missing": lambda d: (d / "model.safetensors").unlink(),
        "weights-a-folder": _replaced("model.safetensors", Path.mkdir),
        "weights-fifo": _replaced("model.safetensors", os.mkfifo),
        "weights-link-out": _replaced("model.safetensors", lambda p: p.symlink_to("/etc/passwd")),
        "weights-link-dev-zero": _replaced(
            "model.safetensors", lambda p: p.symlink_to("/dev/zero")
        ),
        "pickle-only": _pickled_draft,
        "fc-1d": _tensors(**{"fc.weight": torch.zeros(7)}),
        "fc-wrong-width": _tensors(**{"fc.weight": torch.zeros(H, 2 * H)}),
        "fc-int64": _tensors(**{"fc.weight": torch.zeros(H, 3 * H, dtype=torch.int64)}),
        "fc-nan": _tensors(**{"fc.weight": torch.full((H, 3 * H), float("nan"))}),
        "fc-missing": _tensors(**{"fc.weight": None}),
        "lm-head-0-rows": _tensors(**{"lm_head.weight": torch.zeros(0, H)}),
        "lm-head-wrong-width": _tensors(**{"lm_head.weight": torch.zeros(V, 3)}),
        "lm-head-bool": _tensors(**{"lm_head.weight": torch.zeros(V, H, dtype=torch.bool)}),
        "lm-head-missing": _tensors(**{"lm_head.weight": None}),
        "norm-0-d": _tensors(**{"norm.weight": torch.tensor(1.0)}),
        "attention-wrong-shape": _tensors(
            **{"midlayer.self_attn.q_proj.weight": torch.zeros(3, 5)}
        ),
        "d2t-out-of-range": _tensors(d2t=torch.full((V,), 10**9, dtype=torch.int64)),
        "d2t-negative": _tensors(d2t=torch.full((V,), -(10**6), dtype=torch.int64)),
        "d2t-float": _tensors(d2t=torch.zeros(V, dtype=f32)),
        "d2t-2d": _tensors(d2t=torch.zeros(V, 2, dtype=torch.int64)),
        "d2t-short": _tensors(d2t=torch.zeros(3, dtype=torch.int64)),
        "t2d-wrong-length": _tensors(t2d=torch.ones(3, dtype=torch.bool)),
        "t2d-int": _tensors(t2d=torch.ones(V, dtype=torch.int64) * 7),
        "compressed-vocab, d2t out of range": lambda d: (
            (
                _cfg(draft_vocab_size=V // 2)(d),
                _tensors(
                    **{
                        "lm_head.weight": torch.randn(V // 2, H),
                        "d2t": torch.full((V // 2,), 10**9, dtype=torch.int64),
                        "t2d": torch.ones(V, dtype=torch.bool),
                    }
                )(d),
            )
            and None
        ),
        "embed-wrong-shape": _tensors(**{"embed_tokens.weight": torch.zeros(3, 3)}),
        "embed-int": _tensors(**{"embed_tokens.weight": torch.zeros(V, H, dtype=torch.int64)}),
        "float8 weights": _tensors(**{"fc.weight": torch.zeros(H, 3 * H).to(torch.float8_e4m3fn)}),
        "an index outside": lambda d: (d / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {"fc.weight": "../../world/model/model.safetensors"}})
        ),
        "an index of garbage": lambda d: (d / "model.safetensors.index.json").write_text("{"),
    }
    out: list[tuple[str, Make]] = []
    for name, change in changes.items():

        def make(folder: Path, world: World, change: Any = change) -> None:
            shutil.copytree(world.draft, folder / "draft")
            change(folder / "draft")
            _good_shard(folder)
            write_variants(folder, world, _base_text())

        out.append((name, make))
    return out


def draft_cells() -> list[Cell]:
    draft_on = {"draft": True}
    every = Cell(
        "layout+probe+shard families",
        "pytest",
        lambda f, w: _pytest("c-probe.yaml", ["shards"], "--eagle-no-sharpness"),
        _fam(contract=PROBE_ON, no_sharpness=True),
    )
    draft = Cell(
        "draft",
        "pytest",
        lambda f, w: _pytest("c-draft.yaml", ["shards"], "--eagle-checks", "draft"),
        _fam(["draft"], contract=draft_on),
    )
    return [
        _alone("draft", "c-draft.yaml", on=draft_on),
        _alone("draft", "c-probe.yaml", label="draft+target", on=PROBE_ON),
        _alone("probe", "c-probe.yaml", on=PROBE_ON),
        _alone("layout", "c-draft.yaml", on=draft_on),
        Cell("probe (command)", "cli", lambda f, w: _probe_cmd("draft", str(w.model)), _only()),
        every,
        draft,
        _xdist(draft),
        _xdist(every),
    ]


# capture files ----------------------------------------------------------------------------


def capture_inputs(world_data: Callable[[], dict[str, Any]]) -> list[tuple[str, Make]]:
    import test_hostile_captures as hcap

    data = world_data()
    out: list[tuple[str, Make]] = []
    for name, case in hcap._cases(data).items():

        def make(folder: Path, world: World, name: str = name, case: Any = case) -> None:
            (folder / "captures").mkdir(parents=True)
            hcap._write_case(world.capture_data, folder / "captures", f"capture_{name}", case)
            _good_shard(folder)
            write_variants(folder, world, _base_text())

        out.append((name, make))

    def things(kind: str) -> Make:
        def make(folder: Path, world: World) -> None:
            caps = folder / "captures"
            caps.mkdir(parents=True)
            target = caps / "capture_x.safetensors"
            if kind == "fifo":
                os.mkfifo(target)
            elif kind == "dev-zero":
                target.symlink_to("/dev/zero")
            elif kind == "dangling":
                target.symlink_to(folder / "nowhere")
            elif kind == "folder":
                target.mkdir()
            elif kind == "loop":
                (caps / "sub").symlink_to(caps)
            _good_shard(folder)
            write_variants(folder, world, _base_text())

        return make

    for kind in ("fifo", "dev-zero", "dangling", "folder", "loop"):
        out.append((f"not a file: {kind}", things(kind)))
    return out


def _with_capture(contract: str, shards: list[str], *options: str) -> list[Cell]:
    """The shard families and capture in pytest (``options``: where the captures come
    from), again with a user's test on the ``eagle_capture`` fixture, and under xdist."""
    cell = Cell(
        "shard families+capture",
        "pytest",
        lambda f, w: _pytest(contract, shards, *options, "--eagle-no-sharpness"),
        _fam(capture=True, no_sharpness=True),
    )
    return [cell, replace(cell, family="fixtures eagle_capture", user_test=USER_TEST), _xdist(cell)]


def capture_cells() -> list[Cell]:
    caps = ["--captures", "captures", "--checks", "capture"]
    return [
        Cell(
            "capture",
            "cli",
            lambda f, w: _check("c-base.yaml", "shards", extra=caps),
            _fam(["capture"], capture=True),
        ),
        *_with_capture("c-base.yaml", ["shards"], "--eagle-captures", "captures"),
    ]


# HTTP answers of the SGLang stand-in -----------------------------------------------------


def http_faults() -> dict[str, tuple[str, Any]]:
    import test_hostile_http as hh

    return {
        **{f"generate {k}": ("/generate", f) for k, (f, _) in hh.GENERATE.items()},
        **{f"server_info {k}": ("/server_info", hh._answer(v)) for k, v in hh.SERVER_INFO.items()},
        **{f"model_info {k}": ("/model_info", hh._answer(v)) for k, v in hh.MODEL_INFO.items()},
        "server_info 5MB": (
            "/server_info",
            hh._answer({"version": "0.5.23", "pad": "x" * (5 << 20)}),
        ),
        "trickle": ("", hh._trickle),
        "silent": ("", hh._hang),
    }


def http_inputs() -> list[tuple[str, Make]]:
    out: list[tuple[str, Make]] = []
    for name in http_faults():

        def make(folder: Path, world: World) -> None:
            assert world.demo is not None
            shard, contract, _ = world.demo
            for k in range(2):
                shutil.copyfile(shard, folder / f"data_{k}.ckpt")
            shutil.copyfile(contract, folder / "c.yaml")
            # the floor the measured-acceptance cells need (min_accept_length, with a draft)
            (folder / "c-floor.yaml").write_text(
                variant(contract.read_text(), draft=world.draft, floor=True)
            )

        out.append((name, make))
    return out


def _server(name: str) -> Callable[[], contextlib.AbstractContextManager[str]]:
    import socketserver

    import test_hostile_http as hh
    from sglang_standin import Launch, SGLangStandin

    # the stand-in's own errors (a client that hung up at its cap) are not the CLI's
    socketserver.BaseServer.handle_error = lambda *_: None  # type: ignore[method-assign]
    where, fault = http_faults()[name]

    def server() -> Any:
        if not where:
            return SGLangStandin(Launch(fault=fault))
        script = hh.Script({where: [fault]}, always=hh.LOOP)
        return SGLangStandin(Launch(mode="aux", layer_ids=[1, 3, 4], fault=script))

    return server


def http_cells() -> list[Cell]:
    url = ["--sglang-url", "{url}", "--sglang-timeout", "5"]
    purl = ["--eagle-sglang-url", "{url}", "--eagle-sglang-timeout", "5"]
    shards = ["data_0.ckpt", "data_1.ckpt"]
    measured = Cell(
        "measured-acceptance",
        "pytest",
        lambda f, w: _pytest(
            "c-floor.yaml",
            shards,
            *["--eagle-measure-sglang-url", "{url}", "--eagle-measure-timeout", "5"],
            *["--eagle-checks", "measured-acceptance"],
        ),
        _fam(["measured-acceptance"], contract=DRAFT_ON | {"floor": True}, measure=True),
    )
    return [
        Cell(
            "capture",
            "cli",
            lambda f, w: _check("c.yaml", *shards, extra=[*url, "--checks", "capture"]),
            _fam(["capture"], capture=True),
        ),
        Cell(
            "record",
            "cli",
            lambda f, w: [
                "record",
                "c.yaml",
                *shards,
                "--sglang-url",
                "{url}",
                "--timeout",
                "5",
                "-o",
                "out/cap",
            ],
            _only(),
        ),
        # issue 36: the acceptance an engine measures, read from the same hostile answers
        Cell(
            "measure",
            "cli",
            lambda f, w: [
                "measure",
                "c-floor.yaml",
                *shards,
                "--sglang-url",
                "{url}",
                "--timeout",
                "5",
            ],
            _only("measured-acceptance"),
        ),
        measured,
        _xdist(measured),
        *_with_capture("c.yaml", shards, *purl),
    ]


# what the engine is told (issue 39): speculation profiles and serving environments --------


def serving_inputs() -> list[tuple[str, Make]]:
    """A hostile speculation profile beside a hostile serving environment, each input both:
    test_hostile_profiles' good profile with one field made hostile."""
    from test_hostile_profiles import GOOD as PROFILE

    rates = PROFILE["marginal_accept_rates"]
    profiles: list[tuple[str, bytes]] = [
        ("good", json.dumps(PROFILE).encode()),
        ("NaN mean", json.dumps({**PROFILE, "mean_accept_length": float("nan")}).encode()),
        ("1e400 rate", json.dumps(PROFILE).replace("0.8,", "1e400,", 1).encode()),
        ("rates a string", json.dumps({**PROFILE, "marginal_accept_rates": "0.8"}).encode()),
        ("10^6 rates", json.dumps({**PROFILE, "marginal_accept_rates": rates * 333_334}).encode()),
        (
            "histogram -5",
            json.dumps({**PROFILE, "acceptance_length_histogram": {"1": -5}}).encode(),
        ),
        (
            "histogram 10^9 keys",
            json.dumps({**PROFILE, "acceptance_length_histogram": {"1" * 400: 1}}).encode(),
        ),
        ("nested 10^5", b"[" * 100_000),
        ("top-level list", b"[1, 2, 3]"),
        ("not UTF-8", b"\xff\xfe\x00{"),
        ("empty", b""),
        ("12 MB", b'{"pad": "' + b"x" * (12 << 20) + b'"}'),
    ]
    envs = [
        b"SGLANG_SIMULATE_ACC_LEN=3.5\n",
        b"no equals sign here\n",
        b"A=1\x00B=2\x00SGLANG_SIMULATE_ACC_LEN=abc\x00",
        b'export X="unterminated\n',
        b"\xff\xfe binary \x00\x01",
        b"K=" + b"v" * (3 << 20) + b"\n",
        b"=no name\n",
        b"TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS=1e400\n",
        b"",
        b"X=1\n" * 200_000,
        b"SIMULATE_ACC_LEN=-1\n",
        b"PATH=/usr/bin\n",
    ]
    out: list[tuple[str, Make]] = []
    for (name, profile), env in zip(profiles, envs, strict=True):

        def make(folder: Path, world: World, profile: bytes = profile, env: bytes = env) -> None:
            (folder / "p.json").write_bytes(profile)
            (folder / "env.txt").write_bytes(env)
            _good_shard(folder)
            write_variants(folder, world, _base_text())

        out.append((f"profile {name}, env {env[:24]!r}", make))
    return out


def serving_cells() -> list[Cell]:
    env = ["--eagle-serving-env", "env.txt", "--eagle-no-sharpness"]
    gate = Cell(
        "shard families (--eagle-serving-env)",
        "pytest",
        lambda f, w: _pytest("c-base.yaml", ["shards"], *env),
        _fam(no_sharpness=True),
    )
    return [
        Cell(
            "profile",
            "cli",
            lambda f, w: ["profile", "p.json", "--compare", "p.json", "--json"],
            _only("acceptance-profile"),
        ),
        Cell(
            "check --serving-env",
            "cli",
            lambda f, w: _check("c-base.yaml", "shards", extra=["--serving-env", "env.txt"]),
            _fam(),
        ),
        gate,
        _xdist(gate),
    ]


# where CI runs (issue 41): a user who cannot write the home, the cache or the checkout -------

FS_PLACES = {  # input -> (HOME, XDG_CACHE_HOME, checkout read-only); out/home is HOME
    "HOME of another user (mode 000)": ("000", None, False),
    "HOME read-only (mode 555), XDG_CACHE_HOME a file": ("555", "file", False),
    "HOME a file, XDG_CACHE_HOME of another user (mode 000)": ("file", "000", False),
    "checkout read-only (chmod -R a-w but out/), HOME of another user": ("000", None, True),
}
GOOD_SHARD = "shards/rows_0-2000/data_1.ckpt"


def fs_inputs() -> list[tuple[str, Make]]:
    """One shard with a finding (NaN states) beside a good one, the demo's contract: the
    same folder in every place; :func:`fs_lock` takes the writes away after it is made."""

    def make(folder: Path, world: World) -> None:
        import test_hostile_shards as hs

        bad = hs.good(aux_hidden_state=torch.full((1, T, 3 * H), float("nan")))
        (folder / "shards" / CKPT).parent.mkdir(parents=True)
        torch.save(bad, folder / "shards" / CKPT)
        torch.save(hs.good(), folder / GOOD_SHARD)
        (folder / "c-base.yaml").write_text(_base_text(), "utf-8")

    return [(name, make) for name in FS_PLACES]


def fs_lock(name: str, folder: Path) -> dict[str, str | None]:
    """After the folder and its out/ are made: the modes of the input's place, and the run's
    environment. Everything is readable by any user (the run may be nobody's); out/ is
    writable by any user but for the home or cache folder the input takes away."""
    import unprivileged

    unprivileged.readable(folder)
    for here, _, _ in os.walk(folder / "out"):
        os.chmod(here, 0o777)
    home, xdg = folder / "out" / "home", folder / "out" / "xdg"
    env: dict[str, str | None] = {"HOME": str(home), "XDG_CACHE_HOME": None}
    modes = {"000": 0, "555": 0o555}
    home_is, xdg_is, checkout = FS_PLACES[name]
    for path, what in ((home, home_is), (xdg, xdg_is)):
        if what == "file":
            path.write_text("not a folder\n")
        elif what is not None:
            path.mkdir()
            os.chmod(path, modes[what])
    if xdg_is is not None:
        env["XDG_CACHE_HOME"] = str(xdg)
    if checkout:
        unprivileged.read_only(folder, keep=("out",))
    return env


def _fs_findings(report: str, bad: str = CKPT) -> Callable[[Path], str]:
    """A JSON report of ``check`` or ``audit``: a finding for the bad shard, as a normal run
    gives."""

    def judge(folder: Path) -> str:
        try:
            data = json.loads((folder / "out" / report).read_text("utf-8"))
        except (OSError, ValueError):
            return f"no {report}"
        runs = data.get("reports", [data])  # the plugin's report: one per contract
        found = [f for r in runs for f in r.get("findings", [])]
        if not any(str(f.get("file", "")).endswith(bad) for f in found):
            return f"no finding for {bad} in {report}"
        return ""

    return judge


def _fs_written(name: str) -> Callable[[Path], str]:
    return lambda folder: "" if (folder / "out" / name).is_file() else f"no out/{name}"


def _fs_skipped_naming_the_options(folder: Path) -> str:
    """Every ``eagle_capture`` test skipped, its reason naming the options to pass."""
    import xml.etree.ElementTree as ET

    try:
        tree = ET.parse(folder / "out" / "junit.xml")
    except (OSError, ET.ParseError):
        return "no out/junit.xml"
    cases = [c for c in tree.iter("testcase") if c.get("name", "").startswith("test_user")]
    reasons = [(c.find("skipped"), c) for c in cases]
    if not cases or any(r is None for r, _ in reasons):
        return f"{len(cases)} eagle_capture test(s), not all skipped"
    bad = [r.get("message", "") for r, _ in reasons if r is not None]
    bad = [m for m in bad if "--eagle-captures" not in m or "--eagle-sglang-url" not in m]
    return f"a skip that names no option: {bad[0][:120]}" if bad else ""


def fs_cells() -> list[Cell]:
    """check, infer -o, audit (its default cache), validate, the pytest gate (under xdist
    too) and a user's ``eagle_capture`` test with no capture source, each as an
    unprivileged user (tests/unprivileged.py) and with the verdict a normal run gives."""
    nosharp = "--eagle-no-sharpness"
    gate = Cell(
        "pytest gate",
        "pytest",
        lambda f, w: _pytest("c-base.yaml", ["shards"], nosharp),  # with out/r.json: _pytest's
        _fam(no_sharpness=True),
        expect=(1,),
        judge=_fs_findings("r.json"),
    )
    return [
        Cell(
            "check",
            "cli",
            lambda f, w: _check("c-base.yaml", extra=["--no-sharpness"]),
            _fam(no_sharpness=True),
            expect=(1,),
            judge=_fs_findings("r.json"),
        ),
        Cell(
            "infer -o",
            "cli",
            lambda f, w: ["infer", GOOD_SHARD, "--num-layers", "8", "-o", "out/c.yaml"],
            _only(),
            expect=(0,),
            judge=_fs_written("c.yaml"),
        ),
        Cell(
            "audit",
            "cli",
            lambda f, w: ["audit", "c-base.yaml", "--json", "out/a.json"],
            _only("audit"),
            expect=(1,),
            judge=_fs_findings("a.json"),
        ),
        Cell("validate", "cli", lambda f, w: ["validate", "c-base.yaml"], _only(), expect=(0,)),
        gate,
        Cell(
            "fixtures eagle_capture, no capture source",
            "pytest",
            lambda f, w: _pytest("c-base.yaml", ["shards"], nosharp, "--junitxml", "out/junit.xml"),
            _fam(no_sharpness=True),
            user_test=USER_TEST,
            expect=(1,),
            judge=_fs_skipped_naming_the_options,
        ),
        _xdist(gate),
    ]


# -- the plan: every (class, input, cell) --------------------------------------------------


@dataclass
class Planned:
    klass: str
    name: str
    make: Make
    cell: Cell
    server: Callable[[], contextlib.AbstractContextManager[str]] | None = None
    covers: frozenset[str] = field(default_factory=frozenset)


def _capture_data_stub() -> dict[str, Any]:
    """What test_hostile_captures' cases are made from, without the world
    (:func:`capture_data` in a folder of its own)."""
    with tempfile.TemporaryDirectory() as tmp:
        return capture_data(Path(tmp))


def plan_matrix(
    seed: int = 22,
    quick: bool = False,
    classes: Iterable[str] = CLASSES,
    n2_every: int = 4,
    world_paths: tuple[Path, Path] = (Path("/world/model"), Path("/world/draft")),
) -> list[Planned]:
    """Every (class, input, cell) of the matrix, nothing written yet. ``quick``: one input
    per cell, a different one in each cell of a class."""
    rng = random.Random(seed)
    out: list[Planned] = []
    wanted = list(classes)
    for klass in wanted:
        if klass == "shards":
            inputs = shard_inputs(rng)
            cells_of: Callable[[str], list[Cell]] = lambda name: shard_cells(_shard_rel(name))  # noqa: E731
        elif klass == "datasets":
            inputs = dataset_inputs(rng)
            cells_of = lambda name: shard_cells(  # noqa: E731
                "shards/hidden_states/hs_0.safetensors", SPECULATORS
            )
        elif klass == "contracts":
            inputs = contract_inputs(rng, world_paths)
            cells_of = lambda name: contract_cells()  # noqa: E731
        elif klass == "models":
            inputs = model_inputs()
            cells_of = lambda name: model_cells()  # noqa: E731
        elif klass == "drafts":
            inputs = draft_inputs()
            cells_of = lambda name: draft_cells()  # noqa: E731
        elif klass == "captures":
            inputs = capture_inputs(_capture_data_stub)
            cells_of = lambda name: capture_cells()  # noqa: E731
        elif klass == "http":
            inputs = http_inputs()
            cells_of = lambda name: http_cells()  # noqa: E731
        elif klass == "serving":
            inputs = serving_inputs()
            cells_of = lambda name: serving_cells()  # noqa: E731
        elif klass == "fs":
            inputs = fs_inputs()
            cells_of = lambda name: fs_cells()  # noqa: E731
        elif klass == "outputs":
            continue  # made by hostile_inputs.output_cases at run time
        else:
            raise SystemExit(f"unknown class {klass}")
        for i, (name, make) in enumerate(inputs):
            cells = cells_of(name)
            for k, cell in enumerate(cells):
                if quick:
                    # one input per cell: spread over the class, a different one per cell
                    pick = (k * 7 + 3) % len(inputs) if len(inputs) > 1 else 0
                    if i != pick:
                        continue
                elif cell.heavy and i % n2_every:
                    continue
                server = _server(name) if klass == "http" else None
                out.append(Planned(klass, name, make, cell, server))
    return out


def covered(planned: Iterable[Planned]) -> dict[str, set[str]]:
    """shell -> the families (registry names and audit) some planned run executes."""
    out: dict[str, set[str]] = defaultdict(set)
    for p in planned:
        out[p.cell.shell] |= set(p.cell.covers())
    return out


def materialize(planned: list[Planned], root: Path, world: World) -> list[Case]:
    if any(p.klass == "fs" for p in planned):
        import unprivileged

        # asked once here (it starts an interpreter or two): the forked runs inherit it
        print(f"the fs class runs unprivileged as: {unprivileged.how() or 'this user (no way)'}")
    cases = []
    for i, p in enumerate(planned):
        folder = root / p.klass / f"{i:04d}"
        folder.mkdir(parents=True)
        p.make(folder, world)
        _prepare(folder, p.cell.user_test)
        env = fs_lock(p.name, folder) if p.klass == "fs" else {}
        argv = _with_captures(p.cell.argv(folder, world), world)
        judged = p.cell.verify and p.klass == "shards"  # a bad file beside a good one
        verify = _each_shard_judged(*_bad_and_good(p)) if judged else p.cell.judge
        watch = world.watch + ((world.demo[1],) if world.demo else ())
        cases.append(
            Case(
                p.klass,
                p.name,
                folder,
                argv,
                p.server,
                verify,
                family=p.cell.family,
                shell=p.cell.shell,
                covers=p.cell.covers(),
                watch=tuple(x for x in watch if x.is_dir()),
                timeout=p.cell.timeout,
                env=env,
                unprivileged=p.klass == "fs",
                expect=p.cell.expect,
            )
        )
    return cases


def _interleaved(cases: list[Case]) -> list[Case]:
    """Round robin over the classes (each in its own order: input by input, every cell of
    one input, xdist on every --n2-every-th): a --budget cut samples every class."""
    groups: dict[str, list[Case]] = defaultdict(list)
    for c in cases:
        groups[c.surface].append(c)
    out: list[Case] = []
    queues = list(groups.values())
    while queues:
        out += [q.pop(0) for q in queues]
        queues = [q for q in queues if q]
    return out


def _bad_and_good(p: Planned) -> tuple[str, str]:
    return Path(_shard_rel(p.name)).name, "data_1.ckpt"


# -- the table -------------------------------------------------------------------------------


def table(results: list[Any]) -> str:
    from hostile_runner import CLASSES as VERDICTS

    defects = [v for v in VERDICTS if v != "ok"]
    rows: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
    for r in results:
        rows[(r.case.surface, r.case.family or "-", r.case.shell)].append(r)
    head = ["class", "family", "shell", "inputs", *defects, "ok", "time s"]
    body = []
    for key in sorted(rows, key=lambda k: (_order(k[0]), k[1], SHELLS.index(k[2]))):
        rs = rows[key]
        counts = Counter(r.verdict for r in rs)
        body.append(
            [
                *key,
                str(len(rs)),
                *(str(counts[d] or "") for d in defects),
                str(counts["ok"]),
                f"{sum(r.seconds for r in rs):.0f}",
            ]
        )
    total = Counter(r.verdict for r in results)
    body.append(
        [
            "total",
            "",
            "",
            str(len(results)),
            *(str(total[d]) for d in defects),
            str(total["ok"]),
            f"{sum(r.seconds for r in results):.0f}",
        ]
    )
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    lines = [
        "  ".join(c.ljust(widths[i]) if i < 3 else c.rjust(widths[i]) for i, c in enumerate(row))
        for row in [head, *body]
    ]
    return "\n".join(lines)


def coverage(results: list[Any]) -> str:
    """family x shell: how many runs executed it."""
    from pytest_eagle_contract.plan.registry import FAMILIES

    names = [f.name for f in FAMILIES] + list(EXTRA_FAMILIES)
    count: dict[tuple[str, str], int] = Counter()
    for r in results:
        for f in r.case.covers:
            count[(f, r.case.shell)] += 1
    lines = ["family".ljust(12) + "".join(s.rjust(13) for s in SHELLS)]
    for n in names:
        lines.append(n.ljust(12) + "".join(str(count[(n, s)] or "-").rjust(13) for s in SHELLS))
    return "\n".join(lines)


def recorded(path: Path) -> list[Any]:
    """The results of a ``--record`` file, as run_all's (covers from the plan when the
    record has none)."""
    from types import SimpleNamespace

    rows = [json.loads(x) for x in path.read_text("utf-8").splitlines() if x.strip()]
    cells: dict[tuple[str, str, str], frozenset[str]] = {}
    if any("covers" not in r for r in rows):
        for p in plan_matrix(quick=True, classes=[c for c in CLASSES if c != "outputs"]):
            cells[(p.klass, p.cell.family, p.cell.shell)] = p.cell.covers()
    out = []
    for r in rows:
        key = (r["surface"], r["family"], r["shell"])
        case = SimpleNamespace(
            surface=r["surface"],
            name=r["name"],
            family=r["family"],
            shell=r["shell"],
            argv=r["argv"],
            folder=Path(r["folder"]),
            covers=frozenset(r.get("covers", cells.get(key, ()))),
        )
        out.append(
            SimpleNamespace(
                case=case,
                verdict=r["verdict"],
                code=r["code"],
                seconds=r["seconds"],
                rss=r["rss"],
                tail=r["tail"],
            )
        )
    return out


def _order(klass: str) -> int:
    return CLASSES.index(klass) if klass in CLASSES else len(CLASSES)


def _signature(r: Any) -> str:
    lines = [x.strip() for x in r.tail.splitlines() if x.strip()]
    for marker in ("[guard]", "Error", "Exception", "INTERNALERROR"):
        hits = [x for x in lines if marker in x]
        if hits:
            return hits[-1][:200]
    return (lines[-1] if lines else r.verdict)[:200]


def _command(r: Any) -> str:
    import shlex

    argv = list(r.case.argv)
    if argv and argv[0] == "pytest":
        cmd = "python -m pytest " + " ".join(map(shlex.quote, argv[1:]))
        cmd = f"PYTHONPATH={HERE} " + cmd
    else:
        cmd = "eagle-contract " + " ".join(map(shlex.quote, argv))
    again = (
        f"python benchmarks/hostile_sweep.py --matrix --classes {r.case.surface} "
        f"--only {shlex.quote(r.case.name)} --shells {shlex.quote(r.case.shell)} --keep"
    )
    if r.case.family and r.case.surface != "outputs":
        again += f" --families {shlex.quote(r.case.family)}"
    return f"{again}\n      or, with the inputs kept: (cd {r.case.folder} && {cmd})"


def defects(results: list[Any]) -> str:
    bad = [r for r in results if r.verdict != "ok"]
    if not bad:
        return "no defects"
    groups: dict[tuple[str, str, str, str], list[Any]] = defaultdict(list)
    for r in bad:
        groups[(r.case.surface, r.case.family, r.case.shell, r.verdict)].append(r)
    out = []
    for (klass, family, shell, verdict), rs in sorted(
        groups.items(), key=lambda kv: (_order(kv[0][0]), kv[0][1], kv[0][2])
    ):
        out.append(f"\n=== {verdict}: {klass} x {family} x {shell}: {len(rs)} input(s)")
        by_sig: dict[str, list[Any]] = defaultdict(list)
        for r in rs:
            by_sig[_signature(r)].append(r)
        for sig, group in by_sig.items():
            first = group[0]
            names = ", ".join(r.case.name for r in group[:8]) + (" ..." if len(group) > 8 else "")
            out.append(f"  - {sig}")
            out.append(f"    inputs ({len(group)}): {names}")
            out.append(f"    exit {first.code}; reproduce: {_command(first)}")
            tail = [x for x in first.tail.splitlines() if x.strip()][-6:]
            out.append("    | " + "\n    | ".join(tail))
    return "\n".join(out)


# -- main -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    import hostile_runner as runner

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrix", action="store_true", help="(hostile_sweep.py's switch)")
    ap.add_argument("--quick", action="store_true", help="one input per cell (~3 min, 2 cores)")
    ap.add_argument("--classes", default=",".join(CLASSES))
    ap.add_argument("--families", default="", help="only rows whose family label has one of these")
    ap.add_argument("--shells", default=",".join(SHELLS))
    ap.add_argument("--only", default="", help="only inputs whose name holds this")
    ap.add_argument("--n2-every", type=int, default=4, help="full form: xdist on every N-th input")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a run is a hang")
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--fresh", action="store_true", help="a new interpreter per run")
    ap.add_argument("--keep", action="store_true", help="keep the inputs and logs")
    ap.add_argument("--budget", type=float, help="seconds: start no run after this many")
    ap.add_argument("--record", type=Path, help="append each result here (JSON lines)")
    ap.add_argument("--table-from", type=Path, metavar="RECORD", help="print a --record's tables")
    args = ap.parse_args(argv)
    if args.table_from is not None:
        results = recorded(args.table_from)
        print(table(results), "\n\nruns that executed each family, per shell:", sep="")
        print(coverage(results))
        print(defects(results))
        return
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)  # forked children must not inherit a busy thread pool
    import pytest  # noqa: F401  (imported once, forked many times)
    import transformers  # noqa: F401

    import pytest_eagle_contract.shells.cli
    import pytest_eagle_contract.shells.plugin  # noqa: F401

    root = Path(tempfile.mkdtemp(prefix="eagle-matrix-"))
    if "fs" in args.classes.split(","):
        os.chmod(root, 0o755)  # the fs class's runs may be nobody's: they must reach inputs/
    logs = root / "logs"
    logs.mkdir()
    start = time.monotonic()
    classes = [c for c in args.classes.split(",") if c]
    shells = set(args.shells.split(","))
    families = [f for f in args.families.split(",") if f]
    world = build_world(root, http="http" in classes)
    planned = plan_matrix(args.seed, args.quick, classes, args.n2_every, (world.model, world.draft))
    planned = [p for p in planned if p.cell.shell in shells]
    if families:  # a label exactly, else labels holding it
        exact = [p for p in planned if p.cell.family in families]
        planned = exact or [p for p in planned if any(f in p.cell.family for f in families)]
    if args.only:  # an input's name exactly, else names holding it
        exact = [p for p in planned if p.name == args.only]
        planned = exact or [p for p in planned if args.only in p.name]
    cases = materialize(planned, root / "inputs", world)
    if "outputs" in classes and "cli" in shells and not families:
        outs = output_cases(root / "inputs")
        cases += [c for c in outs if args.only in c.name][: 3 if args.quick else None]
        for c in cases:
            if c.surface == "outputs":
                c.family = "outputs"
    cases = _interleaved(cases)  # a --budget cut samples every class
    print(f"{len(cases)} runs made in {time.monotonic() - start:.0f} s under {root}")
    if args.record is not None:
        args.record.write_text("")
    with ray_cluster(any("--backend ray" in c.family for c in cases)):
        results = runner.run_all(
            cases, args.jobs, args.timeout, args.fresh, logs, args.budget, args.record
        )
    if len(results) < len(cases):
        print(f"{len(cases) - len(results)} of {len(cases)} runs not started (--budget)")
    took = time.monotonic() - start
    print(f"ran in {took:.0f} s ({'fresh' if args.fresh else 'forked'}, {args.jobs} jobs)")
    print(table(results))
    print("\nruns that executed each family, per shell:")
    print(coverage(results))
    worst = max(results, key=lambda r: r.rss)
    slowest = max(results, key=lambda r: r.seconds)
    print(f"peak RSS {worst.rss / runner.GIB:.2f} GiB ({worst.case.surface}: {worst.case.name})")
    print(
        f"slowest {slowest.seconds:.1f} s ({slowest.case.surface}: {slowest.case.name}, "
        f"{slowest.case.family}, {slowest.case.shell})"
    )
    print("exit codes:", dict(sorted(Counter(r.code for r in results).items())))
    print(defects(results))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"\nkept under {root}")
    raise SystemExit(1 if any(r.verdict != "ok" for r in results) else 0)


if __name__ == "__main__":
    main()
