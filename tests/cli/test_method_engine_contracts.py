"""A contract served by onnxruntime-genai (DFlash2, DSpark, MTP) or lmdeploy (DFlash, and
EAGLE-3 with its fixed taps), driven from outside: real shards, drafts and contracts on disk,
``eagle-contract check``, ``matrix`` and ``doctor`` as subprocesses (issue 38).

The expected layers are docs/layers.md's statement of the engines' rules, not the tool's
output: onnxruntime-genai 0.16.0 on and lmdeploy 0.18.0 DFlash feed the output of target layer
t for tap t (``residual:t+1``); lmdeploy 0.16.0-0.18.0 EAGLE-3 feeds ``residual:2, L//2, L-3``
whatever the draft's ids say. The shards are the tiny 8-layer target's speculators capture
(``residual:2, 4, 5`` beside ``residual:8``), so taps ``[1, 3, 4]`` are the trained ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import shardgen

L = shardgen.L  # 8
QWEN3, QWEN35, LLAMA = "Qwen3ForCausalLM", "Qwen3_5ForConditionalGeneration", "LlamaForCausalLM"
ORTG = "onnxruntime-genai"
GOOD_TAPS = [1, 3, 4]  # residual:2, 4, 5: the shards' fc slots
SLOTS = ("residual:2", "residual:4", "residual:5", f"residual:{L}")


def fold(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("method-engine-shards")
    shardgen.write_good(root, "speculators", range(2))
    return root


def setup(
    root: Path,
    shards: Path,
    engine: str,
    method: str | None,
    arch: str,
    config: dict,
    version: str | None = None,
    slots: tuple[str, ...] = SLOTS,
) -> Path:
    """A draft folder holding ``config``, and a contract over the shards served by ``engine``
    (tests/cli/test_source_engine_contracts.py uses it too)."""
    draft = root / "draft"
    draft.mkdir(exist_ok=True)
    (draft / "config.json").write_text(json.dumps(config))
    c = root / "c.yaml"
    c.write_text(
        "contract: m\nversion: 1\n"
        + (f"method: {method}\n" if method else "")
        + f"target: {{arch: {arch}, num_hidden_layers: {L}, hidden_size: {shardgen.H}}}\n"
        f"training:\n  format: speculators\n  shards: {shards}\n  slots:\n"
        + "".join(f"    - {{layer: '{s}'}}\n" for s in slots)
        + f"serving:\n  engine: {engine}\n  draft_config: draft/config.json\n"
        + (f'  version: "{version}"\n' if version else "")
    )
    return c


def dflash(taps: list[int] | None, arch: str = "DFlashDraftModel", **more: object) -> dict:
    dc = {} if taps is None else {"target_layer_ids": taps}
    return {"architectures": [arch], "num_hidden_layers": 3, "dflash_config": dc, **more}


def eagle3(ids: list[int]) -> dict:
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "num_hidden_layers": 1,
        "hidden_size": shardgen.H,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids},
    }


def assert_shifted(report: dict, engine: str) -> None:
    """The EC501 of taps [2, 4, 5] against the shards' residual:2, 4, 5 (tap t feeds
    ``residual:t+1``): what was fed, what was trained, the taps that fix it and the engine's
    own row in the every-engine table (tests/cli/test_source_engine_contracts.py too)."""
    f = report["findings"][0]
    assert f["found"] == "residual:3, residual:5, residual:6"
    assert f["expected"] == "residual:2, residual:4, residual:5"
    assert "[1, 3, 4]" in f["hint"]  # the taps that fix it, by that engine's rule
    assert any(r["engine"] == engine and r["own"] for r in f["extra"]["matrix"])


def codes(cli, contract: Path, *more: str) -> tuple[int, list[str], dict]:
    res = cli("check", contract, "--json", *more)
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode in (0, 1), res.stderr
    report = json.loads(res.stdout)
    return res.returncode, sorted({f["code"] for f in report["findings"]}), report


CASES = [  # engine, method, target, draft config for the good taps, the draft arch
    ("lmdeploy", "dflash", QWEN3, "DFlashDraftModel", {"num_target_layers": L}),
    (ORTG, "dflash2", QWEN35, "DFlash2DraftModel", {}),
    (ORTG, "dspark", QWEN35, "DFlashDraftModel", {"markov_rank": 1}),
]


@pytest.mark.parametrize("engine,method,arch,draft_arch,more", CASES)
def test_the_trained_taps_pass(cli, tmp_path, shards, engine, method, arch, draft_arch, more):
    c = setup(tmp_path, shards, engine, method, arch, dflash(GOOD_TAPS, draft_arch, **more))
    rc, found, _ = codes(cli, c, "--no-sharpness")  # no norm bounds here: EC801's business
    assert rc == 0 and found == [], found


@pytest.mark.parametrize("engine,method,arch,draft_arch,more", CASES)
def test_a_one_tap_shift_is_ec501(cli, tmp_path, shards, engine, method, arch, draft_arch, more):
    """Taps written as layer numbers ([2, 4, 5]: 'input of layer k') are fed residual:3, 5, 6."""
    c = setup(tmp_path, shards, engine, method, arch, dflash([2, 4, 5], draft_arch, **more))
    rc, found, report = codes(cli, c, "--checks", "layout")
    assert rc == 1 and found == ["EC501"]
    assert_shifted(report, engine)


def test_lmdeploy_guessed_list_is_ec522(cli, tmp_path, shards):
    """No tap list: lmdeploy 0.18.0 falls back to SGLang's formula (L = 8, n = 3: [1, 3, 5]),
    which feeds residual:2, 4, 6, not the trained residual:2, 4, 5."""
    c = setup(tmp_path, shards, "lmdeploy", "dflash", QWEN3, dflash(None, num_target_layers=L))
    rc, found, report = codes(cli, c, "--checks", "layout")
    assert rc == 1 and found == ["EC522"]
    f = report["findings"][0]
    assert f["extra"]["guessed_ids"] == [1, 3, 5]
    assert f["found"] == "residual:2, residual:4, residual:6"


def test_lmdeploy_fallback_over_a_huge_draft_is_refused_not_listed(cli, tmp_path):
    """No tap list and num_hidden_layers 10**8: lmdeploy's fallback formula built 10**8 taps
    and printed them in its refusal (300 MB on stderr); the draft's layer count shares the
    target's plausibility bound (docs/security.md)."""
    draft = tmp_path / "draft"
    draft.mkdir()
    config = dflash(None, num_target_layers=L)
    (draft / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 10**8}))
    res = cli(
        "resolve", "--engine", "lmdeploy", "--method", "dflash", "--arch", QWEN3,
        "--num-layers", L, "--draft-config", draft, timeout=60,
    )  # fmt: skip
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    assert res.returncode == 2 and len(res.stderr) < 2000, res.stderr[:2000]
    assert "num_hidden_layers is 100000000, above 1024" in fold(res.stderr)


