"""SpecForge's DFlash offline features (specforge 0.2.0): ``rows_{g}-{g+2000}/data_{i}.ckpt``,
a ``torch.save`` dict of ``input_ids`` [T], ``loss_mask`` [T] and ``hidden_states`` [1, T, n*H],
the taps concatenated along the last dim, with no target state.

Read from specforge 0.2.0: ``algorithms/dflash/providers.py`` registers the DFlash offline
capture layout (``capture_method="dflash"``, ``aux_feature="hidden_states"``,
``last_hidden_feature=None``, passthrough ``input_ids`` and ``loss_mask``);
``algorithms/model_providers.py`` ``resolve_dflash_capture_layers`` takes the layers from the
draft config's ``dflash_config.target_layer_ids`` and refuses a draft without them;
``offline_capture/sglang_backend/capture.py`` hands them to the target's SGLang
``set_dflash_layers_to_capture`` (tap t captured as the state entering layer t + 1, concatenated
in layer order); ``algorithms/common/dflash_family_data.py`` reads ``hidden_states`` as
[T, W] or [1, T, W]. The file names come from ``scripts/prepare_hidden_states.py`` (not in the
wheel; sgl-project/SpecForge at a6b6b023: ``rows_{g}-{g + file_group_size}/data_{i}.ckpt``,
``file_group_size`` 2000)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...errors import UsageError
from .specforge import SpecForge

if TYPE_CHECKING:
    import torch

    from ...layers import Layer


class SpecForgeDFlash(SpecForge):
    """SpecForge's file names; the taps alone, no target state, no default layers."""

    def _state_keys(self, slots: Sequence[torch.Tensor]) -> dict[str, Any] | None:
        import torch

        return {"hidden_states": torch.cat(list(slots), dim=-1).unsqueeze(0)} if slots else None

    def default_layers(
        self, num_layers: int, metadata: dict[str, Any], arch: str | None = None
    ) -> list[Layer]:
        raise UsageError(
            "SpecForge's DFlash capture has no default layers: its prepare_hidden_states "
            "reads the draft config's dflash_config.target_layer_ids (pass --draft DIR to "
            "name the slots from it, or --layers)"
        )


FORMAT = SpecForgeDFlash(
    "specforge-dflash",
    ("*.ckpt", "*.ckpt.gz"),
    "input_ids",
    "loss_mask",
    (("hidden_states", "concat"),),
    signature="hidden_states",
    target_post_norm=False,
    has_target=False,
)
