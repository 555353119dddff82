"""eagle-contract measure and the gate's measured-acceptance item: the shards' prompts sent
to a running engine with the draft loaded, its own acceptance counters against the floor.

The engines here are STAND-INS (tests/acceptance_standin.py) speaking each engine's wire
format with counters the test sets; tests/live/test_measure_llamacpp.py runs the real llama-server.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
from acceptance_standin import Engine, EngineStandin
from conftest import no_traceback

from pytest_eagle_contract.shards.writing import write_shard

FLAG = {"llama.cpp": "--llama-server-url", "sglang": "--sglang-url", "vllm": "--vllm-url"}
ENGINES = tuple(FLAG)
PROMPTS = (10, 11, 12)  # each shard's loss mask starts here: the prompt lengths


def project(root: Path, engine: str = "sglang", floor: float = 2.0, masks: str = "reply") -> Path:
    """Three specforge shards (24 tokens, the reply trained from PROMPTS[i] on) and a
    contract whose serving floor is ``floor``."""
    g = torch.Generator().manual_seed(0)
    for i, start in enumerate(PROMPTS):
        ids = torch.randint(0, 64, (24,), generator=g)
        mask = torch.zeros(24, dtype=torch.long)
        mask[0 if masks == "from-start" else start :] = 1
        slots = [torch.randn(24, 16, generator=g) for _ in range(4)]
        write_shard(root / "data", "specforge", i, ids, mask, slots)
    (root / "draft").mkdir(exist_ok=True)
    (root / "draft" / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    contract = root / "c.yaml"
    contract.write_text(
        "contract: measured\nversion: 1\n"
        "target: {arch: LlamaForCausalLM, num_hidden_layers: 8, hidden_size: 16, "
        "vocab_size: 64}\n"
        "training:\n  format: specforge\n  shards: data\n  slots:\n"
        "    - {layer: residual:2}\n    - {layer: residual:4}\n    - {layer: residual:6}\n"
        "    - {layer: final_norm}\n  fc_input: [0, 1, 2]\n  target_slot: 3\n"
        f"serving:\n  engine: {engine}\n  draft_config: draft\n  min_accept_length: {floor}\n"
    )
    return contract


def folded(text: str) -> str:
    return " ".join(text.split())


def measure(cli: Any, root: Path, engine: str, url: str, *extra: object) -> Any:
    res = cli("measure", "c.yaml", FLAG[engine], url, "--max-new-tokens", 32, *extra, cwd=root)
    no_traceback(res)
    return res


@pytest.mark.parametrize("engine", ENGINES)
def test_below_the_floor_fails_with_measured_floor_and_engine(
    engine: str, tmp_path: Path, cli: Any
) -> None:
    project(tmp_path, engine, floor=2.0)
    standin = Engine(engine, accepts=(0, 1))  # rounds accept 0, 1, 0, 1...: about 1.5
    with EngineStandin(standin) as url:
        res = measure(cli, tmp_path, engine, url)
    assert res.returncode == 1, res.stdout + res.stderr
    # the verdict first, then the findings on stdout as check prints them (render's short
    # view, wrapped at 120 columns: matched folded); stderr keeps only notes and progress
    lines = res.stdout.splitlines()
    assert lines[0].startswith("FAILED: 1 finding(s) [EC712] measuring 3 prompt(s)"), lines[0]
    out = folded(res.stdout)
    assert "EC712 measured-below-floor:" in out
    assert f"{engine} measured an accept length of 1.5" in out
    assert "below the floor 2.0" in out
    assert "hint:" in out and "eagle-contract explain EC712" in out
    assert "EC712" not in res.stderr
    assert res.stdout.count("rounds from:") == 1  # EC712's details are the block above it
    # the prompts sent are the shards' ids before their first loss-masked token
    sent = [r.get("prompt", r.get("input_ids")) for r in standin.requests]
    assert sorted(len(p) for p in sent) == list(PROMPTS)


@pytest.mark.parametrize("engine", ENGINES)
def test_above_the_floor_passes_and_reports_per_position(
    engine: str, tmp_path: Path, cli: Any
) -> None:
    project(tmp_path, engine, floor=2.0)
    with EngineStandin(Engine(engine, accepts=(3, 2), lag_s=0.3)) as url:
        res = measure(cli, tmp_path, engine, url, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    m = out["measured"]
    assert m["engine"] == engine and m["prompts"] == 3
    assert m["accept_length"] == pytest.approx(1 + m["accepted"] / m["rounds"], abs=1e-4)
    assert m["accept_length"] > 3.0
    # accepted 3, 2, 3, 2...: every round takes position 1 and 2, half of them 3, none 4
    per = m["per_position"]
    assert per[0] == per[1] == 1.0 and 0.4 < per[2] < 0.6 and per[3] == 0.0
    assert out["findings"] == []


def test_a_pass_prints_its_verdict_first_and_q_only_it(tmp_path: Path, cli: Any) -> None:
    project(tmp_path, "vllm", floor=2.0)
    with EngineStandin(Engine("vllm", accepts=(3, 2))) as url:
        res = measure(cli, tmp_path, "vllm", url)
        quiet = measure(cli, tmp_path, "vllm", url, "-q")
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "ok: 3 prompt(s) measured against the floor 2.0: passed", lines
    assert any(line.startswith("accept length ") for line in lines[1:])
    assert quiet.returncode == 0 and quiet.stdout.splitlines() == lines[:1]


@pytest.mark.parametrize("engine", ENGINES)
def test_an_engine_without_the_draft_is_ec713(engine: str, tmp_path: Path, cli: Any) -> None:
    project(tmp_path, engine)
    with EngineStandin(Engine(engine, draft=False)) as url:
        res = measure(cli, tmp_path, engine, url)
    assert res.returncode == 1
    assert "EC713" in res.stdout and "hint:" in res.stdout


def test_llama_server_without_metrics_gives_a_lower_bound(tmp_path: Path, cli: Any) -> None:
    project(tmp_path, "llama.cpp", floor=2.9)  # 3.0 exact (30 rounds), 2.82 the bound (33)
    standin = Engine("llama.cpp", accepts=(3, 1), metrics=False)
    with EngineStandin(standin) as url:
        res = measure(cli, tmp_path, "llama.cpp", url, "--json")
    out = json.loads(res.stdout)
    m = out["measured"]
    assert m["accept_length_is_lower_bound"] is True and m["per_position"] is None
    exact = 1 + standin.counters["accepted"] / standin.counters["rounds"]
    assert (exact, m["accept_length"]) == (3.0, pytest.approx(1 + 60 / 33, abs=1e-4))
    # under the floor as a bound only: a warning, not a failure
    assert res.returncode == 0
    assert [f["severity"] for f in out["findings"]] == ["warning"]
    assert "--metrics" in out["findings"][0]["hint"]


def test_an_unreachable_engine_is_ec715(tmp_path: Path, cli: Any) -> None:
    project(tmp_path, "vllm")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    res = measure(cli, tmp_path, "vllm", f"http://127.0.0.1:{port}", "--timeout", 5)
    assert res.returncode == 69  # as check and record: nothing answered, nothing judged
    assert "EC715" in res.stdout and "vllm at" in folded(res.stdout)


def _answer(status: int, body: bytes) -> Any:
    def fault(handler: Any, path: str) -> bool:
        if path not in ("/metrics", "/generate"):
            return False
        handler.send_response(status)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        return True

    return fault


@pytest.mark.parametrize(
    ("engine", "status", "body", "code"),
    [
        ("vllm", 200, b'vllm:spec_decode_num_drafts_total{engine="0"} NaN\n', "EC715"),
        ("vllm", 200, b'vllm:spec_decode_num_drafts_total{engine="0"} -3\n', "EC715"),
        ("vllm", 200, b"\xff\xfe not text", "EC715"),
        ("vllm", 200, b"vllm:num_requests_running 0\n", "EC713"),
        ("vllm", 200, b"# HELP x\n" * (1 << 20), "EC715"),  # 9 MiB: over the cap, unread
        (
            "vllm",
            200,
            b'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="-1"} 1\n',
            "EC715",
        ),
        ("vllm", 200, b'vllm:spec_decode_num_drafts_total{engine="0"} 1e400\n', "EC715"),
        ("sglang", 200, b'{"meta_info": {"spec_verify_ct": true}}', "EC715"),
        (
            "sglang",
            200,
            b'{"meta_info": {"spec_verify_ct": 2, "spec_num_correct_drafts": 1.5}}',
            "EC715",
        ),
        ("sglang", 200, b"[" * 100000, "EC715"),
        ("sglang", 500, b'{"error": {"message": "boom"}}', "EC715"),
        ("sglang", 200, b"[1, 2]", "EC715"),
        (
            "sglang",
            200,
            json.dumps(
                {
                    "meta_info": {
                        "spec_verify_ct": 4,
                        "spec_num_correct_drafts": 9,
                        "spec_num_proposed_drafts": 8,
                    }
                }
            ).encode(),
            "EC714",
        ),
        (
            "sglang",
            200,
            json.dumps(
                {
                    "meta_info": {
                        "spec_verify_ct": 2,
                        "spec_num_correct_drafts": 3,
                        "spec_num_proposed_drafts": 8,
                        "spec_correct_drafts_histogram": [0, 0, 0, 0, 0, 0, 7],
                    }
                }
            ).encode(),
            "EC714",
        ),
    ],
)
def test_hostile_answers_are_findings(
    engine: str, status: int, body: bytes, code: str, tmp_path: Path, cli: Any
) -> None:
    project(tmp_path, engine)
    with EngineStandin(Engine(engine, fault=_answer(status, body))) as url:
        res = measure(cli, tmp_path, engine, url)
    assert res.returncode == 1, res.stdout + res.stderr
    assert code in res.stdout and code not in res.stderr, res.stdout


def test_counters_that_contradict_the_timings_are_ec714(tmp_path: Path, cli: Any) -> None:
    """Another client drafting on the same llama-server between the /metrics reads."""
    project(tmp_path, "llama.cpp")
    standin = Engine("llama.cpp", accepts=(2,))

    def busy(handler: Any, path: str) -> bool:
        if path == "/completion":
            standin.counters["drafted"] += 4  # someone else's round
            standin.counters["rounds"] += 1
        return False

    standin.fault = busy
    with EngineStandin(standin) as url:
        res = measure(cli, tmp_path, "llama.cpp", url)
    assert res.returncode == 1
    assert "EC714" in res.stdout and "another client" in folded(res.stdout)


def test_shards_without_a_prompt_are_ec716(tmp_path: Path, cli: Any) -> None:
    project(tmp_path, "sglang", masks="from-start")
    with EngineStandin(Engine("sglang")) as url:
        res = measure(cli, tmp_path, "sglang", url)
    assert res.returncode == 1
    assert "EC716" in res.stdout and "leaves no prompt" in folded(res.stdout)


def test_usage_errors_exit_2(tmp_path: Path, cli: Any) -> None:
    project(tmp_path)
    two = cli(
        "measure", "c.yaml", "--sglang-url", "http://a:1", "--vllm-url", "http://b:2", cwd=tmp_path
    )
    assert two.returncode == 2 and "not allowed with" in two.stderr
    bad = cli("measure", "c.yaml", "--vllm-url", "ftp://x", cwd=tmp_path)
    assert bad.returncode == 2 and "--vllm-url" in bad.stderr
    none = cli("measure", "c.yaml", cwd=tmp_path)
    assert none.returncode == 2
    for res in (two, bad, none):
        no_traceback(res)


@pytest.mark.parametrize(("accepts", "outcome"), [((0, 1), "failed"), ((3,), "passed")])
def test_gate_item_fails_below_the_floor(
    accepts: tuple[int, ...], outcome: str, tmp_path: Path, pytester: pytest.Pytester
) -> None:
    project(pytester.path, "vllm", floor=2.0)
    with EngineStandin(Engine("vllm", accepts=accepts)) as url:
        result = pytester.runpytest_subprocess(
            "--eagle-contract",
            "c.yaml",
            "--eagle-checks",
            "measured-acceptance",
            "--eagle-measure-vllm-url",
            url,
            "--eagle-measure-max-new-tokens",
            "32",
            "-p",
            "no:randomly",
        )
    result.assert_outcomes(**{outcome: 1})
    if outcome == "failed":
        said = " ".join(result.stdout.str().split())  # the short view wraps at 120 columns
        assert "EC712" in said and "vllm measured an accept length of 1.500" in said, said
        assert "below the floor 2.0" in said, said


def test_gate_item_asked_for_without_an_engine_says_what_to_add(
    tmp_path: Path, pytester: pytest.Pytester
) -> None:
    project(pytester.path, "vllm")
    result = pytester.runpytest_subprocess(
        "--eagle-contract", "c.yaml", "--eagle-checks", "measured-acceptance"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*measured-acceptance*needs a running engine*--eagle-measure-*"])


def test_gate_runs_the_item_by_default_once_an_engine_is_given(
    tmp_path: Path, pytester: pytest.Pytester
) -> None:
    project(pytester.path, "sglang", floor=2.0)
    with EngineStandin(Engine("sglang", accepts=(0,))) as url:
        result = pytester.runpytest_subprocess(
            "--eagle-contract",
            "c.yaml",
            "--eagle-no-sharpness",
            "--eagle-measure-sglang-url",
            url,
            "-v",
            "-p",
            "no:randomly",
        )
    result.stdout.fnmatch_lines(["*measured-acceptance FAILED*", "*EC712*1.000*floor 2.0*"])


@pytest.mark.slow
def test_the_probe_runs_on_the_same_prompts_beside_the_measurement(
    tmp_path: Path, cli: Any
) -> None:
    """A random tiny target and a random draft: the probe's rows, at the engine's draft
    length, beside what the (stand-in) engine measured; the hint quotes the probe."""
    from safetensors.torch import save_file

    from pytest_eagle_contract.models.tiny import TinySpec, tiny_target
    from pytest_eagle_contract.models.trained import random_draft

    tiny_target(TinySpec()).save_pretrained(tmp_path / "target", safe_serialization=True)
    config, weights = random_draft(64, 512, [2, 4, 6], torch.Generator().manual_seed(1))
    project(tmp_path, "sglang", floor=2.0)
    (tmp_path / "draft" / "config.json").write_text(json.dumps(config))
    save_file(weights, str(tmp_path / "draft" / "model.safetensors"))
    with EngineStandin(Engine("sglang", accepts=(0, 1), k=3)) as url:
        res = measure(cli, tmp_path, "sglang", url, "--target-model", "target", "--json")
    assert res.returncode == 1, res.stderr
    out = json.loads(res.stdout)
    names = [e["name"] for e in out["probe"]]
    assert names[0] == "trainer" and len(names) == 2  # SGLang feeds residual:3, 5, 7
    assert all(len(e["per_step"]) == 3 for e in out["probe"])  # the engine's k: 9 / 3 rounds
    assert all(e["chains"] > 0 for e in out["probe"])
    [ec712] = out["findings"]
    assert "the probe" in ec712["hint"] and "estimate" in ec712["details"]