@pytest.mark.parametrize(
    "engine,method,arch,config,why",
    [
        (ORTG, "dflash2", QWEN35, dflash([1, L - 1], "DFlash2DraftModel"), f"[0, {L - 1})"),
        (ORTG, "dflash2", QWEN35, dflash([], "DFlash2DraftModel"), "at least one"),
        (ORTG, "dflash2", QWEN3, dflash(GOOD_TAPS, "DFlash2DraftModel"), "not a DFlash2 target"),
        ("lmdeploy", "dflash", QWEN3, dflash([4, 3, 1], num_target_layers=L), "increasing"),
        ("lmdeploy", "dflash", QWEN3, dflash([1, L], num_target_layers=L), f"[0, {L})"),
        ("lmdeploy", "dflash", QWEN3, dflash(GOOD_TAPS, num_target_layers=L + 1), "depth"),
    ],
)
def test_the_engines_own_refusals_are_ec510(
    cli, tmp_path, shards, engine, method, arch, config, why
):
    c = setup(tmp_path, shards, engine, method, arch, config)
    rc, found, report = codes(cli, c, "--checks", "layout")
    assert rc == 1 and found == ["EC510"]
    assert why in fold(report["findings"][0]["message"])


def test_onnxruntime_genai_mtp_feeds_the_final_norm(cli, tmp_path, shards):
    """The shards' target slot is residual:8 (pre-norm): onnxruntime-genai hands the MTP head
    final_norm."""
    config = {"architectures": ["Qwen3_5ForCausalLMMTP"], "mtp_num_hidden_layers": 1}
    c = setup(tmp_path, shards, ORTG, "mtp", QWEN35, config)
    rc, found, report = codes(cli, c, "--checks", "layout")
    assert rc == 1 and found == ["EC501"]
    assert report["findings"][0]["found"] == "final_norm"


