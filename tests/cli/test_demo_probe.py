"""The demo's probe step: what SGLang's layout costs the buggy set's draft, in accepted
tokens, on a tiny target trained in the demo (``shells.demo.probe_buggy``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_eagle_contract.layers import Layer
from pytest_eagle_contract.shells import demo


@pytest.mark.slow
def test_buggy_draft_accepts_less_under_what_sglang_feeds(tmp_path: Path, cli: Any) -> None:
    own, *served = demo.probe_buggy(tmp_path)
    assert own.layers == (Layer(0), Layer(2), Layer(4))  # the buggy set's fc input
    assert own.accept_length >= 2  # a target that predicts: the random one gives ~1.07
    assert [e.layers for e in served] == [(Layer(2), Layer(4), Layer(5))]
    assert served[0].name.startswith("sglang 0.5.13")
    assert served[0].accept_length < 0.7 * own.accept_length
    # the saved pair is an ordinary target and draft: the probe command reads them
    res = cli(
        "probe", "--draft", tmp_path / "draft", "--target-model", tmp_path / "target",
        "--layout", "embed", "residual:2", "residual:4",
        "--sequences", "4", "--length", "40", "--prompt", "8", "--steps", "3", "--json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    sglang, given = json.loads(res.stdout)["layouts"]
    assert sglang["layers"] == ["residual:2", "residual:4", "residual:5"]  # the ids [1, 3, 4]
    assert given["layers"] == ["embed", "residual:2", "residual:4"]
    assert sglang["accept_length"] < given["accept_length"]
