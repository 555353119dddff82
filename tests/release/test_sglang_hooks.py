"""The --forward-hooks factory, on plain torch modules shaped like SGLang's target and draft.

SGLang registers a hook spec per model runner (target, then draft): for each module of
``model.named_modules()`` matching ``target_modules`` (fnmatch), it calls
``module.register_forward_hook(hook_factory(config))``. The draft (``llama_eagle3.py``)
embeds ``cat(ids[1:], next_token)`` and feeds the target's aux concat through ``model.fc``.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from pytest_eagle_contract.capture.compare import verify_against_capture
from pytest_eagle_contract.capture.files import load_captures
from pytest_eagle_contract.capture.sglang_hooks import capture_fc_input
from pytest_eagle_contract.contract.model import load_contract
from pytest_eagle_contract.layers import Layer
from pytest_eagle_contract.models.reference import capture_canonical
from pytest_eagle_contract.models.tiny import tiny_target
from pytest_eagle_contract.shards.shard import Shard
from pytest_eagle_contract.shards.writing import write_shard
from pytest_eagle_contract.shells.demo import SPEC, shipped_contract

H, N_AUX, VOCAB = SPEC.hidden_size, 3, SPEC.vocab_size
DRAFT_H = H  # an EAGLE-3 draft of a Llama has the target's width
DOC = Path(__file__).parents[2] / "docs" / "verify-against-server.md"
SGLANG_HOOKS = Path(
    "/work/sglvenv/lib/python3.11/site-packages/sglang/srt/model_executor/hook_manager.py"
)


class TargetModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, H)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(input_ids)


class DraftModel(nn.Module):
    """llama_eagle3.LlamaModel's fc path: fc(spec_info.hidden_states) when widths differ."""

    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, DRAFT_H)
        self.fc = nn.Linear(H * N_AUX, DRAFT_H, bias=False)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: Any
    ) -> torch.Tensor:
        embeds = self.embed_tokens(input_ids)
        hidden = forward_batch.spec_info.hidden_states
        if hidden.shape[-1] != embeds.shape[-1]:
            hidden = self.fc(hidden)
        return hidden + embeds


class Wrapper(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.model = inner

    def forward(self, *args: Any) -> torch.Tensor:
        out: torch.Tensor = self.model(*args)
        return out


def models() -> tuple[Wrapper, Wrapper]:
    """Target and draft in the served dtype (bf16)."""
    return Wrapper(TargetModel()).to(torch.bfloat16), Wrapper(DraftModel()).to(torch.bfloat16)


def register(model: nn.Module, specs: list[dict[str, Any]]) -> None:
    """hook_manager.register_forward_hooks, as SGLang 0.5.14 to 0.5.23 ship it."""
    from pytest_eagle_contract.capture.sglang_hooks import capture_fc_input as factory

    names = dict(model.named_modules())
    for spec in specs:
        hook = factory(spec.get("config") or {})
        for name, module in names.items():
            if any(fnmatch.fnmatch(name, p) for p in spec["target_modules"]):
                module.register_forward_hook(hook)


def doc_spec(out: Path) -> list[dict[str, Any]]:
    """The --forward-hooks JSON of the docs' launch line, writing to ``out``."""
    (line,) = re.findall(r"--forward-hooks '([^']+)'", DOC.read_text())
    specs = json.loads(line)
    specs[0]["config"]["dir"] = str(out)
    specs[0]["config"]["layer_ids"] = [1, 3, 4]  # the tiny demo target's draft
    return specs


def serve_prefill(
    target: Wrapper, draft: Wrapper, ids: torch.Tensor, aux: torch.Tensor, next_token: int = 7
) -> None:
    """A target prefill, then the draft's extend over the same positions (eager)."""
    with torch.no_grad():
        target(ids)
        shifted = torch.cat([ids[1:], torch.tensor([next_token])])
        batch = SimpleNamespace(spec_info=SimpleNamespace(hidden_states=aux))
        draft(shifted, torch.arange(len(ids)), batch)
        # a decode step: one row, not recorded
        one = SimpleNamespace(spec_info=SimpleNamespace(hidden_states=aux[-1:]))
        target(torch.tensor([next_token]))
        draft(torch.tensor([next_token]), torch.tensor([len(ids)]), one)


@pytest.fixture
def tiny_sequence() -> tuple[torch.Tensor, torch.Tensor, dict[Layer, torch.Tensor]]:
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, VOCAB, (40,), generator=g)
    states = capture_canonical(tiny_target(SPEC), ids)
    aux = torch.cat([states[Layer(c)] for c in (2, 4, 5)], dim=-1).to(torch.bfloat16)
    return ids, aux, states


