"""``matrix`` of a method contract: a refused method-engine row shows the ids the draft
states, as the EAGLE-3 rows do, or "-" where it states none; it said "default", an engine
default no refused engine reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import shardgen
from test_method_engine_contracts import QWEN3, L, dflash, setup

REFUSING = ("ollama", "mistralrs")  # Qwen3 is no DFlash target there (read from source)


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("method-matrix-shards")
    shardgen.write_good(root, "speculators", range(2))
    return root


def _rows(cli, contract: Path) -> tuple[list[dict], str]:
    res = cli("matrix", contract, "--json")
    assert res.returncode in (0, 1), res.stderr
    text = cli("matrix", contract, "-v")
    return json.loads(res.stdout)["rows"], text.stdout


def _ids_cell(text: str, engine: str) -> str:
    """The ids column of ``engine``'s first row in the -v table (cells: 2+ spaces apart)."""
    line = next(x for x in text.splitlines() if x.split()[:1] == [engine])
    return re.split(r"\s{2,}", line.strip())[2]


def test_refused_method_engine_rows_show_the_stated_ids(cli, tmp_path, shards):
    c = setup(tmp_path, shards, "sglang", "dflash", QWEN3, dflash([1, 3, 4]))
    rows, text = _rows(cli, c)
    for engine in REFUSING:
        mine = [r for r in rows if r["engine"] == engine]
        assert mine and all(r["verdict"] == "refused" for r in mine), mine
        assert all(r["ids"] == [1, 3, 4] for r in mine), mine
        assert _ids_cell(text, engine) == "[1, 3, 4]", text


def test_refused_method_engine_rows_without_stated_ids_show_a_dash(cli, tmp_path, shards):
    c = setup(tmp_path, shards, "sglang", "dflash", QWEN3, dflash(None, num_target_layers=L))
    rows, text = _rows(cli, c)
    for engine in REFUSING:
        mine = [r for r in rows if r["engine"] == engine]
        assert mine and all(r["ids"] is None for r in mine), mine
        assert _ids_cell(text, engine) == "-", text
    assert _ids_cell(text, "lmdeploy") == "[1, 3, 5]"  # read by its fallback, not refused
