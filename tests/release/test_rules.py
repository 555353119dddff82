"""Every rule code of the shard checks, made to fail on purpose (and seen passing)."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from pytest_eagle_contract.contract.model import load_contract
from pytest_eagle_contract.findings import RULES
from pytest_eagle_contract.plan.planner import Runner, plan
from pytest_eagle_contract.shards.synthetic import states_with_norms

H, T, VOCAB = 32, 40, 100
MEDIANS = (0.5, 4.0, 9.0)

CONTRACT = f"""\
contract: rules
version: 1
target: {{num_hidden_layers: 8, hidden_size: {H}, vocab_size: {VOCAB}, dtype: bfloat16}}
training:
  format: speculators-v1
  shards: shards
  sequence: {{max_length: 64}}
  slots:
    - {{layer: residual:2, norm: {{median: {MEDIANS[0]}, rtol: 0.3}}}}
    - {{layer: residual:5, norm: {{median: {MEDIANS[1]}, rtol: 0.3}}}}
    - {{layer: residual:8, norm: {{median: {MEDIANS[2]}, rtol: 0.3}}}}
"""


def good() -> dict:
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(T, dtype=torch.long)
    mask[:10] = 0
    return {
        "input_ids": torch.randint(0, VOCAB, (T,), generator=g),
        "loss_mask": mask,
        "hidden_states": [states_with_norms(T, H, m, 0.1, g, torch.bfloat16) for m in MEDIANS],
    }


def write(path: Path, data: object) -> None:
    torch.save(data, path)


class Evil:
    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


MARKER = Path(os.environ.get("TMPDIR", "/tmp")) / "eagle-contract-payload-ran"


def _edit(fn: Callable[[dict], None]) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        d = good()
        fn(d)
        write(path, d)

    return make


def _bytes(blob: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(blob)


def _truncated(path: Path) -> None:
    write(path, good())
    path.write_bytes(path.read_bytes()[:1000])


def _set(key, value):
    return lambda d: d.__setitem__(key, value(d))


CASES: dict[str, Callable[[Path], None]] = {
    "EC001": lambda p: write(p, [torch.zeros(3)]),
    "EC002": _truncated,
    "EC003": lambda p: write(p, {"input_ids": torch.zeros(3), "payload": Evil()}),
    "EC101": _edit(lambda d: d.pop("loss_mask")),
    "EC102": _edit(_set("attention_mask", lambda d: torch.ones(T))),
    "EC201": _edit(_set("hidden_states", lambda d: [h.float() for h in d["hidden_states"]])),
    "EC202": _edit(_set("loss_mask", lambda d: torch.ones(T + 5, dtype=torch.long))),
    "EC203": _edit(_set("hidden_states", lambda d: [h[:, :-2] for h in d["hidden_states"]])),
    "EC204": _edit(_set("hidden_states", lambda d: d["hidden_states"][:2])),
    "EC205": _edit(
        lambda d: d.update(
            input_ids=torch.zeros(80, dtype=torch.long),
            loss_mask=torch.ones(80, dtype=torch.long),
            hidden_states=[h.repeat(2, 1) for h in d["hidden_states"]],
        )
    ),
    "EC301": _edit(lambda d: d["input_ids"].__setitem__(3, VOCAB)),
    "EC302": _edit(lambda d: d["loss_mask"].__setitem__(12, 2)),
    "EC303": _edit(_set("loss_mask", lambda d: torch.zeros(T, dtype=torch.long))),
    "EC304": _edit(lambda d: d["hidden_states"][1].__setitem__((4, 7), float("inf"))),
    "EC401": _edit(lambda d: d["hidden_states"].reverse()),
}


def test_every_shard_rule_has_a_failing_case():
    # EC206 needs the current speculators layout: tests/unit/test_arrow_rows.py; EC009 (a check
    # that did not run) tests/hostile/test_model_inputs.py and
    # tests/hostile/test_no_silent_skips.py; EC207 (hc_mult widths) and EC31x (FP8 states)
    # tests/unit/test_numerics.py
    fp8 = {"EC207", "EC310", "EC311", "EC312", "EC313"}
    tokens = {code for code in RULES if code[:4] in ("EC33", "EC34")}  # tests/unit/test_tokens.py
    shard = {code for code in RULES if code < "EC500"}
    assert set(CASES) | {"EC206", "EC009"} | fp8 | tokens == shard


def _findings(tmp_path: Path, make: Callable[[Path], None] | None) -> list:
    (tmp_path / "shards").mkdir()
    (tmp_path / "c.yaml").write_text(CONTRACT)
    shard = tmp_path / "shards" / "data_0.pt"
    (make or (lambda p: write(p, good())))(shard)
    contract = load_contract(tmp_path / "c.yaml")
    units = plan(contract, without={"sharpness"})  # the self-test has its own tests
    assert {u.check for u in units} == {"structure", "values", "precision", "norms"}
    runner = Runner()
    return [f for u in units for f in runner.run(u)]


def test_good_shard_passes(tmp_path):
    assert _findings(tmp_path, None) == []


@pytest.mark.parametrize("code", sorted(CASES))
def test_rule_fails(tmp_path, code):
    MARKER.unlink(missing_ok=True)
    findings = _findings(tmp_path, CASES[code])
    codes = {f.code for f in findings}
    assert code in codes, findings
    f = next(f for f in findings if f.code == code)
    assert f.file == "data_0.pt" and f.contract.endswith("c.yaml") and f.line
    assert f.message
    assert not MARKER.exists(), "a pickle payload ran"


@pytest.mark.slow
def test_unsafe_shard_is_refused_from_the_cli_and_payload_never_runs(tmp_path, cli):
    MARKER.unlink(missing_ok=True)
    evil = tmp_path / "evil" / "data_0.pt"
    evil.parent.mkdir()
    CASES["EC003"](evil)
    assert b"system" in evil.read_bytes()  # the payload is really in the file
    (tmp_path / "c.yaml").write_text(CONTRACT)
    res = cli("check", tmp_path / "c.yaml", evil.parent)
    assert res.returncode == 1
    assert "EC003 unsafe-file" in res.stdout and "posix.system" in res.stdout
    res = cli("inspect", evil)
    assert res.returncode == 1 and "EC003" in res.stderr
    assert not MARKER.exists(), "a pickle payload ran"
    with pytest.raises(pickle.UnpicklingError):
        torch.load(evil, weights_only=True)


def test_waived_code_is_not_reported(tmp_path):
    make = CASES["EC102"]
    (tmp_path / "shards").mkdir()
    (tmp_path / "c.yaml").write_text(
        CONTRACT + "waive:\n  - {code: EC102, reason: our collator adds attention_mask}\n"
    )
    make(tmp_path / "shards" / "data_0.pt")
    contract = load_contract(tmp_path / "c.yaml")
    runner = Runner()
    assert [f for u in plan(contract) for f in runner.run(u)] == []


@pytest.mark.slow
def test_a_bad_shard_does_not_stop_the_run(tmp_path, cli):
    shards = tmp_path / "shards"
    shards.mkdir()
    (tmp_path / "c.yaml").write_text(CONTRACT)
    CASES["EC002"](shards / "data_0.pt")
    write(shards / "data_1.pt", good())
    CASES["EC301"](shards / "data_2.pt")
    res = cli("check", tmp_path / "c.yaml", "--sample", "all")
    assert res.returncode == 1
    assert "shard data_0.pt" in res.stdout and "shard data_2.pt" in res.stdout
    assert "on 3 shard(s)" in res.stdout
