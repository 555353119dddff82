"""The llama.cpp rules against every llama-cpp-python sdist (``tox -e llamacpp-releases``).

Re-derives ``engines/llamacpp_rules.json`` from the sdists with
``scripts/gen_llamacpp_rules.py`` and fails when the committed file differs (a release on the
index not covered, a key, count, converter rule, target rule or architecture disagreeing),
and checks that the release before the first covered one has no EAGLE-3. Needs the sdists:
set EAGLE_CONTRACT_LLAMACPP_SDISTS=DIR (``scripts/gen_llamacpp_rules.py DIR --download``
fetches them). Never part of the default test run.
"""

from __future__ import annotations

import pytest
from release_helpers import wheel_folder

from pytest_eagle_contract.engines import llamacpp

DIR = wheel_folder(
    "EAGLE_CONTRACT_LLAMACPP_SDISTS", "llama-cpp-python", "llamacpp-releases", files="sdists"
)

import gen_llamacpp_rules as gen  # noqa: E402


def test_the_rules_file_is_what_the_releases_code_says():
    assert gen.main([str(DIR), "--check"]) == 0


def test_the_release_before_the_first_covered_one_has_no_eagle3():
    first = ".".join(map(str, gen.FIRST))
    assert gen.derive(DIR / f"llama_cpp_python-{first}.tar.gz") is None
    assert llamacpp.releases()[0] != first


@pytest.mark.parametrize("version", llamacpp.releases())
def test_every_served_architecture_records_layer_inputs_first_in_its_loop(version):
    sdist = gen.Sdist(DIR / f"llama_cpp_python-{version}.tar.gz")
    graphs = gen._graphs(sdist)
    classes = gen._arch_classes(sdist)
    served = {
        a for r in llamacpp._data()["archs"] if llamacpp._covers(r, version) for a in r["archs"]
    }
    for arch in served:
        assert gen._records_input(graphs[classes[arch]]), arch
