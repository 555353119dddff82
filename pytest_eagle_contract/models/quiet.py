"""transformers' progress bars off around one call, and as they were after it.

``save_pretrained`` draws "Writing model shards" and ``from_pretrained`` "Loading weights" on
stderr through transformers' tqdm. The tool's own output has no place for them (the CLI draws
its own line, shells/progress.py; pytest its own report), but the switch is global: in the
user's process (the pytest plugin, a script importing the tool) it is the user's. So it is
turned off for the call only and restored after it, transformers' flag and huggingface_hub's
per-group states alike (``transformers.utils.logging.disable_progress_bar`` turns off both).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def no_progress_bars() -> Iterator[None]:
    """The block runs with transformers' (and huggingface_hub's) progress bars off."""
    import importlib

    from transformers.utils import logging

    hub_tqdm = importlib.import_module("huggingface_hub.utils.tqdm")  # the module, not its class

    was_on = logging.is_progress_bar_enabled()
    hub_states = dict(hub_tqdm.progress_bar_states)
    with warnings.catch_warnings():  # HF_HUB_DISABLE_PROGRESS_BARS=0 warns that it wins
        warnings.simplefilter("ignore")
        logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if was_on:
                logging.enable_progress_bar()  # type: ignore[no-untyped-call]
        hub_tqdm.progress_bar_states.clear()
        hub_tqdm.progress_bar_states.update(hub_states)
