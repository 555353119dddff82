"""The tpu-inference rules against every tpu-inference wheel (``tox -e tpu-releases``):
re-derives ``engines/tpu_rules.json`` with ``scripts/gen_tpu_rules.py`` (each release's own
default-ids method run on stub models, its capture loop, its model-path lists) and fails on
any difference. Needs the wheels: set EAGLE_CONTRACT_TPU_WHEELS=DIR
(``scripts/gen_tpu_rules.py DIR --download``). Never part of the default run.
"""

from __future__ import annotations

from release_helpers import wheel_folder

WHEELS = wheel_folder("EAGLE_CONTRACT_TPU_WHEELS", "tpu-inference", "tpu-releases")

import gen_tpu_rules as gen  # noqa: E402


def test_the_rules_file_is_what_the_releases_code_says():
    assert gen.main([str(WHEELS), "--check"]) == 0


def test_dflash_is_read_from_the_newest_release_s_own_code():
    """The DFlash facts ``resolve --engine tpu-inference --method dflash`` answers from: the
    newest wheel's JAX targets run on stub configs (the key, the fallback) and their loop."""
    newest = gen.SCAN.files(WHEELS)[-1]
    dflash = gen.derive(newest)["dflash"]
    assert dflash["runner"] and dflash["impl_check"] and dflash["asserts"]
    assert dflash["targets"], "no JAX target captures DFlash taps"
    for target in dflash["targets"].values():
        assert target["keys"] == "dflash_config.target_layer_ids"
        assert target["fallback"] == "range(L-n,L)"
        assert target["capture"] == "output"  # layer i's output: residual:i+1
