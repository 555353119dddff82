"""Evidence of what each slot is: reference capture (identify) and the weight-based rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pytest_eagle_contract.layers import Layer
from pytest_eagle_contract.models.reference import capture_canonical
from pytest_eagle_contract.models.tiny import TinySpec, tiny_target
from pytest_eagle_contract.shards.writing import shard_name, write_data_config, write_shard

L, H, VOCAB = 10, 64, 512
POST, PRE = Layer(-1), Layer(L)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """A 10-layer tiny Llama saved as an HF directory, and data it generated itself."""
    model = tiny_target(TinySpec(num_layers=L))
    path = tmp_path_factory.mktemp("target") / "model"
    model.save_pretrained(path)
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, VOCAB, (24,), generator=g)
    with torch.no_grad():
        for _ in range(40):  # greedy continuation: model-generated responses
            logits = model(ids.unsqueeze(0)).logits[0, -1]
            ids = torch.cat([ids, logits.argmax().view(1)])
    mask = torch.zeros(len(ids), dtype=torch.long)
    mask[24:] = 1
    return path, ids, mask, capture_canonical(model, ids)


def write(root: Path, fmt: str, layers: list[Layer], target, index: int = 0) -> Path:
    _, ids, mask, states = target
    if fmt == "speculators-v1":
        write_data_config(root, [x.index - 1 for x in layers], H)
    write_shard(root, fmt, index, ids, mask, [states[x].to(torch.bfloat16) for x in layers])
    return root / shard_name(fmt, index)


SETS = {  # what the pipeline wrote -> what identify must name
    "good": [Layer(2), Layer(5), Layer(7), POST],
    "shifted": [Layer(3), Layer(6), Layer(8), POST],
    "swapped": [Layer(5), Layer(2), Layer(7), POST],
    "embed-front": [Layer(0), Layer(2), Layer(5), POST],
    "pre-norm-target": [Layer(2), Layer(5), Layer(7), PRE],
}


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["specforge", "speculators-v1", "speculators"])
@pytest.mark.parametrize("case", list(SETS))
def test_identify_names_every_slot(tmp_path, target, cli, fmt, case):
    layers = SETS[case]
    if fmt != "specforge" and case == "good":
        layers = [Layer(2), Layer(5), Layer(7), PRE]
    if fmt != "specforge" and case == "pre-norm-target":
        layers = [Layer(2), Layer(5), Layer(7), POST]  # the reverse: post where pre belongs
    shard = write(tmp_path, fmt, layers, target)
    if case == "good":  # through the CLI, as users run it
        res = cli("identify", shard, "--target-model", target[0], "--json")
        assert res.returncode == 0, res.stderr
        slots = json.loads(res.stdout)["slots"]
    else:
        slots = [i.to_dict() for i in _identify(shard, target[0])]
    assert [s["layer"] for s in slots] == [str(x) for x in layers]
    for s in slots:
        assert s["cosine"] > 0.999 and s["rel_error"] < 0.01
        assert s["runner_up"]["layer"] != s["layer"]
        assert s["runner_up"]["rel_error"] > 10 * s["rel_error"]  # a neighbour is told apart


_MODELS: dict = {}


def _identify(shard: Path, model_dir: Path):
    from pytest_eagle_contract.checks.evidence import identify
    from pytest_eagle_contract.models.target import TargetModel
    from pytest_eagle_contract.shards.reading import read_sample

    if model_dir not in _MODELS:
        _MODELS[model_dir] = TargetModel.open(model_dir)
    model = _MODELS[model_dir]
    sample = read_sample(shard)
    slots, _ = sample.slots(model.hidden_size)
    return identify([x.tensor for x in slots], sample.input_ids, model)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["deepseek_v3", "qwen3"])
def test_identify_other_architectures(tmp_path, cli, arch):
    model = tiny_target(TinySpec(arch=arch, num_layers=6))
    model.save_pretrained(tmp_path / "model")
    ids = torch.randint(0, VOCAB, (50,), generator=torch.Generator().manual_seed(1))
    states = capture_canonical(model, ids)
    layers = [Layer(0), Layer(3), Layer(6), POST]
    write_shard(
        tmp_path / "s",
        "speculators-v1",
        0,
        ids,
        torch.ones(50, dtype=torch.long),
        [states[x].to(torch.bfloat16) for x in layers],
    )
    res = cli(
        "identify", tmp_path / "s" / "data_0.pt", "--target-model", tmp_path / "model", "--json"
    )
    assert res.returncode == 0, res.stderr
    assert [s["layer"] for s in json.loads(res.stdout)["slots"]] == [str(x) for x in layers]


CONTRACT = """\
contract: evidence
version: 1
target: {{arch: LlamaForCausalLM, num_hidden_layers: {L}, hidden_size: {H}, vocab_size: 512,
         model: model, reference_capture: {ref}}}
training:
  format: speculators-v1
  shards: shards
  teacher_agreement: {{min: 0.9}}
  slots:
    - {{layer: {s0}}}
    - {{layer: residual:5}}
    - {{layer: residual:7}}
    - {{layer: {target}}}
