"""Issue 39: untrusted acceptance profiles and serving environments. A speculation profile
with any field replaced by hostile JSON (or measure's and probe's outputs garbled) ends in a
finding (exit 0 or 1: EC720 and kin), never a traceback; an environment listing of any text
or bytes is read or refused as a usage error naming why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import fuzz_settings, hostile_values
from hypothesis import given
from hypothesis import strategies as st

from pytest_eagle_contract.engines.knobs import read_env_file
from pytest_eagle_contract.errors import UsageError
from pytest_eagle_contract.shells.cli import main

GOOD = {
    "method": "eagle3",
    "num_speculative_tokens": 3,
    "conditional_accept_rates": [0.8, 0.625, 0.5],
    "marginal_accept_rates": [0.8, 0.5, 0.25],
    "mean_accept_length": 2.55,
    "acceptance_length_histogram": {"1": 20, "2": 30, "3": 25, "4": 25},
    "measurement_conditions": {"dataset": "mt_bench", "osl": 256, "num_samples": 80},
}
MEASURED = {"measured": {"engine": "sglang", "accept_length": 2.5, "per_position": [0.9, 0.6]}}
PROBED = {"convention": "accept_length: ...", "layouts": [{"name": "sglang", "per_step": [0.8]}]}
_VALUES = hostile_values(
    ["eagle3", "1", "2", "nan", "Infinity", "-1", "1e308", "per_position", "per_step"],
    key_size=12,
    leaves=10,
)
FUZZ = fuzz_settings(150)


def _run(tmp_path: Path, data: object, capsys: pytest.CaptureFixture[str]) -> int:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data, allow_nan=True))
    code = main(["profile", str(path), "--compare", str(path)])
    capsys.readouterr()
    return code


@FUZZ
@given(data=st.data())
def test_fuzz_profile_fields(
    data: st.DataObject, tmp_path_factory: pytest.TempPathFactory, capsys
) -> None:
    base = data.draw(st.sampled_from([GOOD, MEASURED, PROBED]))
    tree = json.loads(json.dumps(base))
    inner = tree.get("measured", tree)
    if "layouts" in tree:
        inner = tree["layouts"][0]
    for _ in range(data.draw(st.integers(1, 3))):
        key = data.draw(st.sampled_from(sorted(inner)) | st.text(max_size=12))
        inner[key] = data.draw(_VALUES)
    code = _run(tmp_path_factory.mktemp("p"), tree, capsys)
    assert code in (0, 1)


@FUZZ
@given(st.binary(max_size=400) | st.text(max_size=400).map(str.encode))
def test_fuzz_env_listing(tmp_path_factory: pytest.TempPathFactory, content: bytes) -> None:
    path = tmp_path_factory.mktemp("env") / "serving.env"
    path.write_bytes(content)
    try:
        env = read_env_file(path)
    except UsageError as exc:
        assert str(exc).startswith(f"--serving-env {path}")
        return
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())


def test_a_profile_nested_too_deep_is_ec720(tmp_path: Path, capsys) -> None:
    """Found by the hostile matrix's serving class: 100,000 nested arrays were a
    RecursionError traceback."""
    path = tmp_path / "profile.json"
    path.write_bytes(b"[" * 100_000)
    code = main(["profile", str(path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    assert [f["code"] for f in out["findings"]] == ["EC720"]


def test_a_profile_that_is_a_fifo_is_refused_not_read(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    path = tmp_path / "profile.json"
    os.mkfifo(path)
    cmd = [sys.executable, "-m", "pytest_eagle_contract", "profile", str(path)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr


HUGE = "1" + "0" * 400  # a JSON integer no float holds: float() of it is an OverflowError


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(GOOD).replace('"mean_accept_length": 2.55', f'"mean_accept_length": {HUGE}'),
        json.dumps(GOOD).replace("[0.8, 0.625, 0.5]", f"[0.8, {HUGE}, 0.5]"),
        json.dumps(GOOD).replace('"1": 20', f'"1": {HUGE}'),
        json.dumps(MEASURED).replace('"accept_length": 2.5', f'"accept_length": {HUGE}'),
        json.dumps(MEASURED).replace('"accept_length": 2.5', '"accept_length": NaN'),
        json.dumps(MEASURED).replace("}}", f', "rounds": {HUGE}}}}}'),
        json.dumps(PROBED).replace("[0.8]}", f'[0.8], "accept_length": {HUGE}}}'),
        json.dumps(PROBED).replace("[0.8]}", f'[0.8], "accept_length": 1.8, "chains": {HUGE}}}'),
    ],
    ids=["mean", "rate", "histogram", "measure-length", "measure-nan", "rounds", "probe-length",
         "chains"],
)  # fmt: skip
def test_numbers_past_a_float_are_ec720_or_ignored_not_a_traceback(tmp_path, capsys, text):
    """Each was an OverflowError traceback (float() of a 401-digit integer) in reading the
    profile, in its noise (probe's chains, measure's rounds) or in EC727's floor; NaN as
    measure's accept length was taken as the profile's mean. Read against a good profile."""
    path = tmp_path / "hostile.json"
    path.write_text(text)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(GOOD))
    code = main(["profile", str(good), "--compare", str(path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code in (0, 1)
    codes = [f["code"] for f in out["findings"] if f.get("file") == str(path)]
    if "rounds" in text or "chains" in text:  # a count no float holds: the noise unknown
        assert "EC720" not in codes, out["findings"]
    else:
        assert codes == ["EC720"], out["findings"]
