"""The ini's ``eagle_seed`` is text: one that is no integer is a usage error naming it, as a
bad ``eagle_sample`` or ``eagle_batch`` is, not an INTERNALERROR traceback."""

from __future__ import annotations

import pytest

CONTRACT = """\
contract: x
version: 1
target: {arch: Qwen3ForCausalLM, num_hidden_layers: 36, hidden_size: 4096}
training:
  slots: [{layer: residual:2}, {layer: residual:18}, {layer: residual:33}, {layer: final_norm}]
serving: {engine: sglang, version: '0.5.23', aux_layer_ids: [1, 17, 32]}
"""


def test_an_eagle_seed_that_is_no_integer_is_a_usage_error(pytester):
    pytester.makeini("[pytest]\neagle_seed = x\n")
    (pytester.path / "c.yaml").write_text(CONTRACT)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--eagle-contract", "c.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*eagle_seed = 'x': give a whole number*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
