"""Issue 39 item 2: benchmark knobs that fake acceptance, in a launch line (``--serving-args``,
``serving.launch``) and in the serving environment (``--serving-env FILE``, ``-`` for stdin),
through ``check`` and ``doctor`` run as a user runs them. Each knob's failing case is the
launch line or environment its engine's own code or a published recipe sets it in; each
passing case is the same line with the knob off. The environment file is untrusted: a bad
one is a usage error (exit 2) naming the line, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import no_traceback
from test_launch_method import write_draft

SERVING_ONLY = """\
contract: knobs
version: 1
target: {{arch: LlamaForCausalLM, num_hidden_layers: 32, hidden_size: 4096, vocab_size: 128256}}
serving:
  engine: {engine}
  aux_layer_ids: [2, 16, 29]
"""

# vLLM: the --speculative-config of an InferenceX/ATOM benchmark recipe (the synthetic
# acceptance pinned at 2.78), keys as vllm/config/speculative.py (vllm-project/vllm 002e77c1)
# reads them
VLLM_SYNTHETIC = (
    "vllm serve /models/Llama-3.1-8B-Instruct --speculative-config "
    '\'{"method": "eagle3", "model": "/models/EAGLE3-LLaMA3.1-Instruct-8B", '
    '"num_speculative_tokens": 3, "rejection_sample_method": "synthetic", '
    '"synthetic_acceptance_length": 2.78}\''
)
VLLM_STANDARD = VLLM_SYNTHETIC.replace(
    '"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.78',
    '"rejection_sample_method": "standard"',
)
# SGLang 0.5.23's benchmark/dspark_sps_profiler.py requires SGLANG_SIMULATE_ACC_LEN=1.0 on the
# server it profiles; the environment an srt-slurm recipe gives the server (AgentX's pinning)
SGLANG_ENV = (
    "SGLANG_SIMULATE_ACC_LEN=3.24\n"
    "SGLANG_SIMULATE_ACC_METHOD=match-expected\n"
    "SGLANG_SIMULATE_ACC_TOKEN_MODE=real-draft-token\n"
)
SGLANG_LAUNCH = (
    "python -m sglang.launch_server --model-path /models/Llama-3.1-8B-Instruct "
    "--speculative-algorithm EAGLE3 --speculative-draft-model-path /models/EAGLE3 "
    "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
)
# TensorRT-LLM reads the variable with int() (tensorrt_llm/_torch/speculative/interface.py)
TRTLLM_LAUNCH = (
    "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS=2 trtllm-serve /models/Llama-3.1-8B-Instruct "
    "--extra_llm_api_options spec.yaml"
)
# sglang-jax 0.0.1.post1's sgl_jax/test/test_utils.py launches its server with this variable
JAX_ENV = "SIMULATE_ACC_LEN=6\n"


def _contract(tmp_path: Path, engine: str) -> Path:
    path = tmp_path / "contract.yaml"
    path.write_text(SERVING_ONLY.format(engine=engine))
    return path


def _env(tmp_path: Path, text: str, name: str = "serving.env") -> Path:
    path = tmp_path / name
    path.write_text("PATH=/usr/local/bin:/usr/bin\nHOME=/root\n" + text)
    return path


def test_vllm_synthetic_rejection_in_the_speculative_config_fails(cli, tmp_path):
    contract = _contract(tmp_path, "vllm")
    res = cli("check", contract, "--serving-args", VLLM_SYNTHETIC)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "EC518 vllm-synthetic-acceptance" in res.stdout
    assert "synthetic_acceptance_length=2.78" in res.stdout
    assert 'remove "rejection_sample_method": "synthetic"' in res.stdout
    ok = cli("check", contract, "--serving-args", VLLM_STANDARD)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "EC518" not in ok.stdout


def test_vllm_0_19_synthetic_rate_fails(cli, tmp_path):
    """vLLM 0.19.0 spelled the target ``synthetic_acceptance_rate`` (its speculative.py)."""
    contract = _contract(tmp_path, "vllm")
    line = VLLM_SYNTHETIC.replace(
        '"synthetic_acceptance_length": 2.78', '"synthetic_acceptance_rate": 0.6'
    )
    res = cli("check", contract, "--serving-args", line)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "synthetic_acceptance_rate=0.6" in res.stdout


def test_sglang_simulated_acceptance_in_the_serving_env_fails(cli, tmp_path):
    contract = _contract(tmp_path, "sglang")
    env = _env(tmp_path, SGLANG_ENV)
    res = cli("check", contract, "--serving-args", SGLANG_LAUNCH, "--serving-env", env)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "EC517 sglang-simulated-acceptance" in res.stdout
    assert "SGLANG_SIMULATE_ACC_LEN=3.24" in res.stdout
    assert "SGLANG_SIMULATE_ACC_TOKEN_MODE=real-draft-token" in res.stdout  # named with it
    assert "unset SGLANG_SIMULATE_ACC_LEN" in res.stdout
    off = _env(tmp_path, "SGLANG_SIMULATE_ACC_LEN=-1\n", "off.env")  # SGLang's default: off
    ok = cli("check", contract, "--serving-args", SGLANG_LAUNCH, "--serving-env", off)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_sglang_knob_on_the_launch_line_itself_fails(cli, tmp_path):
    contract = _contract(tmp_path, "sglang")
    res = cli("check", contract, "--serving-args", "SGLANG_SIMULATE_ACC_LEN=1.0 " + SGLANG_LAUNCH)
    assert res.returncode == 1
    assert "the launch line sets SGLANG_SIMULATE_ACC_LEN=1.0" in res.stdout


def test_sglangs_old_unprefixed_name_is_sglangs_knob(cli, tmp_path):
    """sglang 0.4.6 and 0.5.2 read SIMULATE_ACC_LEN (srt/speculative/eagle_utils.py), the
    name sglang-jax keeps: served by SGLang it is EC517, by sglang-jax EC520."""
    contract = _contract(tmp_path, "sglang")
    res = cli("check", contract, "--serving-env", _env(tmp_path, JAX_ENV))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "EC517 sglang-simulated-acceptance" in res.stdout
    assert "0.4.6 to 0.5.2 read this name" in " ".join(res.stdout.split())  # wrapped prose


def test_a_shaping_knob_alone_is_a_warning(cli, tmp_path):
    contract = _contract(tmp_path, "sglang")
    env = _env(tmp_path, "SGLANG_SIMULATE_ACC_METHOD=match-expected\n")
    res = cli("check", contract, "--serving-env", env, "-v")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "warning: EC517" in res.stdout
    assert "inert while SGLANG_SIMULATE_ACC_LEN is off" in res.stdout


def test_trtllm_forced_acceptance_on_the_launch_line_fails(cli, tmp_path):
    contract = _contract(tmp_path, "trtllm")
    res = cli("check", contract, "--serving-args", TRTLLM_LAUNCH)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "EC519 trtllm-forced-acceptance" in res.stdout
    assert "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS=2" in res.stdout
    off = TRTLLM_LAUNCH.replace("=2 ", "=0 ")  # its default: off
    ok = cli("check", contract, "--serving-args", off)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_sglang_jax_simulated_acceptance_from_stdin_fails(tmp_path):
    """``--serving-env -`` reads the environment on stdin (``env | eagle-contract ...``)."""
    contract = _contract(tmp_path, "sglang-jax")
    exe = Path(sys.executable).with_name("eagle-contract")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "pytest_eagle_contract"]

    def run(stdin: str) -> subprocess.CompletedProcess[str]:
        args = [*cmd, "check", str(contract), "--serving-env", "-"]
        return subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=300)

    res = run("HOME=/root\n" + JAX_ENV)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "EC520 sglang-jax-simulated-acceptance" in res.stdout
    assert "--serving-env - sets SIMULATE_ACC_LEN=6" in res.stdout
    # sglang-jax reads the target's config for the ids: this contract has its EC508 either way
    ok = run("HOME=/root\n")
    assert ok.returncode == 1 and "EC508" in ok.stdout, ok.stdout + ok.stderr
    assert "EC520" not in ok.stdout


def test_a_nul_separated_environ_is_read(cli, tmp_path):
    """/proc/PID/environ's layout: NUL-separated, a value may span lines."""
    contract = _contract(tmp_path, "sglang")
    environ = tmp_path / "environ"
    environ.write_bytes(b"PS1=a\nb\0SGLANG_SIMULATE_ACC_LEN=2.5\0HOME=/root\0")
    res = cli("check", contract, "--serving-env", environ)
    assert res.returncode == 1
    assert "SGLANG_SIMULATE_ACC_LEN=2.5" in res.stdout


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"HOME=/root\nthis is not a variable\n", "serving.env:2: not KEY=VALUE"),
        (b"\xff\xfe\x00garbage", "not UTF-8 text"),
        (b"A=" + b"x" * (1 << 20) + b"\n", "larger than 1048576 bytes"),
        (b"1BAD=x\n", "serving.env:1: not KEY=VALUE"),
    ],
    ids=["not-a-line", "binary", "too-large", "bad-name"],
)
def test_a_bad_env_file_is_a_usage_error(cli, tmp_path, content, said):
    contract = _contract(tmp_path, "sglang")
    env = tmp_path / "serving.env"
    env.write_bytes(content)
    res = cli("check", contract, "--serving-env", env)
    no_traceback(res)
    assert res.returncode == 2, res.stdout + res.stderr
    assert said in res.stderr


