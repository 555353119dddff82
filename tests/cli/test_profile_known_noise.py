"""EC724's noise where one profile's steps are known (docs/rules.md, EC724): the training-time
histogram's noise alone bounds the difference's noise from below, so a drop within 3 of its
standard errors is a warning; the same drop with no steps known on either side is an error."""

from __future__ import annotations

import json

TRAINING = {
    "method": "eagle3",
    "num_speculative_tokens": 2,
    "conditional_accept_rates": [0.6, 0.5],
    "marginal_accept_rates": [0.6, 0.3],
    "mean_accept_length": 1.9,
    "acceptance_length_histogram": {"1": 4, "2": 3, "3": 3},  # ten steps: a wide noise
}
DEPLOY = {"measured": {"engine": "sglang", "accept_length": 1.75, "per_position": [0.5, 0.25]}}


def _ec724(cli, tmp_path, training):
    a, b = tmp_path / "training.json", tmp_path / "deploy.json"
    a.write_text(json.dumps(training))
    b.write_text(json.dumps(DEPLOY))
    res = cli("profile", a, "--compare", b, "--json")
    (f,) = [f for f in json.loads(res.stdout)["findings"] if f["code"] == "EC724"]
    return res, f


def test_a_drop_within_the_training_histograms_noise_is_a_warning(cli, tmp_path):
    res, f = _ec724(cli, tmp_path, TRAINING)
    assert f["severity"] == "warning" and "known sampling noise" in f["hint"], f
    assert res.returncode == 0


def test_the_same_drop_with_no_steps_known_is_an_error(cli, tmp_path):
    res, f = _ec724(cli, tmp_path, {**TRAINING, "acceptance_length_histogram": {}})
    assert f["severity"] == "error", f
    assert res.returncode == 1