@pytest.mark.parametrize(
    "engine,method", [(ORTG, None), (ORTG, "eagle3"), ("lmdeploy", "dspark")]
)  # lmdeploy's MTP: tests/cli/test_source_engine_contracts.py
def test_a_method_they_do_not_serve_is_a_usage_error(cli, tmp_path, shards, engine, method):
    c = setup(tmp_path, shards, engine, method, QWEN35, dflash(GOOD_TAPS))
    res = cli("check", c, "--checks", "layout")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    said = fold(res.stderr)
    assert f"{engine} serves method" in said and f"not {method or 'eagle3'}" in said
    if method is None:
        assert "the default" in said


@pytest.mark.parametrize(
    "engine,arch,release",
    [("lmdeploy", "DeepseekV3ForCausalLM", "0.18.0"), ("mlx", QWEN35, "0.7.10")],
)
def test_matrix_of_an_mtp_contract_marks_its_own_engine(
    cli, tmp_path, shards, engine, arch, release
):
    """An MTP contract served by lmdeploy or mlx (no serving.version: the newest release read)
    has its engine's rows, the newest marked as the contract's own; the matrix said 'the
    contract names no serving engine' (lmdeploy had no MTP row; mlx's unversioned row was
    never marked)."""
    c = setup(tmp_path, shards, engine, "mtp", arch, dflash(GOOD_TAPS), slots=("final_norm",))
    res = cli("matrix", c, "--json")
    assert "Traceback" not in res.stderr, res.stderr
    rows = json.loads(res.stdout)["rows"]
    own = [r for r in rows if r["own"]]
    assert [r["engine"] for r in own] == [engine], rows
    assert release in own[0]["versions"], own
    res = cli("matrix", c)
    assert res.stdout.startswith("ok: "), res.stdout
    assert "names no serving engine" not in res.stdout


# -- lmdeploy EAGLE-3: fixed taps (2, L//2, L-3) = residual:2, 4, 5 on L = 8 ----------------


def test_lmdeploy_eagle3_fixed_taps_pass_the_trained_layers(cli, tmp_path, shards):
    c = setup(tmp_path, shards, "lmdeploy", None, LLAMA, eagle3([2, 4, 5]))
    rc, found, _ = codes(cli, c, "--no-sharpness")  # no norm bounds here: EC801's business
    assert rc == 0 and found == [], found


def test_lmdeploy_eagle3_ignores_the_drafts_ids_ec508(cli, tmp_path, shards):
    """A draft whose ids name other layers is fed the fixed taps all the same."""
    c = setup(tmp_path, shards, "lmdeploy", None, LLAMA, eagle3([3, 5, 6]), version=">=0.16.0")
    rc, found, report = codes(cli, c, "--checks", "layout")
    assert rc == 1 and found == ["EC508"]
    f = next(f for f in report["findings"] if f["code"] == "EC508")
    assert "[3, 5, 6] are not used" in fold(f["message"])
    assert "0.16.0..0.18.0" in f["message"]


def test_lmdeploy_eagle3_refuses_targets_not_read(cli, tmp_path, shards):
    c = setup(tmp_path, shards, "lmdeploy", None, QWEN3, eagle3([2, 4, 5]))
    rc, found, report = codes(cli, c, "--checks", "layout")
    assert rc == 1 and "EC510" in found
    said = fold(" ".join(f["message"] for f in report["findings"]))
    assert "no EAGLE-3 capture path read here" in said


