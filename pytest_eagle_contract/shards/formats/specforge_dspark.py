"""SpecForge's DSpark offline features (specforge 0.2.0): ``rows_{g}-{g+2000}/data_{i}.ckpt``,
a ``torch.save`` dict of ``input_ids`` [T], ``loss_mask`` [T], ``hidden_states`` [1, T, n*H]
(the taps concatenated along the last dim) and ``target_last_hidden_states`` [1, T, H].

Read from specforge 0.2.0: ``algorithms/dspark/providers.py`` registers the DSpark offline
capture layout (``capture_method="dspark"``, ``aux_feature="hidden_states"``,
``last_hidden_feature="target_last_hidden_states"``, passthrough ``input_ids`` and
``loss_mask``; storage ``specforge_hidden_states_v1``, normalizer ``dspark_offline_v1``);
its capture layers are DFlash's (``model_providers.resolve_dflash_capture_layers``: the draft
config's ``dflash_config.target_layer_ids``, refused when absent);
``offline_capture/sglang_backend/capture.py`` hands them to the target's SGLang
``set_dspark_layers_to_capture`` and stores SGLang's ``last_hidden_states`` as the target, the
same output SpecForge's EAGLE-3 layout stores as ``hidden_state`` (post-norm, ``final_norm``);
``algorithms/common/dflash_family_data.py`` reads both as [T, W] or [1, T, W]. The slots are
named tap t = ``residual:t+1`` as for DFlash: where the target has its own
``set_dspark_layers_to_capture`` (rather than SGLang's DFlash hook) that mapping was not
followed here (engines/dflash_family.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import UsageError
from .specforge import SpecForge

if TYPE_CHECKING:
    from ...layers import Layer


class SpecForgeDSpark(SpecForge):
    """SpecForge's file names and state keys (the taps concatenated, then the target), with
    no default layers: the taps come from the draft config."""

    def default_layers(
        self, num_layers: int, metadata: dict[str, Any], arch: str | None = None
    ) -> list[Layer]:
        raise UsageError(
            "SpecForge's DSpark capture has no default layers: it reads the draft config's "
            "dflash_config.target_layer_ids (pass --draft DIR to name the slots from it, or "
            "--layers)"
        )


FORMAT = SpecForgeDSpark(
    "specforge-dspark",
    ("*.ckpt", "*.ckpt.gz"),
    "input_ids",
    "loss_mask",
    (("hidden_states", "concat"), ("target_last_hidden_states", "single")),
    signature="target_last_hidden_states",
    target_post_norm=True,
)