"""


def gate(
    tmp_path,
    target,
    written,
    declared_s0="residual:2",
    declared_target="final_norm",
    ref="false",
    extra=(),
    hidden=H,
):
    (tmp_path / "model").symlink_to(target[0])
    write(tmp_path / "shards", "speculators-v1", written, target)
    (tmp_path / "c.yaml").write_text(
        CONTRACT.format(L=L, H=hidden, ref=ref, s0=declared_s0, target=declared_target)
    )
    from pytest_eagle_contract.contract.model import load_contract
    from pytest_eagle_contract.plan.planner import plan, run_units

    contract = load_contract(tmp_path / "c.yaml")
    units = plan(contract, sample=None, checks=("evidence", *extra))
    return run_units(units).findings


def codes(findings):
    return {f.code for f in findings}


def test_good_shard_passes_every_evidence_rule(tmp_path, target):
    assert gate(tmp_path, target, [Layer(2), Layer(5), Layer(7), POST], ref="true") == []


WEIGHT_CASES = [
    (
        [Layer(0), Layer(5), Layer(7), POST],
        "residual:2",
        "final_norm",
        "false",
        "EC601",
        "equals embed_tokens.weight[input_ids]",
    ),
    (
        [Layer(2), Layer(5), Layer(7), POST],
        "embed",
        "final_norm",
        "false",
        "EC601",
        "differs from embed_tokens.weight[input_ids]",
    ),
    (
        [Layer(2), Layer(5), Layer(7), PRE],
        "residual:2",
        "final_norm",
        "false",
        "EC602",
        "declared final_norm but is not the final RMSNorm's output",
    ),
    (
        [Layer(2), Layer(5), Layer(7), POST],
        "residual:2",
        "residual:10",
        "false",
        "EC602",
        "is the final RMSNorm's output",
    ),
    (
        [Layer(2), Layer(5), Layer(7), Layer(6)],
        "residual:2",
        "residual:10",
        "false",
        "EC603",
        "teacher agreement",
    ),
    (
        [Layer(3), Layer(5), Layer(7), POST],
        "residual:2",
        "final_norm",
        "true",
        "EC604",
        "slot 0 is declared residual:2 but is residual:3",
    ),
]
EVIDENCE_CODES = {case[4] for case in WEIGHT_CASES} | {"EC605"}  # EC605: below


@pytest.mark.parametrize(("written", "s0", "tgt", "ref", "code", "words"), WEIGHT_CASES)
def test_weight_rule_fails(tmp_path, target, written, s0, tgt, ref, code, words):
    found = gate(tmp_path, target, written, s0, tgt, ref)
    assert code in codes(found), found
    assert any(words in f.message for f in found if f.code == code)


def test_teacher_agreement_passes_on_model_generated_data(tmp_path, target):
    from pytest_eagle_contract.checks.evidence import teacher_agreement
    from pytest_eagle_contract.models.target import TargetModel

    _, ids, mask, states = target
    model = TargetModel.open(target[0])
    hits, total = teacher_agreement(states[POST].bfloat16(), True, model, ids, mask)
    assert total == 40 and hits / total > 0.9
    hits_pre, _ = teacher_agreement(states[PRE].bfloat16(), False, model, ids, mask)
    assert hits_pre == hits  # the pre-norm state agrees once the final norm is applied


def test_target_model_mismatch(tmp_path, target):
    found = gate(tmp_path, target, [Layer(2), Layer(5), Layer(7), POST], hidden=128)
    assert codes(found) >= {"EC605"}


@pytest.mark.slow
def test_layout_uses_identified_layers_and_says_so(tmp_path, target, cli):
    (tmp_path / "model").symlink_to(target[0])
    write(tmp_path / "shards", "speculators-v1", [Layer(0), Layer(2), Layer(5), PRE], target)
    text = CONTRACT.format(L=L, H=H, ref="true", s0="residual:2", target="residual:10")
    text = text.replace("- {layer: residual:5}", "- {layer: residual:5}").replace(
        "teacher_agreement: {min: 0.9}", "fc_input: [0, 1, 2]"
    )
    text = text.replace("residual:7}", "residual:6}")  # declared residual:2, 5, 6
    text += "serving: {engine: sglang, version: '0.5.23', aux_layer_ids: [1, 4, 5]}\n"
    (tmp_path / "c.yaml").write_text(text)
    res = cli("check", tmp_path / "c.yaml", "--checks", "layout")
    assert res.returncode == 1
    assert "training side: reference capture of the target on a sampled shard" in res.stdout
    assert "slot 0 = embed (declared residual:2)" in res.stdout
    off = cli("check", tmp_path / "c.yaml", "--checks", "layout", "--no-reference-capture")
    assert off.returncode == 0, off.stdout  # declared layers alone agree with serving


def test_sharded_checkpoint_reads_only_the_named_tensors(tmp_path, target):
    """A sharded HF checkpoint (model.safetensors.index.json) is read through its index."""
    from pytest_eagle_contract.models.target import TargetModel

    model = tiny_target(TinySpec(num_layers=L))
    model.save_pretrained(tmp_path / "sharded", max_shard_size="100KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    assert len(list((tmp_path / "sharded").glob("*.safetensors"))) > 1
    sharded, single = TargetModel.open(tmp_path / "sharded"), TargetModel.open(target[0])
    assert torch.equal(sharded.embedding, single.embedding)
    assert torch.equal(sharded.final_norm_weight, single.final_norm_weight)
    assert torch.equal(sharded.lm_head, single.lm_head)
    assert (sharded.num_layers, sharded.hidden_size, sharded.arch) == (L, H, "LlamaForCausalLM")
