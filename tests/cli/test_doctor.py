"""Issue 24 item 5: ``eagle-contract doctor``, every check that needs no shards, one verdict
per seam. Tiny drafts (tests/unit/test_draft.py's) and tiny targets made in code: each status
(pass, warn, fail, skipped) from a seam made to give it, the order (failing first), the
JSON shape, a contract's trained layers against the engine (EC501), the serving target's
identity (a rotated twin fails, an int8 twin warns with its numbers), bad inputs as coded
findings or usage errors, and one CLI run end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import no_traceback
from test_draft import CONTRACT as DRAFT_CONTRACT
from test_draft import H, L, V, config, tensors
from test_target_identity import save_twins

from pytest_eagle_contract.models.tiny import TinySpec, tiny_target
from pytest_eagle_contract.plan.doctor import SEAM_NAMES, Inputs, diagnose
from pytest_eagle_contract.shells.cli import main

TARGET = TinySpec(num_layers=L, hidden_size=H, vocab_size=V)
CAPPED = (
    "python -m sglang.launch_server --speculative-algorithm EAGLE3 --speculative-num-steps 1 "
    "--speculative-eagle-topk 1 --speculative-num-draft-tokens 16"
)
# test_draft's contract (the tiny target, SGLang 0.5.23 serving the draft) and the layers the
# draft was trained on
CONTRACT = (
    DRAFT_CONTRACT
    + """\
training:
  format: specforge
  slots:
    - {layer: residual:2}
    - {layer: residual:4}
    - {layer: residual:6}
    - {layer: final_norm}
"""
)


def draft(root: Path, name: str = "draft", **extra: object) -> Path:
    from safetensors.torch import save_file

    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config(**extra)))
    save_file(tensors(), str(folder / "model.safetensors"))
    return folder


@pytest.fixture(scope="module")
def targets(tmp_path_factory) -> dict[str, Path]:
    """The draft's target, made once per module."""
    root = tmp_path_factory.mktemp("doctor-target")
    tiny_target(TARGET).save_pretrained(root / "training")
    return {"training": root / "training"}


@pytest.fixture(scope="module")
def twins(tmp_path_factory) -> dict[str, Path]:
    """test_target_identity's target and its int8 and rotated twins."""
    return save_twins(tmp_path_factory.mktemp("doctor-twins"))


def verdicts(diagnosis) -> dict[str, str]:
    return {v.name: v.status for v in diagnosis.verdicts}


def test_each_status_from_a_seam_made_to_give_it_failing_seams_first(tmp_path, targets):
    unsorted = draft(tmp_path, eagle_config={"eagle_aux_hidden_state_layer_ids": [5, 1, 3]})
    found = diagnose(
        Inputs(unsorted, target_model=targets["training"], engine="sglang", serving_args=CAPPED)
    )
    status = verdicts(found)
    assert status["serving-args"] == "fail"  # EC512: 16 draft tokens capped to 2
    assert status["engine-rules"] == "pass"
    assert status["draft-checkpoint"] == "pass"
    assert status["target-identity"] == "skipped"
    assert status["layout"] == "skipped"
    assert found.verdict == "fail" and found.failed
    order = [v.status for v in found.verdicts]
    assert order == sorted(order, key=["fail", "warn", "pass", "skipped"].index)
    by_name = {v.name: v for v in found.verdicts}
    assert [f.code for f in by_name["serving-args"].findings] == ["EC512"]
    assert "--speculative-num-steps 15" in by_name["serving-args"].fix
    assert "--serving-target-model" in by_name["target-identity"].fix
    assert sorted(SEAM_NAMES) == sorted(status)


def test_a_draft_without_ids_warns_that_the_engine_uses_its_default(tmp_path, targets):
    bare = draft(tmp_path, eagle_config={})
    found = diagnose(Inputs(bare, target_model=targets["training"], engine="sglang"))
    engine = next(v for v in found.verdicts if v.name == "engine-rules")
    assert engine.status == "warn" and [f.code for f in engine.findings] == ["EC507"]
    assert found.verdict == "warn" and not found.failed


@pytest.mark.slow  # the EC501 finding's engine matrix: about 2 s
def test_a_contract_whose_trained_layers_the_engine_does_not_feed_fails_the_layout(tmp_path):
    (tmp_path / "c.yaml").write_text(CONTRACT)
    from pytest_eagle_contract.contract.model import load_contract

    contract = load_contract(tmp_path / "c.yaml")
    good = draft(tmp_path)  # ids [1, 3, 5]: SGLang feeds residual:2, 4, 6, as trained
    assert verdicts(diagnose(Inputs(good, contract=contract)))["layout"] == "pass"
    shifted = draft(
        tmp_path, "shifted", eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 4, 6]}
    )
    found = diagnose(Inputs(shifted, contract=contract))
    layout = next(v for v in found.verdicts if v.name == "layout")
    assert layout.status == "fail" and "EC501" in {f.code for f in layout.findings}
    assert found.verdicts[0].name == "layout"  # the costliest failing seam first
    # located where the user changes the served ids: the draft's config.json key the engine
    # reads (one line here), in every renderer alike (issue 37 item 8)
    ec501 = next(f for f in layout.findings if f.code == "EC501")
    assert (Path(ec501.contract), ec501.line) == (shifted / "config.json", 1)


@pytest.mark.slow
def test_the_serving_target_rotated_fails_quantized_warns_with_its_numbers(tmp_path, twins):
    good = draft(tmp_path)
    for twin, status, code in (("rotated", "fail", "EC623"), ("quantized", "warn", "EC622")):
        found = diagnose(
            Inputs(good, target_model=twins["training"], serving_target_model=twins[twin])
        )
        seam = next(v for v in found.verdicts if v.name == "target-identity")
        assert seam.status == status, seam
        assert code in {f.code for f in seam.findings}
        assert "cosine" in " ".join(f.message + f.details for f in seam.findings)


