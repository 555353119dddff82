"""Issue 39 item 3: ``eagle-contract profile``, run as a user runs it, on speculation
profiles laid out as NVIDIA/Model-Optimizer's writers lay them out (pull requests #2247,
specdec_bench, and #2315, ar_validate: no released nvidia-modelopt writes the file; 0.47.0
has no ``speculation_profile``). Each identity a profile must satisfy has a profile that
breaks it (EC721-EC723, EC725) and the good one that keeps it; a training-time profile
against a deploy-time one (EC724), and the draft length against another profile's and a
launch line's (EC726, SGLang's root-counting --speculative-num-draft-tokens against vLLM's
num_speculative_tokens). Unreadable input is EC720 or a usage error, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import no_traceback


def profile_of(histogram: dict[int, int], k: int, **fields: Any) -> dict[str, Any]:
    """A profile built from an accept-length histogram as the writers build it: marginal[i] =
    P(len >= i+2), conditional[i] = P(len >= i+2) / P(len >= i+1), the per-step mean, each
    rate rounded to 6 decimals, the histogram's keys the JSON strings ``json.dumps`` makes of
    int keys; ``fields`` override."""
    steps = sum(histogram.values())

    def at_least(t: int) -> float:
        return sum(c for n, c in histogram.items() if n >= t) / steps

    marginal = [at_least(i + 2) for i in range(k)]
    conditional = [at_least(i + 2) / at_least(i + 1) if at_least(i + 1) else 0.0 for i in range(k)]
    mean = sum(n * c for n, c in histogram.items()) / steps
    out: dict[str, Any] = {
        "method": "eagle3",  # specdec_bench's writer (PR #2247); ar_validate's omits it
        "num_speculative_tokens": k,
        "conditional_accept_rates": [round(x, 6) for x in conditional],
        "marginal_accept_rates": [round(x, 6) for x in marginal],
        "mean_accept_length": round(mean, 6),
        "mean_accept_length_per_request": round(mean + 0.013, 6),
        "acceptance_length_histogram": histogram,
        "measurement_conditions": {
            "dataset": "mt_bench",
            "osl": 256,
            "num_samples": 80,
            "validation": "online (ground truth recomputed after each accepted token)",
        },
    }
    out.update(fields)
    return out


TRAINED = {1: 187, 2: 241, 3: 219, 4: 353}  # K = 3
TRAINED_MEAN = sum(n * c for n, c in TRAINED.items()) / sum(TRAINED.values())  # 2.738
DEPLOYED_SAME = {1: 190, 2: 240, 3: 220, 4: 350}
DEPLOYED_WORSE = {1: 402, 2: 298, 3: 170, 4: 130}


def write(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_a_profile_as_modelopt_writes_it_passes(cli, tmp_path):
    good = write(tmp_path, "speculation_profile.json", profile_of(TRAINED, 3))
    res = cli("profile", good)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "ok: 1 profile(s) consistent" in res.stdout
    assert f"mean accept length {TRAINED_MEAN:.3f}" in res.stdout
    data = json.loads(cli("profile", good, "--json").stdout)
    assert data["ok"] is True and data["findings"] == []
    assert data["profiles"][0]["num_speculative_tokens"] == 3


def test_ar_validate_profile_without_method_passes(cli, tmp_path):
    """ar_validate's writer (PR #2315) leaves out ``method``."""
    data = profile_of(TRAINED, 3)
    del data["method"]
    res = cli("profile", write(tmp_path, "p.json", data))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "method not given" in res.stdout


def test_mean_that_is_not_one_plus_the_marginals_fails_ec721(cli, tmp_path):
    bad = write(tmp_path, "p.json", profile_of(TRAINED, 3, mean_accept_length=2.52))
    res = cli("profile", bad)
    assert res.returncode == 1
    assert "EC721 profile-mean-length" in res.stdout
    assert f"1 + sum(marginal_accept_rates) is {TRAINED_MEAN:.4f}" in res.stdout


def test_conditionals_that_are_not_the_marginals_ratios_fail_ec722(cli, tmp_path):
    data = profile_of(TRAINED, 3)
    data["conditional_accept_rates"] = data["marginal_accept_rates"]  # the two conventions mixed
    res = cli("profile", write(tmp_path, "p.json", data))
    assert res.returncode == 1
    assert "EC722 profile-conditional" in res.stdout
    assert "position(s) [1, 2]" in res.stdout


