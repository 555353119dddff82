"""Whether the serving target is the training target, in the sense the draft needs.

A draft is trained on the hidden states of one checkpoint (the training target) and fed,
at serving time, those of another (the serving checkpoint: a quantized twin, a rotated
QuaRot export, another revision). Both run on the same tokens (a shard's, or fixed ones)
through the reference capture (:func:`.reference.capture_canonical`), and each compared
layer's states are held side by side: the mean per-token cosine and the relative error
``||serving - training|| / ||training||``. A quantized twin drifts (a warning that gives
the number: EC622); a rotated or another model's basis fails (EC623); different shapes
(EC621) or a folder that cannot be read or run (EC620) are said as such.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..findings import Finding, finding
from ..layers import Layer

if TYPE_CHECKING:
    import torch

    from .target import TargetModel

BASIS_FLOOR = 0.9
"""Below this mean per-token cosine at any compared layer the serving target's hidden
states are in another basis: what the draft learned does not apply (a rotation, another
model). A weight-quantized twin of a real model stays above 0.98 (int4: vllm-ascend#6914)."""
DRIFT_NOISE = 1e-3
"""Above this relative error the serving target is not the training target bit for bit:
the drift is reported as a number (a warning); float32 reruns of one checkpoint sit at 0."""
STORAGE_MARGIN = 1.5
"""A layer drifts only when its error is also above this many times the error storing
either checkpoint in bfloat16 causes there (:func:`storage_noise`): a float32 target saved
as bfloat16 or float16 is the same model to a draft served in bfloat16. On the tests'
tiny targets an int8 round-to-nearest twin drifts 2.2-3.0 times that error at every
layer past the embedding, a bfloat16 copy exactly 1.0 (benchmarks/false_alarms_seams.py);
on real weights int8 rounding is about 8 times bfloat16's."""
FIXED_TOKENS = 32
MAX_TOKENS = 512


@dataclass(frozen=True)
class LayerDrift:
    """One compared layer: mean and lowest per-token cosine, and the relative error."""

    layer: Layer
    cosine: float
    min_cosine: float
    rel_error: float

    def __str__(self) -> str:
        return (
            f"{self.layer}: cosine {self.cosine:.4f} (lowest {self.min_cosine:.4f}), "
            f"relative error {self.rel_error:.2e}"
        )


def fixed_tokens(rows: int, count: int = FIXED_TOKENS) -> list[int]:
    """``count`` token ids spread over an embedding of ``rows`` rows, the same every run."""
    return [(1 + 7919 * i) % rows for i in range(min(count, rows))]


def check_target_identity(
    training_dir: Path,
    serving_dir: Path,
    *,
    layers: Sequence[str] | None = None,
    tokens: Sequence[int] | None = None,
) -> list[Finding]:
    """The serving checkpoint ``serving_dir`` against the training target ``training_dir``
    on ``tokens`` (else :func:`fixed_tokens`), at ``layers`` (canonical names; else every
    layer from ``embed`` to ``residual:L``). A folder that cannot be read or run is EC620;
    a layer name or a token the models cannot take is a :class:`UsageError`."""
    from .target import TargetModel

    models: list[TargetModel] = []
    for role, folder in (("training", training_dir), ("serving", serving_dir)):
        try:
            models.append(TargetModel.open(folder))
        except UsageError as exc:
            return [_unreadable(role, folder, str(exc))]
    training, serving = models
    shape = _shape_findings(training, serving)
    if shape:
        return shape
    wanted = _layers(layers, training.num_layers)
    for role, model in (("training", training), ("serving", serving)):
        try:
            model.embedding  # noqa: B018 -- read (and checked) once, before any forward pass
        except UsageError as exc:
            return [_unreadable(role, model.path, str(exc))]
    ids = _tokens(tokens, training, serving)
    captured = []
    for role, model in (("training", training), ("serving", serving)):
        try:
            captured.append(_capture(model, ids))
        except UsageError as exc:
            return [_unreadable(role, model.path, str(exc))]
    drifts = [_compare(layer, captured[0][layer], captured[1][layer]) for layer in wanted]
    noise = {layer: 0.0 for layer in wanted}
    for model, states in zip(models, captured, strict=True):
        for layer, value in storage_noise(model, ids, states, wanted).items():
            noise[layer] = max(noise[layer], value)
    return _verdict(drifts, noise, training_dir, serving_dir, len(ids))


def storage_noise(
    model: TargetModel,
    ids: Sequence[int],
    states: dict[Layer, torch.Tensor],
    layers: Sequence[Layer],
) -> dict[Layer, float]:
    """Each of ``layers``' relative error between ``model`` (its ``states`` on ``ids``)
    and the same model with every weight rounded to bfloat16; empty, with no pass run,
    when the weights are bfloat16 numbers already (a bfloat16 checkpoint)."""
    import copy

    import torch

    module = model.module
    with torch.no_grad():
        if all(torch.equal(p, p.to(torch.bfloat16).to(p.dtype)) for p in module.parameters()):
            return {}
        twin = copy.deepcopy(module)
        for p in twin.parameters():
            p.copy_(p.to(torch.bfloat16).to(p.dtype))
    from .reference import capture_canonical

    try:
        rounded = capture_canonical(twin, torch.tensor(list(ids), dtype=torch.long))
    except Exception:  # the model's own pass ran: only a weight rounded to inf breaks it
        return {}
    return {layer: _compare(layer, states[layer], rounded[layer]).rel_error for layer in layers}


def compare_targets(
    training: TargetModel, serving: TargetModel, layers: Sequence[Layer], ids: Sequence[int]
) -> list[LayerDrift]:
    """Each of ``layers`` of the two models on ``ids``, compared (both already checked)."""
    first, second = _capture(training, ids), _capture(serving, ids)
    return [_compare(layer, first[layer], second[layer]) for layer in layers]


def _capture(model: TargetModel, ids: Sequence[int]) -> dict[Layer, torch.Tensor]:
    import torch

    from .reference import capture_canonical

    module = model.module  # UsageError when transformers cannot load it
    try:
        return capture_canonical(module, torch.tensor(list(ids), dtype=torch.long))
    except Exception as exc:  # any failure of a third-party forward pass
        raise model._error(f"its forward pass failed: {str(exc)[:200]}") from None


def _compare(layer: Layer, training: torch.Tensor, serving: torch.Tensor) -> LayerDrift:
    import torch

    a, b = training.double(), serving.double()
    cos = torch.nn.functional.cosine_similarity(a, b, dim=-1, eps=1e-30)
    rel = float((b - a).norm() / a.norm().clamp_min(1e-30))
    return LayerDrift(layer, float(cos.mean()), float(cos.min()), rel)


def _verdict(
    drifts: list[LayerDrift],
    noise: dict[Layer, float],
    training_dir: Path,
    serving_dir: Path,
    tokens: int,
) -> list[Finding]:
    table = "\n".join(
        f"{d}, bfloat16 storage {noise[d.layer]:.2e}" if noise[d.layer] else str(d) for d in drifts
    )
    worst_cos = min(drifts, key=lambda d: d.cosine)
    drifting = [
        d for d in drifts if d.rel_error > max(DRIFT_NOISE, STORAGE_MARGIN * noise[d.layer])
    ]
    extra = {
        "layers": {
            str(d.layer): {
                "cosine": d.cosine,
                "min_cosine": d.min_cosine,
                "rel_error": d.rel_error,
                "storage_noise": noise[d.layer],
            }
            for d in drifts
        },
        "tokens": tokens,
    }
    where = f"serving target {serving_dir} beside training target {training_dir}"
    if worst_cos.cosine < BASIS_FLOOR:
        return [
            finding(
                "EC623",
                f"{where}: its hidden states are in another basis ({worst_cos})",
                file=str(serving_dir),
                expected=f"mean cosine >= {BASIS_FLOOR} at every compared layer",
                found=f"{worst_cos.cosine:.4f} at {worst_cos.layer}",
                hint="a rotated (QuaRot/SpinQuant) or different checkpoint feeds the draft states "
                "it never saw: serve the checkpoint the draft was trained on, or regenerate "
                "the draft's training data with the serving checkpoint and retrain",
                details=table,
                extra=extra,
            )
        ]
    if drifting:
        worst_rel = max(drifting, key=lambda d: d.rel_error)
        return [
            finding(
                "EC622",
                f"{where}: its hidden states drift from the training target's "
                f"(worst {worst_rel}) on {tokens} tokens",
                file=str(serving_dir),
                expected=f"relative error <= {DRIFT_NOISE:g} (the same weights), or <= "
                f"{STORAGE_MARGIN:g} x the error of storing the weights in bfloat16",
                found=f"{worst_rel.rel_error:.2e} at {worst_rel.layer}, "
                f"cosine {worst_rel.cosine:.4f}",
                hint="a quantized or re-exported serving checkpoint: expect acceptance to drop "
                "with this drift; measure it with the probe, or train the draft on states of "
                "the serving checkpoint",
                details=table,
                severity="warning",
                extra=extra,
            )
        ]
    return []


def _unreadable(role: str, folder: Path, reason: str) -> Finding:
    return finding(
        "EC620",
        f"the {role} target {folder} cannot be compared: {reason}",
        file=str(folder),
        expected="an HF model folder (config.json, safetensors) transformers can run on CPU",
        found=reason,
        hint=f"point --{'serving-' if role == 'serving' else ''}target-model at the checkpoint "
        "folder; a checkpoint only a GPU kernel can load needs a dequantized copy",
    )


def _shape_findings(training: TargetModel, serving: TargetModel) -> list[Finding]:
    out = []
    for what, a, b in (
        ("num_hidden_layers", training.num_layers, serving.num_layers),
        ("hidden_size", training.hidden_size, serving.hidden_size),
        ("vocab_size", training.vocab_size, serving.vocab_size),
    ):
        if a != b:
            out.append(
                finding(
                    "EC621",
                    f"the serving target {serving.path} has {what} {b}, the training target "
                    f"{training.path} {a}",
                    file=str(serving.path),
                    expected=f"{what} {a}",
                    found=f"{what} {b}",
                    hint="the draft serves only on the model it was trained on: point "
                    "--serving-target-model at a checkpoint of that model",
                )
            )
    return out


def _layers(names: Sequence[str] | None, num_layers: int) -> list[Layer]:
    if names is None:
        return [Layer(k) for k in range(num_layers + 1)]
    out = []
    for name in names:
        try:
            layer = Layer.parse(name)
            layer.check_bounds(num_layers)
        except ValueError as exc:
            raise UsageError(f"target identity: {exc}") from None
        out.append(layer)
    if not out:
        raise UsageError("target identity: no layers to compare")
    return out


def _tokens(tokens: Sequence[int] | None, *models: TargetModel) -> list[int]:
    rows = min(m.embedding_rows for m in models)
    if tokens is None:
        return fixed_tokens(rows)
    ids = [int(t) for t in list(tokens)[:MAX_TOKENS]]
    if not ids:
        raise UsageError("target identity: no tokens to run")
    bad = [t for t in ids if not 0 <= t < rows]
    if bad:
        raise UsageError(
            f"target identity: token id {bad[0]} is outside both models' embeddings [0, {rows})"
        )
    positions = [m.max_positions for m in models if m.max_positions is not None]
    return ids[: min(positions)] if positions else ids


def as_ids(values: Any) -> list[int]:
    """A shard's ``[T]`` ids (torch or the mapped reader's view) as a list of ints."""
    from ..shards.reading import comparable

    array = comparable(values)
    return [] if array is None else [int(v) for v in array.reshape(-1)[:MAX_TOKENS]]