def test_an_unreadable_draft_is_a_coded_finding_not_a_traceback(tmp_path, targets, capsys):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    (broken / "model.safetensors").write_bytes(b"\x00" * 16)
    code = main(
        [
            "doctor",
            "--draft",
            str(broken),
            "--target-model",
            str(targets["training"]),
            "--engine",
            "sglang",
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["verdict"] == "fail"
    failed = {s["name"]: s for s in report["seams"] if s["status"] == "fail"}
    assert "engine-rules" in failed and failed["engine-rules"]["findings"][0]["code"] == "EC510"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--draft", "{tmp}/nowhere"], "no such folder"),
        (["--draft", "{tmp}/draft", "--version", "0.5.23"], "--version goes with --engine"),
        (["--draft", "{tmp}/draft", "--engine", "specforge"], "invalid choice: 'specforge'"),
        (["--draft", "{tmp}/draft", "--engine", "sglang", "--version", "no.such"], "--version"),
    ],
)
def test_what_doctor_cannot_run_on_is_a_usage_error(tmp_path, capsys, args, said):
    draft(tmp_path)
    try:
        code = main(["doctor", *(a.format(tmp=tmp_path) for a in args)])
    except SystemExit as exc:  # argparse's own refusal (a trainer is no --engine choice)
        code = exc.code
    assert code == 2
    assert said in capsys.readouterr().err


@pytest.mark.slow
def test_cli_end_to_end_json(tmp_path, targets, twins, cli):
    good = draft(tmp_path)
    res = cli(
        "doctor",
        "--draft",
        good,
        "--target-model",
        twins["training"],
        "--serving-target-model",
        twins["rotated"],
        "--engine",
        "sglang",
        "--json",
    )
    no_traceback(res)
    assert res.returncode == 1, res.stderr
    report = json.loads(res.stdout)
    assert set(report) == {"verdict", "seams"} and report["verdict"] == "fail"
    for seam in report["seams"]:
        assert set(seam) == {"name", "status", "reason", "fix", "findings"}
        assert seam["status"] in ("pass", "warn", "fail", "skipped")
        assert (seam["status"] == "skipped") == bool(seam["reason"])
    assert report["seams"][0] == {**report["seams"][0], "name": "target-identity", "status": "fail"}
    text = cli(
        "doctor", "--draft", good, "--target-model", targets["training"], "--engine", "sglang"
    )
    assert text.returncode == 0, text.stdout + text.stderr
    assert text.stdout.startswith("doctor: passed with warnings, incomplete (")  # verdict first
    assert "(what each needs: -v)" in text.stdout


def test_the_draft_config_seam_fails_a_max_position_below_the_serving_context(tmp_path, targets):
    """checks.draft_config (EC923, SpecForge#271): a draft shipped with
    max_position_embeddings 2048 under a launch line serving 8192 tokens."""
    short = draft(tmp_path, max_position_embeddings=2048)
    args = "python -m sglang.launch_server --context-length 8192"
    for serving_args, status in ((None, "pass"), (args, "fail")):
        found = diagnose(
            Inputs(
                short, target_model=targets["training"], engine="sglang", serving_args=serving_args
            )
        )
        seam = next(v for v in found.verdicts if v.name == "draft-config")
        assert seam.status == status, seam
    assert "EC923" in {f.code for f in seam.findings}


def test_the_tokenizer_seam_runs_on_the_target_folder_when_it_holds_a_tokenizer(tmp_path, targets):
    """checks.tokens on the target's folder: skipped without tokenizer files, run with them
    (a tokenizer made in code); an unreadable tokenizer.json is its EC330, not a traceback."""
    import shutil

    from tokenizer_data import make_tokenizer

    good = draft(tmp_path)
    target = tmp_path / "target"
    shutil.copytree(targets["training"], target)
    status = verdicts(diagnose(Inputs(good, target_model=target, engine="sglang")))
    assert status["tokenizer"] == "skipped"
    make_tokenizer(target)
    found = diagnose(Inputs(good, target_model=target, engine="sglang"))
    assert verdicts(found)["tokenizer"] == "pass"
    (target / "tokenizer.json").write_text("{broken")
    seam = next(
        v for v in diagnose(Inputs(good, target_model=target)).verdicts if v.name == "tokenizer"
    )
    assert seam.status == "fail" and seam.findings[0].code == "EC330"


def test_an_unsplittable_launch_line_is_a_usage_error(tmp_path, capsys):
    draft(tmp_path)
    args = ["doctor", "--draft", str(tmp_path / "draft"), "--serving-args", "python 'unclosed"]
    assert main(args) == 2
    assert "--serving-args" in capsys.readouterr().err


def test_a_contract_target_folder_that_is_not_there_is_said_not_raised(tmp_path):
    from pytest_eagle_contract.contract.model import load_contract

    text = CONTRACT.replace(f"vocab_size: {V}}}", f"vocab_size: {V}, model: nowhere}}")
    (tmp_path / "c.yaml").write_text(text)
    good = draft(tmp_path)
    found = diagnose(Inputs(good, contract=load_contract(tmp_path / "c.yaml")))
    seam = next(v for v in found.verdicts if v.name == "draft-checkpoint")
    assert seam.status == "warn" and seam.findings[0].code == "EC009"
    assert "embedding check (EC904) did not run" in seam.findings[0].message