def test_lmdeploy_eagle3_resolve_answers_the_fixed_layers(cli):
    res = cli(
        "resolve", "--engine", "lmdeploy", "--arch", "kimi_k2", "--num-layers", 61,
        "--ids", 3, 31, 59, "--json",
    )  # fmt: skip
    out = json.loads(res.stdout)
    assert res.returncode == 1
    assert out["layers"] == ["residual:2", "residual:30", "residual:58"]
    assert [p["code"] for p in out["problems"]] == ["EC508"]
    res = cli(
        "resolve", "--engine", "lmdeploy", "--arch", "kimi_k2", "--num-layers", 61,
        "--version", "0.16.0", "--json",
    )  # fmt: skip
    assert res.returncode == 2 and "kimi_k2 has no EAGLE-3 capture path" in fold(res.stderr)


# -- matrix and doctor ----------------------------------------------------------------------


@pytest.mark.parametrize("engine,method,arch,draft_arch,more", CASES)
def test_matrix_has_their_rows(cli, tmp_path, shards, engine, method, arch, draft_arch, more):
    c = setup(tmp_path, shards, engine, method, arch, dflash([2, 4, 5], draft_arch, **more))
    res = cli("matrix", c, "--json")
    assert res.returncode == 1, res.stderr
    rows = json.loads(res.stdout)["rows"]
    own = [r for r in rows if r["own"]]
    assert own and all(r["engine"] == engine for r in own)
    assert own[-1]["feeds"] == ["residual:3", "residual:5", "residual:6"]
    assert own[-1]["fix"] == GOOD_TAPS
    good = setup(tmp_path, shards, engine, method, arch, dflash(GOOD_TAPS, draft_arch, **more))
    res = cli("matrix", good, "--json")
    assert res.returncode == 0, res.stdout


def test_matrix_of_lmdeploy_eagle3(cli, tmp_path, shards):
    c = setup(tmp_path, shards, "lmdeploy", None, LLAMA, eagle3([3, 5, 6]), version="0.18.0")
    res = cli("matrix", c, "--json")
    own = [r for r in json.loads(res.stdout)["rows"] if r["own"]]
    assert res.returncode == 0 and [r["engine"] for r in own] == ["lmdeploy"]
    assert own[0]["feeds"] == ["residual:2", "residual:4", "residual:5"]
    assert own[0]["problems"] == ["EC508"]


@pytest.mark.parametrize(
    "engine,method,arch,config,verdict",
    [
        ("lmdeploy", "dflash", QWEN3, dflash([2, 4, 5], num_target_layers=L), "fail"),
        ("lmdeploy", "dflash", QWEN3, dflash(GOOD_TAPS, num_target_layers=L), "pass"),
        (ORTG, "dflash2", QWEN35, dflash([2, 4, 5], "DFlash2DraftModel"), "fail"),
        (ORTG, "dflash2", QWEN35, dflash(GOOD_TAPS, "DFlash2DraftModel"), "pass"),
    ],
)
def test_doctor_layout_seam(cli, tmp_path, shards, engine, method, arch, config, verdict):
    c = setup(tmp_path, shards, engine, method, arch, config)
    res = cli("doctor", "--draft", tmp_path / "draft", "--contract", c, "--json")
    assert "Traceback" not in res.stderr, res.stderr
    seams = {s["name"]: s for s in json.loads(res.stdout)["seams"]}
    assert seams["layout"]["status"] == verdict


def test_doctor_engine_refuses_a_method_they_do_not_serve(cli, tmp_path, shards):
    """``doctor --engine lmdeploy`` over a DFlash2 contract: lmdeploy's rules for DFlash2 are
    not read (a contract naming onnxruntime-genai is doctored by its serving.engine, above)."""
    c = setup(tmp_path, shards, ORTG, "dflash2", QWEN35, dflash(GOOD_TAPS, "DFlash2DraftModel"))
    res = cli("doctor", "--draft", tmp_path / "draft", "--engine", "lmdeploy", "--contract", c)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "only for --method eagle3 / dflash / mtp" in fold(res.stderr)
