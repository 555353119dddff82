"""The engines' and trainers' names as users write them, in ``resolve.ENGINES``'s order: the
CLI's ``--engine`` and ``resolve --trainer`` choices without loading a single engine's rules
(a command that resolves nothing, such as ``check`` of a contract without a serving section,
never imports them).
``tests/release/test_resolve.py`` holds this tuple equal to ``resolve.ENGINES``."""

from __future__ import annotations

from ..methods import EAGLE3_ENGINES, METHOD_ONLY_ENGINES

SERVING_ENGINE_NAMES: tuple[str, ...] = EAGLE3_ENGINES
"""The serving engines (every one serves EAGLE-3): what ``--engine`` takes in every command."""

SOURCE_ONLY_ENGINE_NAMES: tuple[str, ...] = ("ollama", "mistralrs")
"""Engines read from source for some methods only (engines/source_methods.py): ollama's
DFlash and MTP, mistral.rs's DFlash, DFlash2 and MTP."""

METHOD_ONLY_ENGINE_NAMES: tuple[str, ...] = tuple(
    dict.fromkeys((*METHOD_ONLY_ENGINES, *SOURCE_ONLY_ENGINE_NAMES))
)
"""Engines read for some methods only, not EAGLE-3 (onnxruntime-genai, ollama, mistralrs): what
``resolve --engine`` takes beside the serving engines, for ``--method`` one they serve."""

TRAINER_NAMES: tuple[str, ...] = ("specforge", "speculators-v1", "speculators", "eagle", "hf")
"""The trainers (``hf``: plain hidden_states indices): what ``resolve --trainer`` takes."""

ENGINE_NAMES: tuple[str, ...] = (*SERVING_ENGINE_NAMES, *TRAINER_NAMES)
"""Both, in ``resolve.ENGINES``'s order: every name the engines' table resolves."""
