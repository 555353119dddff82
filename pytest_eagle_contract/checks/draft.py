"""The ``draft`` family: the draft checkpoint itself, as the serving engine will load it.

Reads ``serving.draft_config``'s folder (config.json and safetensors headers; only
``embed_tokens`` is read whole, to compare with the target's). The maps' consistency with
each other is EC509 (layout family); the fc width against the contract's is EC503.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from ..findings import Finding, Parts, RuleCode, finding, not_run
from .family import CheckFamily

if TYPE_CHECKING:
    import torch

    from ..contract.model import Contract
    from .unit import Resources, Unit

KEY = "serving.draft_config"
DFLASH_FAMILY = ("dflash", "dflash2", "dspark")
# the fc weight's names in a DFlash checkpoint (``model.`` dropped): SGLang 0.5.23
# models/dflash.py loads ``fc.weight`` and aliases the native export's ``encoder.fc.weight``
DFLASH_FC = ("fc.weight", "encoder.fc.weight")


def _shapes(directory: Path) -> dict[str, tuple[Path, str, tuple[int, ...]]]:
    """Normalised tensor name -> (file, stored name, shape), from the headers."""
    from safetensors import SafetensorError, safe_open

    from ..errors import UsageError
    from ..models.draft import weight_files

    out: dict[str, tuple[Path, str, tuple[int, ...]]] = {}
    for file in weight_files(directory):
        try:
            with safe_open(str(file), framework="pt") as f:
                for key in f.keys():
                    name = key.removeprefix("model.")
                    if name.startswith("layers.0."):
                        name = "midlayer." + name[len("layers.0.") :]
                    out[name] = (file, key, tuple(f.get_slice(key).get_shape()))
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise UsageError(f"draft {directory}: cannot read {file.name}: {exc}") from None
    return out


def _read(entry: tuple[Path, str, tuple[int, ...]]) -> torch.Tensor:
    from safetensors import SafetensorError, safe_open

    from ..errors import UsageError

    try:
        with safe_open(str(entry[0]), framework="pt") as f:
            out: torch.Tensor = f.get_tensor(entry[1])
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise UsageError(f"draft {entry[0].parent}: cannot read {entry[0].name}: {exc}") from None
    return out


def check_draft(contract: Contract, target_embedding: torch.Tensor | None) -> list[Finding]:
    """Findings about the draft checkpoint of ``serving.draft_config``."""
    from ..engines.draft_config import read_draft_config
    from ..engines.resolve import get_engine
    from ..errors import EagleContractError
    from ..models.draft_model import draft_json

    serving = contract.serving
    if serving is None or serving.draft_config is None:
        return []
    out: list[Finding] = []

    def add(code: RuleCode, message: str, hint: str, **kw: Unpack[Parts]) -> None:
        out.append(finding(code, message, contract=contract, key=KEY, hint=hint, **kw))

    try:
        draft = read_draft_config(serving.draft_config)
        config = draft_json(draft.path.parent)
    except EagleContractError as exc:  # the layout family reports it as EC510
        return [not_run("draft", f"{exc} (EC510)", contract=contract, key=KEY)]
    shapes = _shapes(draft.path.parent)
    if not shapes:
        return []
    engine = get_engine(serving.engine)
    H = contract.target.hidden_size
    hidden = draft.hidden_size or H
    if contract.method in DFLASH_FAMILY:
        _dflash_fc(contract, config, shapes, hidden, add)
    elif "fc.weight" in shapes:
        n_aux = engine.n_aux(draft, serving.version)
        found = shapes["fc.weight"][2]
        want = (hidden, n_aux * (draft.target_hidden_size or H))
        if found != want:
            add(
                "EC901",
                f"fc.weight is {list(found)}, the engine builds fc as {list(want)}",
                f"{engine.title} builds fc for {n_aux} aux states of width "
                f"{draft.target_hidden_size or H} onto hidden_size {hidden}: the checkpoint "
                "was trained for another target or aux count",
                expected=list(want),
                found=list(found),
            )
    vocab = contract.target.vocab_size or draft.vocab_size
    rows = draft.draft_vocab_size or vocab
    head = shapes.get("lm_head.weight")
    if (
        head is None
        and draft.draft_vocab_size is not None
        and not config.get("tie_word_embeddings")
    ):
        add(
            "EC902",
            "the draft config sets draft_vocab_size but the checkpoint has no lm_head.weight",
            "the engine builds its own lm_head and leaves it unloaded "
            "(random or zero): export the draft's lm_head",
        )
    elif head is not None and rows is not None and head[2][0] != rows:
        add(
            "EC902",
            f"lm_head.weight has {head[2][0]} rows, draft_vocab_size is {rows}",
            "set draft_vocab_size to the lm_head's rows (the logits index the draft vocabulary)",
            expected=rows,
            found=head[2][0],
        )
    if draft.draft_vocab_size and vocab and draft.draft_vocab_size < vocab and "d2t" not in shapes:
        add(
            "EC903",
            f"a compressed draft vocabulary ({draft.draft_vocab_size} of {vocab}) without d2t",
            "without d2t the engine reads draft ids as target ids: every "
            "drafted token is another token; export d2t/t2d with the draft",
        )
    if contract.method in DFLASH_FAMILY:  # EC904 / EC905: SGLang's llama_eagle3 facts
        return out
    embed = shapes.get("embed_tokens.weight")
    if embed is not None and target_embedding is not None and serving.engine == "sglang":
        if embed[2] != tuple(target_embedding.shape) or not bool(
            (_read(embed).float() - target_embedding.float()).abs().max() < 1e-3
        ):
            add(
                "EC904",
                "the draft's embed_tokens differ from the target's embedding, and "
                "SGLang overwrites them with the target's",
                "train with the target's "
                "embedding frozen, or serve where the draft's own embedding is loaded",
                severity="warning",
            )
    if config.get("norm_before_residual") and serving.engine == "sglang":
        add(
            "EC905",
            "the draft config sets norm_before_residual, which SGLang's llama_eagle3 does not read",
            "SGLang feeds the un-normed fc output into the "
            "residual; the draft was trained with it normed: serve it with vLLM, or retrain "
            "without the flag",
        )
    return out


def _dflash_fc(
    contract: Contract,
    config: Mapping[str, Any],
    shapes: dict[str, tuple[Path, str, tuple[int, ...]]],
    hidden: int,
    add: Callable[..., None],
) -> None:
    """EC901 for a DFlash-family draft: its fc takes one target state per tap, so its weight is
    ``[hidden_size, taps x target hidden_size]``. The tap count is the draft's list as the
    engine reads it, else its fallback's length: the draft's ``num_hidden_layers`` on SGLang
    (``build_target_layer_ids``, models/dflash.py ``num_context_features``) and vLLM
    (``qwen3_dflash.py`` ``_get_dflash_fc_input_size``), mlx-vlm's default list on mlx
    (``qwen3_dflash/config.py``). Both engines refuse a checkpoint whose fc differs (SGLang
    0.5.23: "DFLASH fc.weight shape mismatch")."""
    from ..engines.dflash import mlx_default_taps, parse_dflash_draft
    from ..engines.dflash_draft import TAP_KEYS
    from ..engines.dflash_family import DSPARK_KEY
    from ..errors import EagleContractError

    name = next((n for n in DFLASH_FC if n in shapes), None)
    serving = contract.serving
    if name is None or serving is None:
        return
    try:
        draft = parse_dflash_draft(config)
    except EagleContractError:  # the layout family reports it (EC510)
        return
    keys = (DSPARK_KEY, *TAP_KEYS) if contract.method == "dspark" else TAP_KEYS
    key = next((k for k in keys if k in draft.found), None)
    if key is not None:
        taps, said = len(draft.found[key]), f"its {key} lists {len(draft.found[key])}"
    elif serving.engine == "mlx":
        taps = len(mlx_default_taps())
        said = f"it lists none and mlx-vlm's default {mlx_default_taps()} has {taps}"
    elif draft.num_hidden_layers is not None:
        taps = draft.num_hidden_layers
        said = f"it lists none and the engine takes one per draft layer ({taps})"
    else:
        return
    H = contract.target.hidden_size
    found = shapes[name][2]
    want = (hidden, taps * H)
    if found != want:
        add(
            "EC901",
            f"{name} is {list(found)}; the draft's fc takes {taps} taps of the target's "
            f"hidden size {H} ({said}): {list(want)}",
            "the engine refuses the checkpoint at load, or the draft was trained on another "
            "tap count or target: export the draft trained for this target with its tap list "
            "in dflash_config.target_layer_ids",
            expected=list(want),
            found=list(found),
        )


def _run(runner: Resources, unit: Unit) -> list[Finding]:
    target = runner.target(unit.contract)
    return check_draft(unit.contract, None if target is None else target.embedding)


FAMILY = CheckFamily(
    "draft",
    "contract",
    "the draft checkpoint as the engine loads it: fc, lm_head, vocab maps, embedding, flags",
    codes=("EC901", "EC902", "EC903", "EC904", "EC905"),
    keys=("serving.draft_config",),
    run=_run,
    needs=frozenset({"serving"}),
    default=False,
)
