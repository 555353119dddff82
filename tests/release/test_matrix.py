"""``eagle-contract matrix``: every serving engine version against the trainer's fc input."""

from __future__ import annotations

import json
from pathlib import Path

CONTRACTS = Path(__file__).parents[2] / "contracts"
DEMO = CONTRACTS / "demo-tiny-llama-eagle3.yaml"
KIMI = CONTRACTS / "kimi-k2.5-eagle3.yaml"


def rows_of(cli, contract: Path):
    res = cli("matrix", contract, "--json")
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, json.loads(res.stdout)


def _row(rows, engine, version):
    return next(r for r in rows if r["engine"] == engine and version in r["versions"])


def test_demo_matches_its_own_serving_and_vllm_differs(cli):
    code, out = rows_of(cli, DEMO)
    assert code == 0 and not out["own_differs"]
    assert out["trained"] == ["residual:2", "residual:4", "residual:5"]
    own = _row(out["rows"], "sglang", "0.5.13")
    assert own["own"] and own["verdict"] == "ok" and own["versions"][-1] == "0.5.23"
    vllm = _row(out["rows"], "vllm", "0.33.0")  # 0.8.5-0.11.0 read no ids: the default
    assert vllm["verdict"] == "DIFFERS" and vllm["fix"] == [2, 4, 5]
    old = _row(out["rows"], "sglang", "0.4.3")
    assert old["verdict"] == "refused" and "no EAGLE-3" in old["refused"]


def test_kimi_own_serving_differs_and_the_text_table_shows_it(cli):
    code, out = rows_of(cli, KIMI)
    assert code == 1 and out["own_differs"]
    own = [r for r in out["rows"] if r["own"]]
    assert own and all(r["engine"] == "sglang" and r["verdict"] == "DIFFERS" for r in own)
    assert own[0]["versions"][0] == "0.5.13" and own[-1]["versions"][-1] == "0.5.23"
    assert own[-1]["feeds"] == ["residual:2", "residual:30", "residual:58"]
    # consecutive versions that resolve alike are one row
    assert len(own[-1]["versions"]) > 1
    res = cli("matrix", KIMI)
    assert res.returncode == 1
    lines = [x.strip() for x in res.stdout.splitlines() if x.strip().startswith("* ")]
    assert len(lines) == len(own) and all("SGLang" in x and "DIFFERS" in x for x in lines)
    assert "the trainer feeds the fc embed, residual:3, residual:31" in res.stdout


def test_each_engine_reads_the_ids_under_its_own_key(tmp_path, cli):
    # a draft config with the top-level key only: vLLM reads it, SGLang ignores it and
    # takes its default [2, L//2, L-3] = [2, 4, 5] with no +1
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(
        json.dumps({"hidden_size": 64, "eagle_aux_hidden_state_layer_ids": [1, 3, 4]})
    )
    text = DEMO.read_text().replace(
        "  aux_layer_ids: [1, 3, 4]", "  draft_config: draft/config.json"
    )
    path = tmp_path / "c.yaml"
    path.write_text(text.replace("../eagle-demo/good", "shards"))
    code, out = rows_of(cli, path)
    vllm = _row(out["rows"], "vllm", "0.33.0")  # 0.8.5-0.11.0 read no ids: the default
    assert vllm["ids"] == [1, 3, 4] and vllm["verdict"] == "DIFFERS" and vllm["fix"] == [2, 4, 5]
    own = _row(out["rows"], "sglang", "0.5.23")
    assert own["ids"] is None and own["verdict"] == "ok"
    assert code == 0  # only the contract's own serving decides


def test_a_contract_without_training_is_a_usage_error(tmp_path, cli):
    text = DEMO.read_text()
    head, rest = text.split("training:", 1)
    path = tmp_path / "serving-only.yaml"
    path.write_text(head + "serving:" + rest.split("serving:", 1)[1])
    res = cli("matrix", path)
    assert res.returncode == 2 and "no training section" in res.stderr
    assert "Traceback" not in res.stderr


def test_ec501_details_carry_the_matrix(tmp_path, cli):
    cli("check", KIMI, "--checks", "layout", "--json", tmp_path / "r.json")
    found = json.loads((tmp_path / "r.json").read_text())
    ec501 = [f for f in found["findings"] if f["code"] == "EC501"]
    details = ec501[0]["details"]
    assert "what the other engines and versions feed with these ids:" in details
    assert "TensorRT-LLM" in details and "vLLM" in details
    table = details.split("with these ids:")[1]
    assert "0.5.11..0.5.12" in table and "0.5.23" not in table  # own rows: above


def test_ec501_prints_short_the_rows_that_differ_and_keeps_all_in_v_and_json(tmp_path, cli):
    """Issue 40 item 3: by default EC501's table keeps the engines that feed another input
    than the contract's own (SGLang 0.5.13..0.5.23 on Kimi-K2.5); the refusals and the rows
    that feed what SGLang feeds are counted in one line. -v prints the whole table, and the
    JSON report holds it, with its rows as data too."""
    args = ("check", KIMI, "--checks", "layout")
    short, full = cli(*args), cli(*args, "-v")
    report = cli(*args, "--json-report", tmp_path / "r.json")
    assert short.returncode == full.returncode == report.returncode == 1
    ec501 = next(
        f for f in json.loads((tmp_path / "r.json").read_text())["findings"] if f["code"] == "EC501"
    )
    rows = ec501["extra"]["matrix"]
    own = {tuple(r["feeds"]) for r in rows if r["own"] and r["feeds"]}
    differ = [r for r in rows if not r["own"] and r["feeds"] and tuple(r["feeds"]) not in own]
    refused = [r for r in rows if r["feeds"] is None]
    assert differ and refused and any(r["title"].startswith("MLX") for r in refused)
    shown = short.stdout.split("other engines that feed another input with these ids:")[1]
    listed = [line.split()[0] for line in shown.splitlines()[2 : 2 + len(differ)]]
    assert listed == [r["title"].split()[0] for r in differ]
    rest = len(rows) - len([r for r in rows if r["own"]]) - len(differ)
    assert f"{rest} more engine row(s) refuse these ids" in short.stdout
    assert "MLX" not in short.stdout and "refused" not in short.stdout
    assert "MLX" in full.stdout and "refused" in full.stdout  # -v: as the report's details
    assert "what the other engines and versions feed with these ids:" in full.stdout
    for line in full.stdout.split("with these ids:")[1].splitlines()[1:4]:
        assert line.strip() in ec501["details"]
    assert max(len(line) for line in short.stdout.splitlines() if "  " not in line.strip()) <= 120


def test_no_line_is_wider_than_120_columns(cli):
    """The house width (render.WIDTH, docs CLI-STYLE 3) holds for the table too: a row whose
    cells would pass 120 columns wraps its longest list at a comma onto a continuation line,
    each cell whole on one of its lines (the refusals are cut, whole under -v and --json)."""
    for contract in sorted(CONTRACTS.glob("*.yaml")):
        res = cli("matrix", contract)
        assert "Traceback" not in res.stderr, res.stderr
        wide = [line for line in res.stdout.splitlines() if len(line) > 120]
        assert wide == [], f"{contract.name}: {max(map(len, wide))} columns: {wide[0]}"
        _, out = rows_of(cli, contract)
        layers = {x for r in out["rows"] for x in r["feeds"] or ()}
        table = res.stdout.split("\nrefused:")[0]
        assert all(x in table for x in layers)  # wrapped, not cut