def test_a_histogram_of_another_measurement_fails_ec723(cli, tmp_path):
    data = profile_of(TRAINED, 3, acceptance_length_histogram=DEPLOYED_WORSE)
    res = cli("profile", write(tmp_path, "p.json", data))
    assert res.returncode == 1
    assert "EC723 profile-histogram" in res.stdout
    out_of_range = profile_of(TRAINED, 3, acceptance_length_histogram={**TRAINED, 5: 1})
    res = cli("profile", write(tmp_path, "q.json", out_of_range))
    assert res.returncode == 1
    assert "lengths [5] lie outside [1, num_speculative_tokens + 1 = 4]" in res.stdout


@pytest.mark.parametrize(
    ("histogram", "said", "code"),
    [
        ({1: 500}, "is exactly 1: not one draft token was accepted", 1),
        # a warning: a real draft on an easy workload can accept every token (the real
        # llama-server in tests/live/test_measure_llamacpp.py measured 5.0 of 5)
        ({4: 500}, "is exactly 4: every one of the 3 draft tokens was accepted", 0),
    ],
    ids=["nothing-accepted-fails", "everything-accepted-warns"],
)
def test_acceptance_of_exactly_one_or_the_maximum_is_ec725(cli, tmp_path, histogram, said, code):
    res = cli("profile", write(tmp_path, "p.json", profile_of(histogram, 3)), "-v")
    assert res.returncode == code, res.stdout
    assert "EC725 acceptance-saturated" in res.stdout
    assert said in " ".join(res.stdout.split())
    assert ("warning: EC725" in res.stdout) == (code == 0)


def test_a_deploy_time_profile_that_accepts_less_fails_ec724(cli, tmp_path):
    trained = write(tmp_path, "trained.json", profile_of(TRAINED, 3))
    worse = write(tmp_path, "deployed.json", profile_of(DEPLOYED_WORSE, 3))
    res = cli("profile", trained, "--compare", worse)
    assert res.returncode == 1, res.stdout
    assert "EC724 profile-drift" in res.stdout
    assert "position 0: conditional 0.8130 -> 0.5980" in res.stdout
    same = write(tmp_path, "same.json", profile_of(DEPLOYED_SAME, 3))
    ok = cli("profile", trained, "--compare", same)
    assert ok.returncode == 0, ok.stdout
    loose = cli("profile", trained, "--compare", worse, "--max-drop", "0.5")
    assert loose.returncode == 0, loose.stdout


def test_a_drop_within_the_sampling_noise_is_ec724_as_a_warning(cli, tmp_path):
    """20 steps each: 2.65 against 2.40 is 9.4 % less, but within 3 standard errors of what 20
    steps can tell (benchmarks/false_alarms_profiles.py: as an error, the same draft measured
    twice over 100 steps failed 44 times in 200). The same drop over 1,000 steps fails."""
    small = write(tmp_path, "small.json", profile_of({1: 5, 2: 4, 3: 4, 4: 7}, 3))
    small_worse = write(tmp_path, "small-worse.json", profile_of({1: 6, 2: 5, 3: 4, 4: 5}, 3))
    res = cli("profile", small, "--compare", small_worse, "-v")
    assert res.returncode == 0, res.stdout
    assert "warning: EC724" in res.stdout
    assert "measure more steps to tell" in " ".join(res.stdout.split())
    big = write(tmp_path, "big.json", profile_of({1: 250, 2: 200, 3: 200, 4: 350}, 3))
    big_worse = write(tmp_path, "big-worse.json", profile_of({1: 300, 2: 250, 3: 200, 4: 250}, 3))
    fails = cli("profile", big, "--compare", big_worse)
    assert fails.returncode == 1, fails.stdout
    assert "EC724 profile-drift" in fails.stdout and "warning: EC724" not in fails.stdout


def test_rates_rounded_to_three_decimals_keep_the_identities(cli, tmp_path):
    """A writer that rounds to 3 decimals: conditional[2] = 0.0056 / 0.0134 = 0.418, while the
    rounded marginals' ratio is 0.006 / 0.013 = 0.462 (EC722 when the identity was checked as
    a ratio); as a product, 0.418 * 0.013 = 0.0054 is marginal[2] = 0.006 within 2e-3."""
    hist = {1: 5000, 2: 4866, 3: 78, 4: 56}
    data = profile_of(hist, 3)
    for key in ("conditional_accept_rates", "marginal_accept_rates"):
        data[key] = [round(x, 3) for x in data[key]]
    data["mean_accept_length"] = round(data["mean_accept_length"], 3)
    res = cli("profile", write(tmp_path, "p.json", data))
    assert res.returncode == 0, res.stdout


