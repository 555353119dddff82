"""The vllm-ascend rules against every vllm-ascend sdist (``tox -e ascend-releases``):
re-derives ``engines/ascend_rules.json`` with ``scripts/gen_ascend_rules.py`` (each release's
``NPUModelRunner.load_model``, worker, patches and model registrations, read with tarfile and
ast) and fails on any difference. Needs the sdists: set EAGLE_CONTRACT_ASCEND_SDISTS=DIR
(``scripts/gen_ascend_rules.py DIR --download``). Never part of the default run.
"""

from __future__ import annotations

from release_helpers import wheel_folder

SDISTS = wheel_folder("EAGLE_CONTRACT_ASCEND_SDISTS", "vllm-ascend", "ascend-releases")

import gen_ascend_rules as gen  # noqa: E402


def test_the_rules_file_is_what_the_releases_code_says():
    assert gen.main([str(SDISTS), "--check"]) == 0


def test_dflash_runs_through_the_paired_vllm_runner_s_aux_layers():
    """The facts ``resolve --engine vllm-ascend --method dflash`` answers from: the newest
    sdist builds its own DFlash proposer, and leaves use_aux_hidden_state_outputs for dflash
    to vLLM's GPUModelRunner (its own _set_up_drafter sets it for other methods only)."""
    newest = gen.SCAN.files(SDISTS)[-1]
    facts = gen.derive(newest)
    assert facts["proposers"]["dflash"] == "AscendDflashProposer"
    assert facts["dflash"]["aux"] == "vllm"
    assert "dflash" not in facts["dflash"]["own_flags"]
    assert facts["ids_from"] == "config"