def test_a_missing_env_file_is_a_usage_error(cli, tmp_path):
    res = cli("check", _contract(tmp_path, "sglang"), "--serving-env", tmp_path / "nope")
    no_traceback(res)
    assert res.returncode == 2
    assert "--serving-env" in res.stderr


def _draft(tmp_path: Path) -> Path:
    return write_draft(tmp_path / "draft", {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})


def test_doctor_json_fails_the_serving_args_seam_on_a_knob(cli, tmp_path):
    contract, draft = _contract(tmp_path, "vllm"), _draft(tmp_path)
    env = _env(tmp_path, "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS=1\n")
    res = cli("doctor", "--draft", draft, "--contract", contract, "--serving-env", env, "--json")
    no_traceback(res)
    seams = {s["name"]: s for s in json.loads(res.stdout)["seams"]}
    launch = seams["serving-args"]
    assert launch["status"] == "fail", launch
    assert [f["code"] for f in launch["findings"]] == ["EC519"]
    assert res.returncode == 1
    ok = cli(
        "doctor",
        "--draft",
        draft,
        "--contract",
        contract,
        "--serving-args",
        VLLM_STANDARD,
        "--json",
    )
    seams = {s["name"]: s for s in json.loads(ok.stdout)["seams"]}
    assert seams["serving-args"]["status"] == "pass", seams["serving-args"]


def test_the_plugin_fails_the_layout_item_on_a_knob(pytester):
    """``pytest --eagle-serving-env FILE``: the same knobs fail the contract's layout item."""
    (pytester.path / "c.yaml").write_text(SERVING_ONLY.format(engine="sglang"))
    env = pytester.path / "serving.env"
    env.write_text("HOME=/root\n" + SGLANG_ENV)
    result = pytester.runpytest("--eagle-contract", "c.yaml", "--eagle-serving-env", str(env))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*EC517 sglang-simulated-acceptance*"])
    env.write_text("HOME=/root\nSGLANG_SIMULATE_ACC_LEN=-1\n")
    ok = pytester.runpytest("--eagle-contract", "c.yaml", "--eagle-serving-env", str(env))
    ok.assert_outcomes(passed=1)
    env.write_text("not a variable\n")
    bad = pytester.runpytest("--eagle-contract", "c.yaml", "--eagle-serving-env", str(env))
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--eagle-serving-env*serving.env:1: not KEY=VALUE*"])
