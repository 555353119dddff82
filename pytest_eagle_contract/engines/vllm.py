"""vLLM: one rule for every release so far (id k = the input to layer k), fc built for 3."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import Unservable
from .base import Engine, Resolution, eagle3_default_ids, straight

if TYPE_CHECKING:
    from ..models.draft import DraftConfig


class VLLM(Engine):
    name = "vllm"
    title = "vLLM"
    id_keys = ("eagle_aux_hidden_state_layer_ids", "eagle_config.eagle_aux_hidden_state_layer_ids")

    def n_aux(self, draft: DraftConfig, version: str | None) -> int:
        return 3  # llama_eagle3.py: fc is target_hidden_size * 3

    def resolve(
        self,
        num_layers: int,
        ids: Sequence[int] | None,
        arch: str | None,
        version: str | None,
        use_installed: bool = True,
    ) -> Resolution:
        notes = []
        given = None if ids is None else tuple(ids)
        if ids is None:
            ids = eagle3_default_ids(num_layers)
            notes.append(
                f"no ids: vLLM's default {list(ids)} (get_eagle3_default_aux_hidden_"
                "state_layers); a known silent failure (vllm PR #50170)"
            )
        if any(i < 0 or i > num_layers for i in ids):
            raise Unservable(f"vLLM ids must lie in [0, {num_layers}]: {list(ids)}")
        kept = sorted(set(ids))
        if len(kept) != 3:
            raise Unservable(
                f"vLLM's llama_eagle3.py builds fc as target_hidden_size * 3: "
                f"{len(kept)} aux states crash at load"
            )
        return Resolution(
            self.name,
            version,
            arch,
            num_layers,
            given,
            straight(kept),
            "built-in rule: vLLM id k = input to layer k (llama.py, "
            "deepseek_v2.py); sorted, duplicates collapse",
            tuple(notes),
        )
