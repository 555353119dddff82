"""The reference capture: every canonical layer of a target's forward pass (an HF causal
LM: the tiny targets, or a real target loaded by :mod:`.target`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..layers import Layer

if TYPE_CHECKING:
    import torch


def capture_canonical(model: Any, input_ids: torch.Tensor) -> dict[Layer, torch.Tensor]:
    """Every canonical layer for one sequence: embed, residual:1..L, final_norm, as [T, H].

    ``residual:k`` is HF's ``hidden_states[k]`` for k < L; ``residual:L`` (pre-norm) is the
    input of the final norm, taken with a hook; ``final_norm`` is ``hidden_states[L]``. The
    ids go to the model's device; the states are the model's, on its device, in its dtype.
    The logits are computed for the last token only where the model allows it
    (``logits_to_keep``): nothing here reads them, and for a real vocabulary they are the
    largest tensor of the pass.
    """
    import inspect

    import torch

    captured: dict[str, torch.Tensor] = {}
    inner: Any = model.model
    handle = inner.norm.register_forward_pre_hook(
        lambda _mod, args: captured.__setitem__("pre", args[0].detach())
    )
    try:
        with torch.no_grad():
            device = model.get_input_embeddings().weight.device
            keep = "logits_to_keep" in inspect.signature(model.forward).parameters
            out = model(
                input_ids.unsqueeze(0).to(device),
                output_hidden_states=True,
                **({"logits_to_keep": 1} if keep else {}),
            )
    finally:
        handle.remove()
    hidden = out.hidden_states
    num_layers = len(hidden) - 1
    states = {Layer(k): hidden[k][0] for k in range(num_layers)}
    states[Layer(num_layers)] = captured["pre"][0]
    states[Layer(-1)] = hidden[num_layers][0]
    return states