@pytest.mark.parametrize("shared_embed", [False, True], ids=["own-embed", "shared-embed"])
def test_hook_writes_the_fc_input_with_the_targets_ids(tmp_path, tiny_sequence, shared_embed):
    ids, aux, _ = tiny_sequence
    target, draft = models()
    specs = doc_spec(tmp_path / "caps")
    register(target, specs)  # the target's runner
    register(draft, specs)  # the draft's runner
    if shared_embed:  # EAGLEWorker.set_embed after the draft runner registered its hooks
        draft.model.embed_tokens = target.model.embed_tokens
    serve_prefill(target, draft, ids, aux)
    files = sorted((tmp_path / "caps").glob("*.safetensors"))
    assert len(files) == 1  # the prefill; the one-row decode pass is skipped
    got = load_captures(tmp_path / "caps").find(ids)
    assert got is not None and torch.equal(got.aux, aux) and torch.equal(got.input_ids, ids)
    assert (got.meta.source, got.meta.arch, got.meta.layer_ids) == (
        "forward-hook",
        "LlamaForCausalLM",
        (1, 3, 4),
    )


def test_hook_capture_verifies_a_shard(tmp_path, tiny_sequence):
    ids, aux, states = tiny_sequence
    target, draft = models()
    specs = doc_spec(tmp_path / "caps")
    register(target, specs)
    register(draft, specs)
    serve_prefill(target, draft, ids, aux)
    contract = load_contract(shipped_contract())
    index = load_captures(tmp_path / "caps")

    def verify(name, layers):
        slots = [states[Layer(k)].to(torch.bfloat16) for k in layers]
        path = write_shard(tmp_path / name, "specforge", 0, ids, torch.ones_like(ids), slots)
        return verify_against_capture(contract, Shard.load(path, name, "specforge", H), index)

    assert verify("good", (2, 4, 5, -1)) == []
    swapped = verify("bad", (4, 2, 5, -1))
    # layers come from the hook's arch + layer_ids, resolved with the contract's target
    assert {f.slot: f.extra["equals"] for f in swapped} == {0: 1, 1: 0}
    assert "server position 1 = residual:4" in swapped[0].found


def test_pass_without_paired_ids_is_not_written(tmp_path, caplog):
    hook = capture_fc_input({"dir": str(tmp_path / "x")})
    fc = nn.Linear(H * N_AUX, DRAFT_H)
    fc.register_forward_hook(hook)
    fc(torch.zeros(5, H * N_AUX))
    assert hook.written == [] and hook.skipped == 1
    assert "embed_tokens" in caplog.text


def test_a_folder_that_cannot_be_written_stops_the_recording_not_the_server(
    tmp_path, tiny_sequence, caplog
):
    """Issue 41: the capture folder is written beside what the server was asked to do; where
    it cannot be made (here a file is in its way: a read-only mount is the same to the
    hook), the pass goes on, one warning is logged and nothing more is tried."""
    ids, aux, _ = tiny_sequence
    (tmp_path / "file").write_text("in the way\n")
    target, draft = models()
    specs = doc_spec(tmp_path / "file" / "caps")
    register(target, specs)
    register(draft, specs)
    serve_prefill(target, draft, ids, aux)  # raised NotADirectoryError out of fc before
    serve_prefill(target, draft, ids, aux)
    warnings = [r for r in caplog.records if "cannot write in" in r.getMessage()]
    assert len(warnings) == 1 and "no more captures" in warnings[0].getMessage()
    assert (tmp_path / "file").read_text() == "in the way\n"


def test_factory_needs_a_directory():
    with pytest.raises(ValueError, match="dir"):
        capture_fc_input({})


@pytest.mark.skipif(not SGLANG_HOOKS.is_file(), reason="no installed sglang hook_manager.py")
def test_sglangs_own_register_forward_hooks_takes_the_docs_spec(tmp_path, tiny_sequence):
    """Load the installed sglang's hook_manager.py by path (it imports only torch.nn)."""
    spec = importlib.util.spec_from_file_location("sglang_hook_manager", SGLANG_HOOKS)
    assert spec is not None and spec.loader is not None
    manager = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(manager)
    ids, aux, _ = tiny_sequence
    target, draft = models()
    specs = doc_spec(tmp_path / "caps")
    manager.register_forward_hooks(target, specs)
    manager.register_forward_hooks(draft, specs)
    serve_prefill(target, draft, ids, aux)
    got = load_captures(tmp_path / "caps").find(ids)
    assert got is not None and torch.equal(got.aux, aux)
