"""The target model on disk: its config, and only the tensors a check needs.

An HF model directory (config.json plus safetensors, one file or sharded with
``model.safetensors.index.json``). Tensors are read one at a time through safetensors'
memory map; the whole model is loaded only for a reference capture.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import EagleContractError

if TYPE_CHECKING:
    import torch

EMBED_NAMES = ("model.embed_tokens.weight", "language_model.model.embed_tokens.weight",
               "model.language_model.embed_tokens.weight", "transformer.wte.weight")
NORM_NAMES = ("model.norm.weight", "language_model.model.norm.weight",
              "model.language_model.norm.weight", "transformer.ln_f.weight")
HEAD_NAMES = ("lm_head.weight", "language_model.lm_head.weight")


@dataclass
class TargetModel:
    path: Path
    config: dict[str, Any]
    _files: dict[str, Path] = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, path: str | Path) -> TargetModel:
        path = Path(path)
        try:
            config = json.loads((path / "config.json").read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise EagleContractError(f"target model {path}: cannot read config.json: {exc}") \
                from None
        return cls(path, config, _index(path))

    @property
    def text_config(self) -> dict[str, Any]:
        inner = self.config.get("text_config")
        return inner if isinstance(inner, dict) else self.config

    @property
    def num_layers(self) -> int:
        return int(self.text_config["num_hidden_layers"])

    @property
    def hidden_size(self) -> int:
        return int(self.text_config["hidden_size"])

    @property
    def vocab_size(self) -> int | None:
        value = self.text_config.get("vocab_size")
        return None if value is None else int(value)

    @property
    def eps(self) -> float:
        return float(self.text_config.get("rms_norm_eps", 1e-6))

    @property
    def arch(self) -> str | None:
        archs = self.config.get("architectures") or []
        return str(archs[0]) if archs else None

    def tensor(self, names: tuple[str, ...]) -> torch.Tensor:
        """The first of ``names`` present, read alone from its memory-mapped file."""
        from safetensors import safe_open

        for name in names:
            file = self._files.get(name)
            if file is not None:
                with safe_open(str(file), framework="pt") as f:
                    out: torch.Tensor = f.get_tensor(name)
                    return out
        raise EagleContractError(f"target model {self.path}: none of {list(names)} in its "
                                 "safetensors files")

    @cached_property
    def embedding(self) -> torch.Tensor:
        return self.tensor(EMBED_NAMES)

    @cached_property
    def final_norm_weight(self) -> torch.Tensor:
        return self.tensor(NORM_NAMES)

    @cached_property
    def lm_head(self) -> torch.Tensor:
        try:
            return self.tensor(HEAD_NAMES)
        except EagleContractError:
            if self.config.get("tie_word_embeddings"):
                return self.embedding
            raise

    @cached_property
    def module(self) -> Any:
        """The whole model, float32 on CPU, from local files only (reference capture)."""
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging

        logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        model: Any = AutoModelForCausalLM.from_pretrained(
            str(self.path), local_files_only=True, dtype="float32")
        return model.eval()


def _index(path: Path) -> dict[str, Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text("utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError) as exc:
            raise EagleContractError(f"{index}: unreadable index: {exc}") from None
        return {name: path / file for name, file in weight_map.items()}
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise EagleContractError(f"target model {path}: no safetensors files")
    from safetensors import safe_open

    names: dict[str, Path] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            names.update({name: file for name in f.keys()})
    return names