def test_profiles_at_other_draft_lengths_are_compared_on_the_common_positions(cli, tmp_path):
    trained = write(tmp_path, "trained.json", profile_of(TRAINED, 3))
    five = {1: 187, 2: 241, 3: 219, 4: 200, 5: 100, 6: 53}
    deployed = write(tmp_path, "deployed.json", profile_of(five, 5))
    res = cli("profile", trained, "--compare", deployed)
    assert res.returncode == 0, res.stdout  # the first 3 positions accept alike
    assert "warning: EC726 draft-length-mismatch" in res.stdout
    assert "compared on the first 3 position(s)" in " ".join(res.stdout.split())  # wrapped


@pytest.mark.parametrize(
    ("launch", "served"),
    [
        (
            "python -m sglang.launch_server --speculative-algorithm EAGLE3 "
            "--speculative-num-steps 3 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 4",
            None,  # 4 draft tokens counting the root: 3 drafted, as the profile
        ),
        (
            "python -m sglang.launch_server --speculative-algorithm EAGLE3 "
            "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
            None,
        ),
        (
            'vllm serve m --speculative-config \'{"method": "eagle3", "model": "d", '
            '"num_speculative_tokens": 3}\'',
            None,
        ),
        (
            'vllm serve m --speculative-config \'{"method": "eagle3", "model": "d", '
            '"num_speculative_tokens": 4}\'',
            "drafts 4 (vLLM num_speculative_tokens 4)",
        ),
        (
            "python -m sglang.launch_server --speculative-algorithm EAGLE3 "
            "--speculative-num-steps 5 --speculative-eagle-topk 4 "
            "--speculative-num-draft-tokens 16",
            "drafts 5 (SGLang --speculative-num-steps 5",
        ),
    ],
    ids=["sglang-steps", "sglang-draft-tokens", "vllm-same", "vllm-longer", "sglang-tree"],
)
def test_the_draft_length_served_is_one_quantity_ec726(cli, tmp_path, launch, served):
    good = write(tmp_path, "p.json", profile_of(TRAINED, 3))
    res = cli("profile", good, "--serving-args", launch)
    assert res.returncode == 0, res.stdout
    if served is None:
        assert "EC726" not in res.stdout
    else:
        assert "warning: EC726 draft-length-mismatch" in res.stdout
        assert served in " ".join(res.stdout.split())  # wrapped prose


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("{not json", "is not JSON"),
        ("[1, 2]", "is not a JSON object"),
        (json.dumps({"num_speculative_tokens": 3}), "conditional_accept_rates is not a list"),
        (json.dumps(profile_of(TRAINED, 3, num_speculative_tokens=True)), "not a count"),
        (
            json.dumps(profile_of(TRAINED, 3, marginal_accept_rates=[0.8, 1.5, 0.2])),
            "not a rate in [0, 1]",
        ),
        (
            json.dumps(profile_of(TRAINED, 3, acceptance_length_histogram={"two": 3})),
            "key 'two' is not a length",
        ),
        (json.dumps(profile_of(TRAINED, 3, mean_accept_length="2.7")), "not a number"),
    ],
    ids=["not-json", "a-list", "no-rates", "bool-k", "rate-above-one", "bad-key", "str-mean"],
)
def test_an_unreadable_profile_is_ec720(cli, tmp_path, content, said):
    path = tmp_path / "p.json"
    path.write_text(content)
    res = cli("profile", path)
    no_traceback(res)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "EC720 profile-unreadable" in res.stdout
    assert said in " ".join(res.stdout.split())  # wrapped prose


def test_bad_arguments_are_usage_errors(cli, tmp_path):
    good = write(tmp_path, "p.json", profile_of(TRAINED, 3))
    for args in (
        (tmp_path / "missing.json",),
        (good, "--compare", tmp_path / "missing.json"),
        (good, "--max-drop", "1.5"),
        (good, "--serving-args", "vllm serve 'unclosed"),
    ):
        res = cli("profile", *args)
        no_traceback(res)
        assert res.returncode == 2, (args, res.stdout, res.stderr)


