"""The target model on disk: its config, and only the tensors a check needs.

An HF model directory (config.json plus safetensors, one file or sharded with
``model.safetensors.index.json``). Tensors are read one at a time through safetensors'
memory map; the whole model is loaded only for a reference capture.

The folder is untrusted input (docs/security.md): its JSON is size-capped and its sizes
bounded, the index may name only regular files inside the folder (or, in a Hugging Face
cache snapshot, its ``blobs/``), pickled ``.bin`` weights are never read and no code from
the folder is imported or run. Anything unusable is a :class:`UsageError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..limits import first_line as _first_line
from ..limits import read_json_object

if TYPE_CHECKING:
    import torch

EMBED_NAMES = (
    "model.embed_tokens.weight",
    "language_model.model.embed_tokens.weight",
    "model.language_model.embed_tokens.weight",
    "transformer.wte.weight",
)
NORM_NAMES = (
    "model.norm.weight",
    "language_model.model.norm.weight",
    "model.language_model.norm.weight",
    "transformer.ln_f.weight",
)
HEAD_NAMES = ("lm_head.weight", "language_model.lm_head.weight")
# model types whose embedding is scaled by sqrt(hidden_size) (transformers' Gemma models:
# ``hidden_states * normalizer`` before the first layer) and whose RMSNorm multiplies by
# ``1 + weight``
SCALED_EMBEDDING_TYPES = ("gemma", "recurrent_gemma", "paligemma", "t5gemma")
INDEX = "model.safetensors.index.json"


@dataclass
class TargetModel:
    path: Path
    config: dict[str, Any]
    _files: dict[str, Path] = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, path: str | Path) -> TargetModel:
        path = Path(path)
        model = cls(path, _read_json(path, "config.json"), _index(path))
        _check_config(model)
        return model

    @classmethod
    def live(cls, module: Any) -> TargetModel:
        """A target already loaded: the causal LM (transformers' ``*ForCausalLM``) an online
        trainer holds, on its device and in its dtype, used as it is (never moved, cast
        or switched between train and eval). Its config and embedding are its own; no file
        is read. A module that is not such a model is a :class:`UsageError`."""
        name = type(module).__name__
        config = getattr(module, "config", None)
        to_dict = getattr(config, "to_dict", None)
        inner = getattr(module, "model", None)
        embeddings = getattr(module, "get_input_embeddings", None)
        if not callable(to_dict) or inner is None or not hasattr(inner, "norm"):
            raise UsageError(
                f"target model: a {name} is not a transformers causal LM (a module with "
                "`.config` and `.model.norm`, as *ForCausalLM): pass a model folder or that model"
            )
        model = cls(Path(f"<{name} in memory>"), dict(to_dict()))
        _check_config(model)
        weight = getattr(embeddings() if callable(embeddings) else None, "weight", None)
        if weight is None or weight.dim() != 2 or int(weight.shape[1]) != model.hidden_size:
            raise model._error("its input embedding is not a [rows, hidden_size] weight")
        model.__dict__["embedding"] = weight.detach()  # the cached properties, filled
        model.__dict__["module"] = module
        return model

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
    def max_positions(self) -> int | None:
        """``max_position_embeddings`` when config.json gives a whole number above 0."""
        value = self.text_config.get("max_position_embeddings")
        return value if type(value) is int and value > 0 else None

    @property
    def embedding_rows(self) -> int:
        """Rows of the input embedding: one per token id the model takes."""
        return int(self.embedding.shape[0])

    @property
    def eps(self) -> float:
        return float(self.text_config.get("rms_norm_eps", 1e-6))

    @property
    def embedding_normalizer(self) -> float:
        """What the architecture multiplies the embedding rows by before layer 0 (the
        ``embed`` state): sqrt(hidden_size) for the Gemma family, else 1."""
        return math.sqrt(self.hidden_size) if self._gemma_like else 1.0

    @property
    def arch(self) -> str | None:
        archs = self.config.get("architectures") or []
        return str(archs[0]) if archs else None

    def tensor(self, names: tuple[str, ...]) -> torch.Tensor:
        """The first of ``names`` present, read alone from its memory-mapped file."""
        from safetensors import SafetensorError, safe_open

        for name in names:
            file = self._files.get(name)
            if file is None:
                continue
            try:
                with safe_open(str(file), framework="pt") as f:
                    out: torch.Tensor = f.get_tensor(name)
            except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
                raise self._error(f"cannot read {name} from {file.name}: {exc}") from None
            from ..shards.reading import widens

            if not out.is_floating_point() or not widens(out.dtype):
                raise self._error(f"{name} holds {out.dtype}, not floating-point weights")
            return out
        raise self._error(f"none of {list(names)} in its safetensors files")

    @cached_property
    def embedding(self) -> torch.Tensor:
        return self._matrix(EMBED_NAMES)

    @cached_property
    def final_norm_weight(self) -> torch.Tensor:
        """What the final RMSNorm multiplies each channel by: its stored weight, plus one
        for the Gemma family (its RMSNorm computes ``x * (1 + weight)``)."""
        weight = self.tensor(NORM_NAMES)
        if tuple(weight.shape) != (self.hidden_size,):
            raise self._error(
                f"the final norm weight is {tuple(weight.shape)}, config.json "
                f"says hidden_size {self.hidden_size}"
            )
        return weight.float() + 1.0 if self._gemma_like else weight

    @property
    def _gemma_like(self) -> bool:
        kind = str(self.text_config.get("model_type") or self.config.get("model_type") or "")
        return kind.startswith(SCALED_EMBEDDING_TYPES)

    @cached_property
    def lm_head(self) -> torch.Tensor:
        if self.config.get("tie_word_embeddings") and not any(n in self._files for n in HEAD_NAMES):
            return self.embedding
        return self._matrix(HEAD_NAMES)

    @cached_property
    def module(self) -> Any:
        """The whole model, float32 on CPU, from local safetensors only, without remote
        code (reference capture)."""
        from transformers import AutoModelForCausalLM

        from .quiet import no_progress_bars

        self._check_parameter_count()
        try:
            with no_progress_bars():  # "Loading weights": off for this call only
                model: Any = AutoModelForCausalLM.from_pretrained(
                    str(self.path),
                    local_files_only=True,
                    trust_remote_code=False,
                    use_safetensors=True,
                    dtype="float32",
                )
        except Exception as exc:  # any failure of a third-party loader
            raise self._error(f"transformers cannot load it: {_first_line(exc)}") from None
        return model.eval()

    def _matrix(self, names: tuple[str, ...]) -> torch.Tensor:
        weight = self.tensor(names)
        if weight.dim() != 2 or weight.shape[1] != self.hidden_size:
            raise self._error(
                f"{names[0]} is {tuple(weight.shape)}, not [rows, "
                f"{self.hidden_size}] (hidden_size in config.json)"
            )
        return weight

    def _check_parameter_count(self) -> None:
        """Refuse a config that asks for more weights than the files hold (its missing
        tensors would be random, and an absurd config would allocate without end)."""
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        try:
            config = AutoConfig.from_pretrained(
                str(self.path), local_files_only=True, trust_remote_code=False
            )
            with torch.device("meta"):
                skeleton = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
                    config, trust_remote_code=False
                )
        except Exception as exc:  # any failure of a third-party loader
            raise self._error(f"transformers cannot build it: {_first_line(exc)}") from None
        wanted = sum(p.numel() for p in skeleton.parameters())
        stored = _stored_elements(self)
        if wanted > stored:
            raise self._error(
                f"config.json describes {wanted:,} weights, its safetensors files hold {stored:,}"
            )

    def _error(self, message: str) -> UsageError:
        return UsageError(f"target model {self.path}: {message}")


def _read_json(folder: Path, name: str) -> dict[str, Any]:
    """A JSON object from the folder's file ``name`` (bounded: ``limits.read_json_object``)."""
    cannot = f"target model {folder}: cannot read {name}"
    if not (folder / name).exists():
        raise UsageError(f"{cannot}: no such file")
    return read_json_object(_inside(folder, name), cannot)


def _check_config(model: TargetModel) -> None:
    """The sizes a check relies on: whole numbers within the contract's plausibility
    bounds; the eps a positive number; architectures a list of names."""
    from ..contract.model import target_limits

    config = model.text_config
    for key, most in target_limits().items():
        value = config.get(key)
        if value is None and key == "vocab_size":
            continue
        if type(value) is not int or not 1 <= value <= most:
            raise model._error(
                f"config.json: {key} is {str(value)[:40]}, expected a whole "
                f"number in [1, {most}] (a plausibility bound)"
            )
    eps = config.get("rms_norm_eps", 1e-6)
    if type(eps) not in (int, float) or not (math.isfinite(eps) and eps > 0):
        raise model._error(
            f"config.json: rms_norm_eps is {str(eps)[:40]}, expected a positive number"
        )
    archs = model.config.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise model._error("config.json: architectures is not a list of names")


def _index(path: Path) -> dict[str, Path]:
    """Tensor name -> safetensors file, from the headers of the files the index names (else
    of every ``*.safetensors``), each checked to lie inside the folder."""
    if (path / INDEX).exists():
        weight_map = _read_json(path, INDEX).get("weight_map")
        if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
        ):
            raise UsageError(f"target model {path}: {INDEX} has no weight_map of names to files")
        names = sorted(set(weight_map.values()))
    else:
        names = sorted(f.name for f in path.glob("*.safetensors"))
    if not names:
        pickles = (
            " (pickled .bin weights are never read: convert them to safetensors)"
            if any(path.glob("*.bin"))
            else ""
        )
        raise UsageError(f"target model {path}: no safetensors files{pickles}")
    out: dict[str, Path] = {}
    for name in names:
        file = _inside(path, name)
        out.update(dict.fromkeys(_header(path, file), file))
    return out


