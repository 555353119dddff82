"""vLLM's hidden-state files, read as untrusted input and turned into capture files.

vLLM's ``extract_hidden_states`` speculative method with its ``ExampleHiddenStatesConnector``
(``vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py``, 0.34.0)
writes one safetensors file per request, ``{shared_storage_path}/{request_id}.safetensors``
(speculators' data generation moves it to ``hidden_states/hs_{i}.safetensors``):

    hidden_states  [T, n, H]  the target's aux states, stacked on dim 1 in the order the
                              target's layer loop appends them: ascending layer id
    token_ids      [T] int64  the prompt's ids (with ``include_output_tokens``: every token
                              but the last)

and no metadata: which layers the n states are is what the server was launched with
(``--speculative-config '{"method": "extract_hidden_states", "draft_model_config":
{"hf_config": {"eagle_aux_hidden_state_layer_ids": [...]}}}'``; speculators'
``scripts/launch_vllm.py`` adds the last layer, ``num_hidden_layers``). An EAGLE-3 draft on
vLLM gets the same aux list concatenated on the last dim (``torch.cat(aux, -1)``), so the
states of the draft's own ids, side by side, are exactly its fc input: that is the capture.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CaptureFileError, UsageError
from .files import CaptureMeta, check_small_header, write_capture

if TYPE_CHECKING:
    import torch

    from ..layers import Layer

STATES_KEY, TOKENS_KEY = "hidden_states", "token_ids"
# CacheOnlyAttentionBackend.supported_dtypes (the cache the states are copied out of)
FLOAT_DTYPES = frozenset({"BF16", "F16", "F32"})
INT_DTYPES = frozenset({"I64", "I32"})  # token_ids_to_tensor: int64 by default
MAX_STATES = 1024  # layers captured per token (a model has at most a few hundred)
MAX_HIDDEN = 1 << 17


@dataclass(frozen=True)
class VllmStates:
    """One vLLM hidden-state file: ``states`` [T, n, H] and its ``token_ids`` [T]."""

    path: Path
    token_ids: torch.Tensor
    states: torch.Tensor

    @property
    def count(self) -> int:
        return int(self.states.shape[1])

    @property
    def hidden_size(self) -> int:
        return int(self.states.shape[2])


def read_vllm_file(path: Path) -> VllmStates:
    """Read and validate one file as vLLM writes it; :class:`CaptureFileError` (EC707) for
    anything else: not a regular file, a header that is not a small safetensors header, other
    tensor names, dtypes or shapes, a body that does not hold the declared bytes, non-finite
    states (speculators' ``check_hidden_states`` refuses those too)."""
    from safetensors import SafetensorError, safe_open

    try:
        check_small_header(path, "a vLLM hidden-state file", "vLLM's")
        with safe_open(str(path), framework="pt") as f:
            names = set(f.keys())
            if names != {STATES_KEY, TOKENS_KEY}:
                raise CaptureFileError(
                    f"{path}: tensors {sorted(names)[:8]}, not vLLM's "
                    f"{STATES_KEY!r} and {TOKENS_KEY!r}"
                )
            states_slice, ids_slice = f.get_slice(STATES_KEY), f.get_slice(TOKENS_KEY)
            _check_layout(
                path,
                str(states_slice.get_dtype()),
                list(states_slice.get_shape()),
                str(ids_slice.get_dtype()),
                list(ids_slice.get_shape()),
            )
            states, ids = f.get_tensor(STATES_KEY), f.get_tensor(TOKENS_KEY)
    except (SafetensorError, OSError, ValueError, TypeError, RuntimeError) as exc:
        raise CaptureFileError(f"{path}: not a readable safetensors file: {exc}") from None
    _check_values(path, states, ids)
    return VllmStates(path, ids, states)


def _check_layout(path: Path, dtype: str, shape: list[int], ids_dtype: str, ids: list[int]) -> None:
    if dtype not in FLOAT_DTYPES or len(shape) != 3:
        raise CaptureFileError(
            f"{path}: {STATES_KEY} is {dtype} {shape}, not [T, n, H] in "
            f"{'/'.join(sorted(FLOAT_DTYPES))} (the states vLLM caches)"
        )
    tokens, count, hidden = shape
    if not (0 < count <= MAX_STATES and 0 < hidden <= MAX_HIDDEN):
        raise CaptureFileError(
            f"{path}: {STATES_KEY} declares {count} states of width {hidden} "
            f"(at most {MAX_STATES} of at most {MAX_HIDDEN})"
        )
    if ids_dtype not in INT_DTYPES or len(ids) != 1:
        raise CaptureFileError(f"{path}: {TOKENS_KEY} is {ids_dtype} {ids}, not [T] integers")
    if ids[0] != tokens or tokens == 0:
        raise CaptureFileError(
            f"{path}: {STATES_KEY} has {tokens} rows beside {ids[0]} {TOKENS_KEY}"
        )


def _check_values(path: Path, states: torch.Tensor, ids: torch.Tensor) -> None:
    import torch

    if int(ids.min()) < 0:
        raise CaptureFileError(f"{path}: negative {TOKENS_KEY}")
    finite = torch.isfinite(states).all(dim=-1)  # [T, n]
    if not bool(finite.all()):
        bad = (~finite).nonzero()
        token, state = (int(x) for x in bad[0])
        raise CaptureFileError(
            f"{path}: {int(bad.shape[0])} (token, state) rows hold NaN or Inf, the first "
            f"at token {token}, state {state} (the server fed the draft non-finite states)"
        )


# -- Which states feed the fc, and as which layers ------------------------------------


def captured_order(layer_ids: Sequence[int], count: int, path: Path) -> list[int]:
    """The layer id of each of a file's ``count`` states: the launch's ids, ascending (the
    layer loop appends in layer order; vLLM refuses duplicates)."""
    order = sorted(set(layer_ids))
    if len(order) != len(layer_ids):
        raise UsageError(f"--layer-ids {list(layer_ids)}: vLLM refuses duplicate ids")
    if len(order) != count:
        raise CaptureFileError(
            f"{path}: {count} states, and --layer-ids names {len(order)} "
            f"({order}): the file was written by a server launched with other ids"
        )
    return order


def fc_positions(order: Sequence[int], fc_ids: Sequence[int]) -> list[int]:
    """Where the draft's fc ids sit among the captured ones (in the order the draft's fc
    receives them: ascending, as vLLM's loop appends them)."""
    wanted = sorted(set(fc_ids))
    missing = [i for i in wanted if i not in order]
    if missing or not wanted:
        raise UsageError(
            f"the draft's fc takes layer ids {wanted}; the server captured {list(order)} "
            f"(missing {missing}): relaunch with ids that include the draft's"
        )
    return [list(order).index(i) for i in wanted]


def vllm_layers(
    num_layers: int, fc_ids: Sequence[int], arch: str | None, version: str | None
) -> tuple[tuple[Layer, ...] | None, str]:
    """The canonical layers vLLM feeds for ``fc_ids`` (or why not)."""
    from ..engines.resolve import resolve
    from ..errors import EagleContractError

    try:
        res = resolve("vllm", num_layers, sorted(set(fc_ids)), arch, version)
    except EagleContractError as exc:
        return None, f"layers unresolved: {exc}"
    return tuple(
        res.layers
    ), f"vllm {version or '(version assumed)'} on {arch or '?'}: {res.source}"


@dataclass(frozen=True)
class Launch:
    """What the vLLM that wrote the files was launched with (files carry none of it)."""

    layer_ids: tuple[int, ...]  # eagle_aux_hidden_state_layer_ids of the extraction
    fc_ids: tuple[int, ...]  # the draft's ids: which captured states its fc takes
    num_layers: int
    hidden_size: int
    arch: str | None = None
    version: str | None = None


def fc_input(vs: VllmStates, launch: Launch) -> torch.Tensor:
    """The draft's fc input [T, n_fc * H]: its states side by side, as vLLM's EAGLE-3
    concatenates them."""
    if vs.hidden_size != launch.hidden_size:
        raise CaptureFileError(
            f"{vs.path}: states of width {vs.hidden_size}, the target's hidden_size is "
            f"{launch.hidden_size} (another model's file?)"
        )
    order = captured_order(launch.layer_ids, vs.count, vs.path)
    picked = vs.states[:, fc_positions(order, launch.fc_ids), :]
    return picked.reshape(int(picked.shape[0]), -1).contiguous()


def to_capture(
    vs: VllmStates, launch: Launch, out_dir: Path, source: str = "vllm-file", shard: str = ""
) -> Path:
    """Write ``vs`` as a capture file (:mod:`.files`) of what the draft's fc receives."""
    aux = fc_input(vs, launch)
    layers, how = vllm_layers(launch.num_layers, launch.fc_ids, launch.arch, launch.version)
    order = sorted(set(launch.layer_ids))
    meta = CaptureMeta(
        engine="vllm",
        version=launch.version,
        arch=launch.arch,
        mode="extract-hidden-states",
        layer_ids=tuple(sorted(set(launch.fc_ids))),
        layers=layers,
        hidden_size=launch.hidden_size,
        n_aux=len(set(launch.fc_ids)),
        source=source,
        shard=shard or vs.path.name,
        notes=(how, f"captured layer ids {order}; the draft's fc takes {sorted(launch.fc_ids)}"),
    )
    return write_capture(out_dir, vs.token_ids, aux, meta)


def speculators_default_ids(num_layers: int) -> list[int]:
    """The ids speculators' ``scripts/launch_vllm.py`` launches with by default."""
    return [2, num_layers // 2, num_layers - 3, num_layers]