def test_quiet_prints_the_verdict_alone(cli, tmp_path):
    good = write(tmp_path, "p.json", profile_of(TRAINED, 3))
    loud, quiet = cli("profile", good), cli("profile", good, "-q")
    assert loud.returncode == quiet.returncode == 0, quiet.stderr
    assert len(loud.stdout.splitlines()) > 1 and str(good) in loud.stdout
    assert quiet.stdout.splitlines() == loud.stdout.splitlines()[:1]


def test_a_fifo_is_not_a_regular_file_and_a_missing_file_is_missing(cli, tmp_path):
    """A FIFO given as the profile is refused as what it is, never read (it would block)."""
    import os

    os.mkfifo(tmp_path / "p.json")
    for name, said in (("p.json", "not a regular file"), ("none.json", "no such file")):
        res = cli("profile", tmp_path / name)
        no_traceback(res)
        assert res.returncode == 2 and said in res.stderr, (name, res.stderr)


@pytest.mark.parametrize("engine", ["llama.cpp", "sglang", "vllm"])
@pytest.mark.parametrize(
    ("accepts", "said"),
    [((0,), "is exactly 1: not one draft token"), ((4,), "is exactly 5: every one of the 4")],
    ids=["nothing", "everything"],
)
def test_measure_holds_its_result_to_the_same_rule_ec725(cli, tmp_path, engine, accepts, said):
    """measure against test_measure's engine stand-ins: every round accepting 0 of 4 draft
    tokens, or all 4, is EC725; accepting 3 and 2 in turn (tests/cli/test_measure.py) is not."""
    from acceptance_standin import Engine, EngineStandin
    from test_measure import measure, project

    project(tmp_path, engine, floor=1.0)
    with EngineStandin(Engine(engine, accepts=accepts, k=4)) as url:
        res = measure(cli, tmp_path, engine, url)
    # exactly 1 fails (and is under the floor); exactly the maximum warns
    assert res.returncode == (1 if accepts == (0,) else 0), res.stdout + res.stderr
    found = " ".join(res.stdout.split())  # measure's findings: stdout, wrapped at 120
    assert "EC725" in found
    assert said in found
    with EngineStandin(Engine(engine, accepts=(3, 2), k=4)) as url:
        ok = measure(cli, tmp_path, engine, url)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "EC725" not in ok.stdout + ok.stderr


