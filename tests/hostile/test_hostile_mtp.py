"""Hostile MTP inputs (issue 38): target configs, architecture names, versions and contracts
that are garbage for ``resolve --method mtp`` and a ``method: mtp`` contract. Each ends in a
usage error (exit 2), a refusal or a finding (exit 1), never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

L = 61


def target(tmp_path: Path, data: object) -> Path:
    d = tmp_path / "target"
    d.mkdir(exist_ok=True)
    text = data if isinstance(data, str) else json.dumps(data)
    (d / "config.json").write_text(text)
    return d


CONFIGS = {
    "not json": "{",
    "a list": [1, 2],
    "architectures a number": {"architectures": 5, "num_hidden_layers": L},
    "num_hidden_layers a string": {
        "architectures": ["DeepseekV3ForCausalLM"],
        "num_hidden_layers": "61",
    },
    "no architectures": {"num_hidden_layers": L},
}


@pytest.mark.parametrize("case", list(CONFIGS))
def test_bad_target_config_is_a_usage_error(cli, tmp_path, case):
    t = target(tmp_path, CONFIGS[case])
    res = cli("resolve", "--engine", "sglang", "--method", "mtp", "--target-config", t, "--json")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr


@pytest.mark.parametrize(
    "arch", ["A" * 5000, "Deepseek\nV3", "ДипСик", "../../etc/passwd", "qwen3_5forcausallmmtp"]
)
@pytest.mark.parametrize("engine", ["sglang", "vllm", "llama.cpp", "mlx", "lmdeploy"])
def test_odd_architecture_names_are_refused(cli, engine, arch):
    res = cli(
        "resolve", "--engine", engine, "--method", "mtp", "--num-layers", L, "--arch", arch,
        "--json",
    )  # fmt: skip
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    out = json.loads(res.stdout)
    assert out["layers"] is None and len(out["refused"]) < 400


@pytest.mark.parametrize("version", ["0.0.1", "abc", ">=0.5.20", "9" * 40])
def test_odd_versions_are_refused(cli, version):
    res = cli(
        "resolve", "--engine", "sglang", "--method", "mtp", "--num-layers", L,
        "--arch", "DeepseekV3ForCausalLM", "--version", version,
    )  # fmt: skip
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr


@pytest.mark.parametrize("layers", ["0", "-3"])
def test_no_layers_is_a_usage_error(cli, layers):
    res = cli(
        "resolve", "--engine", "vllm", "--method", "mtp", "--num-layers", layers, "--arch", "x"
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr


@pytest.mark.parametrize(
    "version,code", [("0.0.1", 1), ("nonsense", 2), (">=9.9", 2), ("<0.5.12", 0)]
)
def test_contract_versions(cli, tmp_path, version, code):
    c = tmp_path / "c.yaml"
    c.write_text(
        "contract: x\nversion: 1\nmethod: mtp\n"
        f"target: {{arch: DeepseekV3ForCausalLM, num_hidden_layers: {L}, hidden_size: 64}}\n"
        "training:\n  slots:\n    - {layer: final_norm}\n"
        f"serving:\n  engine: sglang\n  version: '{version}'\n"
    )
    res = cli("check", c, "--checks", "layout")
    assert res.returncode == code and "Traceback" not in res.stderr, res.stderr
