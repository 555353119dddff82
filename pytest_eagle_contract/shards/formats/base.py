"""What every shard format is: its keys, how its keys hold slots, and what its generator
and trainer do. One subclass per format, in this package (see docs/formats.md)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch

    from ...layers import Layer
    from ..stored import Array

MAX_SLOTS = 1024  # more states than any model has layers: a shape is garbage beyond this

Packing = Literal["concat", "single", "list", "stacked"]
"""How a key holds slots: ``concat`` [1,T,n*H] split along the last dim; ``single`` one
[1,T,H] or [T,H]; ``list`` a list of [T,H]; ``stacked`` [T,n,H] split along axis 1."""


def dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` -> ``bfloat16``."""
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class Slot:
    """One hidden state as a [T, H] view (``array``: as stored, torch or not), and where it
    came from in the file."""

    index: int
    source: str
    array: Array

    @property
    def tensor(self) -> torch.Tensor:
        """The state as a torch tensor (over the same bytes)."""
        from ..stored import to_torch

        return to_torch(self.array)

    @property
    def dtype(self) -> str:
        return dtype_name(self.array.dtype)


@dataclass(frozen=True)
class Format(ABC):
    """One shard format. ``signature`` is the key that says a file is this format;
    ``target_post_norm`` whether its trainer expects the target slot after the final norm;
    ``engine`` the serving engine whose capture its files hold and whose ids its drafts carry;
    ``has_target`` false where the files hold the fc inputs alone (SpecForge's DFlash);
    ``method`` the drafting method (methods.py) a format's files are only made for.
    Subclasses say how they write shards (``shard_name``, ``_state_keys``) and may read
    extras."""

    name: str
    globs: tuple[str, ...]
    ids_key: str
    mask_key: str | None
    states: tuple[tuple[str, Packing], ...]
    signature: str
    target_post_norm: bool
    optional_keys: frozenset[str] = frozenset()
    engine: str = "sglang"  # the serving engine its pipeline pairs with (infer's serving)
    has_target: bool = True  # whether its files keep a target state after the fc inputs

    @property
    def method(self) -> str | None:
        """The drafting method its files are only made for (the registry's
        ``Method.shard_formats``), None for a format every method's trainers share."""
        from ...methods import method_of_format

        return method_of_format(self.name)

    @property
    def required_keys(self) -> frozenset[str]:
        keys = {self.ids_key, *(key for key, _ in self.states)}
        if self.mask_key is not None:
            keys.add(self.mask_key)
        return frozenset(keys)

    @property
    def suffixes(self) -> tuple[str, ...]:
        """The file name endings of its globs (``data_*.pt`` -> ``.pt``)."""
        return tuple(glob.rsplit("*", 1)[-1] for glob in self.globs)

    # -- reading ---------------------------------------------------------------------------

    def read_extras(self, path: Path, tensors: dict[str, Any]) -> dict[str, Any]:
        """What the format keeps beside the shard file (a sidecar, a dataset row)."""
        return {}

    def split(
        self,
        tensors: dict[str, Any],
        hidden_size: int | None,
    ) -> tuple[list[Slot], list[str]]:
        """The state keys as [T, H] slots in stored order, and for any key that cannot be
        split a message saying why. Without ``hidden_size`` it is guessed from a ``single``
        key when the format has one."""
        from ..stored import is_array

        hidden = hidden_size or self._guess_hidden_size(tensors)
        slots: list[Slot] = []
        problems: list[str] = []
        for key, packing in self.states:
            value = tensors.get(key)
            if value is None:
                continue
            if packing == "list":
                if not isinstance(value, (list, tuple)) or len(value) > MAX_SLOTS:
                    what = (
                        f"{len(value)} entries"
                        if isinstance(value, (list, tuple))
                        else (f"a {type(value).__name__}")
                    )
                    problems.append(f"{key} is {what}, not a list of up to {MAX_SLOTS} [T, H]")
                    continue
                for j, item in enumerate(value):
                    if not is_array(item) or item.dim() == 0:
                        what = "0-d" if is_array(item) else type(item).__name__
                        problems.append(f"{key}[{j}] is {what}, not a [T, H] tensor")
                        continue
                    slots.append(Slot(len(slots), f"{key}[{j}]", _squeeze_batch(item)))
                continue
            if not is_array(value):
                problems.append(f"{key} is {type(value).__name__}, not a tensor")
                continue
            # a batch dimension of 1 leads [1, T, k, H] (stacked) or [1, T, W] (the others)
            tensor = _squeeze_batch(value, 4 if packing == "stacked" else 3)
            if packing == "stacked":
                if tensor.dim() != 3 or tensor.shape[1] > MAX_SLOTS:
                    problems.append(
                        f"{key} has shape {list(value.shape)}, expected [T, k, H] "
                        f"with k up to {MAX_SLOTS}"
                    )
                    continue
                for j in range(tensor.shape[1]):
                    slots.append(Slot(len(slots), f"{key}[:, {j}]", tensor[:, j]))
            elif packing == "concat":
                if tensor.dim() == 0:
                    problems.append(f"{key} is a 0-d tensor, expected [T, n * H]")
                    continue
                width = tensor.shape[-1]
                if not hidden or width % hidden or width // hidden > MAX_SLOTS:
                    problems.append(
                        f"{key} is {width} wide, not a multiple of hidden_size {hidden} "
                        f"(up to {MAX_SLOTS} times)"
                    )
                    continue
                for j in range(width // hidden):
                    slots.append(
                        Slot(
                            len(slots),
                            f"{key}[..., {j * hidden}:{(j + 1) * hidden}]",
                            tensor[..., j * hidden : (j + 1) * hidden],
                        )
                    )
            elif tensor.dim() == 0:
                problems.append(f"{key} is a 0-d tensor, expected [T, H]")
            else:
                slots.append(Slot(len(slots), key, tensor))
        return slots, problems

    def _guess_hidden_size(self, tensors: dict[str, Any]) -> int | None:
        for key, packing in self.states:
            value = tensors.get(key)
            shape: tuple[int, ...] = getattr(value, "shape", ())
            if packing == "single" and len(shape):
                return int(shape[-1]) or None
        return None

    # -- writing ---------------------------------------------------------------------------

    @abstractmethod
    def shard_name(self, index: int, compress: bool = False) -> str:
        """The relative path the format's generator gives sample ``index``."""

    @abstractmethod
    def _state_keys(self, slots: Sequence[torch.Tensor]) -> dict[str, Any] | None:
        """The keys the generator saves beside the ids and the mask for [T, H] ``slots`` in
        stored order; None when a file of this format cannot hold that many."""

    def shard_dict(
        self, input_ids: torch.Tensor, loss_mask: torch.Tensor, slots: Sequence[torch.Tensor]
    ) -> dict[str, Any]:
        """The dict the format's generator saves; ``slots`` are [T, H] in stored order."""
        data = self.record_dict(input_ids, loss_mask, slots)
        if data is None:
            raise ValueError(f"a {self.name} shard cannot hold {len(slots)} states")
        return data

    def can_hold(self, n_slots: int) -> bool:
        """Whether a shard of this format can hold ``n_slots`` states."""
        return n_slots >= 1

    def record_dict(
        self, input_ids: torch.Tensor, loss_mask: torch.Tensor, slots: Sequence[torch.Tensor]
    ) -> dict[str, Any] | None:
        """The smallest shard of this layout that holds ``slots`` (any count a generated
        record may have: a format that keeps its states under keys of their own leaves out
        the ones it has no state for); None when the format cannot hold them."""
        states = self._state_keys(slots)
        if states is None:
            return None
        data = {self.ids_key: input_ids}
        if self.mask_key is not None:
            data[self.mask_key] = loss_mask
        return data | states

    def _aux_then_target(self, slots: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
        """The state keys of a format that keeps its target apart: the aux states (all but
        the last slot) concatenated along the last dim under its first ``concat`` key, when
        there are any, and the target (the last slot) under its ``single`` key."""
        import torch

        aux = next(key for key, packing in self.states if packing == "concat")
        target = next(key for key, packing in self.states if packing == "single")
        out: dict[str, torch.Tensor] = {}
        if len(slots) >= 2:
            out[aux] = torch.cat(list(slots[:-1]), dim=-1)
        if slots:
            out[target] = slots[-1]
        return out

    # -- what its trainer does -------------------------------------------------------------

    @abstractmethod
    def default_layers(
        self, num_layers: int, metadata: dict[str, Any], arch: str | None = None
    ) -> list[Layer]:
        """The layers the trainer's own defaults capture (docs/layers.md), in stored order."""


def _squeeze_batch(t: Array, batched_dims: int = 3) -> Array:
    return t[0] if t.dim() == batched_dims and t.shape[0] == 1 else t