def test_measures_result_is_a_deploy_time_profile(cli, tmp_path):
    """``measure --json`` against test_measure's SGLang stand-in (rounds accepting 3 and 2 of
    4 draft tokens in turn), compared with a training-time profile at K = 4."""
    from acceptance_standin import Engine, EngineStandin
    from test_measure import measure, project

    project(tmp_path, "sglang", floor=1.0)
    with EngineStandin(Engine("sglang", accepts=(3, 2), k=4)) as url:
        res = measure(cli, tmp_path, "sglang", url, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    measured = tmp_path / "measured.json"
    measured.write_text(res.stdout)
    like = profile_of({3: 500, 4: 500}, 4)  # the same rounds: 2 and 3 accepted, as lengths
    worse = profile_of({4: 600, 5: 400}, 4)  # the training-time draft accepted more
    same = cli("profile", write(tmp_path, "like.json", like), "--compare", measured)
    assert same.returncode == 0, same.stdout
    assert "measured on sglang, num_speculative_tokens 4" in same.stdout
    drop = cli("profile", write(tmp_path, "worse.json", worse), "--compare", measured)
    assert drop.returncode == 1, drop.stdout
    assert "EC724 profile-drift" in drop.stdout


def floor_contract(tmp_path: Path, floor: float) -> Path:
    """A contract whose serving floor (``serving.min_accept_length``, probe's EC906 and
    measure's EC712) is ``floor``: one vLLM layout, the draft's config beside it."""
    (tmp_path / "draft").mkdir(exist_ok=True)
    (tmp_path / "draft" / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    contract = tmp_path / "c.yaml"
    contract.write_text(
        "contract: floored\nversion: 1\n"
        "target: {arch: LlamaForCausalLM, num_hidden_layers: 32, hidden_size: 4096, "
        "vocab_size: 128256}\n"
        f"serving:\n  engine: vllm\n  draft_config: draft\n  min_accept_length: {floor}\n"
    )
    return contract


@pytest.mark.parametrize("floor, code", [(3.0, 1), (2.5, 0)])
def test_a_profile_under_the_contracts_floor_fails_ec727(cli, tmp_path, floor, code):
    """TRAINED accepts 2.738 a step: under a floor of 3.0 it is EC727 at the contract's
    ``serving.min_accept_length``; a floor of 2.5 holds. The same floor holds --compare's."""
    contract = floor_contract(tmp_path, floor)
    path = write(tmp_path, "trained.json", profile_of(TRAINED, 3))
    res = cli("profile", path, "--contract", contract, "--json")
    no_traceback(res)
    assert res.returncode == code, res.stdout + res.stderr
    found = [f for f in json.loads(res.stdout)["findings"] if f["code"] == "EC727"]
    assert len(found) == (1 if code else 0)
    if found:
        assert found[0]["contract"] == str(contract) and found[0]["line"] == 7  # the floor
        assert found[0]["expected"] == ">= 3.0" and found[0]["found"] == "2.738"
    deployed = write(tmp_path, "deployed.json", profile_of(DEPLOYED_WORSE, 3))
    both = cli("profile", path, "--compare", deployed, "--contract", contract, "--json")
    files = {f["file"] for f in json.loads(both.stdout)["findings"] if f["code"] == "EC727"}
    assert str(deployed) in files  # 2.128 is under 2.5 and 3.0 alike


def test_profile_contract_errors_are_usage_errors(cli, tmp_path):
    path = write(tmp_path, "trained.json", profile_of(TRAINED, 3))
    missing = cli("profile", path, "--contract", tmp_path / "none.yaml")
    no_traceback(missing)
    assert missing.returncode == 2, missing.stdout + missing.stderr


def probe_json(per_step: list[float], chains: int, name: str = "sglang") -> dict[str, Any]:
    """``eagle-contract probe --json`` as it prints it (models/acceptance.py Estimate.to_dict:
    the trainer's layout first, then the served one; per_step rounded to 4 decimals)."""
    marginal, m = [], 1.0
    for c in per_step:
        m *= c
        marginal.append(m)
    row = {
        "layers": ["residual:2", "residual:16", "residual:29"],
        "accept_length": round(1 + sum(marginal), 4),
        "per_step": [round(p, 4) for p in per_step],
        "chains": chains,
        "positions_from": 0,
    }
    return {
        "convention": "accept_length: tokens per target forward, counting the target's own",
        "layouts": [{**row, "name": "trainer"}, {**row, "name": name}],
    }


def test_a_probe_estimate_is_compared_per_position_with_its_noise(cli, tmp_path):
    """A training-time profile (1,000 steps, 2.738) against probe estimates of the same draft:
    over 40 chains a drop to 2.457 lies within 3 standard errors of the probe's sampling noise
    (its chains, the variance its per-step rates give): a warning; the same rates over 4,000
    chains are an error; a probe of the trained rates passes."""
    train = write(tmp_path, "trained.json", profile_of(TRAINED, 3))
    few = write(tmp_path, "few.json", probe_json([0.72, 0.66, 0.55], 40))
    many = write(tmp_path, "many.json", probe_json([0.72, 0.66, 0.55], 4000))
    same = write(tmp_path, "same.json", probe_json([0.813, 0.7036, 0.6171], 400))
    warned = cli("profile", train, "--compare", few, "--json")
    no_traceback(warned)
    assert warned.returncode == 0, warned.stdout
    (drift,) = [f for f in json.loads(warned.stdout)["findings"] if f["code"] == "EC724"]
    assert drift["severity"] == "warning" and "measure more steps" in drift["hint"]
    failed = cli("profile", train, "--compare", many, "--json")
    assert failed.returncode == 1, failed.stdout
    (drift,) = [f for f in json.loads(failed.stdout)["findings"] if f["code"] == "EC724"]
    assert drift["severity"] == "error"
    rows = drift["details"].splitlines()  # per position: the drop against its own noise
    assert rows[0].strip() == "position 0: conditional 0.8130 -> 0.7200 (beyond 3 standard errors)"
    assert "position 2: conditional 0.6171 -> 0.5500" in rows[2]
    (drift,) = [f for f in json.loads(warned.stdout)["findings"] if f["code"] == "EC724"]
    assert "(within 3 standard errors)" in drift["details"]
    ok = cli("profile", train, "--compare", same)
    assert ok.returncode == 0 and "EC724" not in ok.stdout, ok.stdout
    assert "probe estimate, layout sglang" in ok.stdout