def _inside(folder: Path, name: str) -> Path:
    """``folder/name``, refused unless ``name`` is a plain relative path to a regular
    file that resolves inside the folder (or inside the ``blobs/`` of a Hugging Face
    cache snapshot, where every file is a link into it)."""
    parts = PurePosixPath(name).parts
    if not name or "\0" in name or name.startswith(("/", "\\")) or ".." in parts:
        raise UsageError(
            f"target model {folder}: the index names {name[:80]!r}, a path outside the model folder"
        )
    try:
        real, root = (folder / name).resolve(), folder.resolve()
    except (OSError, RuntimeError) as exc:  # a link loop
        raise UsageError(f"target model {folder}: {name}: {exc}") from None
    roots = [root] + ([root.parent.parent / "blobs"] if root.parent.name == "snapshots" else [])
    if not any(real.is_relative_to(r) for r in roots):
        raise UsageError(f"target model {folder}: {name} links to {real}, outside the model folder")
    if not real.is_file():
        raise UsageError(f"target model {folder}: {name} is not a regular file")
    return real


def _header(folder: Path, file: Path) -> dict[str, list[int]]:
    """Tensor name -> shape, from a safetensors header (no tensor data is read)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(file), framework="pt") as f:
            return {name: list(f.get_slice(name).get_shape()) for name in f.keys()}
    except (SafetensorError, OSError, ValueError) as exc:
        raise UsageError(
            f"target model {folder}: {file.name} is not a readable safetensors file: {exc}"
        ) from None


def _stored_elements(model: TargetModel) -> int:
    """Elements of every tensor the model's safetensors files declare."""
    return sum(
        math.prod(shape)
        for file in set(model._files.values())
        for shape in _header(model.path, file).values()
    )
