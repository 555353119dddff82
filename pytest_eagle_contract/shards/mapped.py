"""A shard file mapped and read without torch: :func:`read_stored`."""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

from ..errors import ShardReadError
from .safetensors_file import read_safetensors
from .stored import Mapping
from .torch_zip import read_torch_zip


def read_stored(path: Path) -> Any | None:
    """What a torch zip file or a safetensors file holds (dicts and lists of
    :class:`.stored.Stored`, plain numbers and strings), or None when torch should read it
    (a legacy or gzip file, another global, a dtype numpy lacks, an extent past the
    storage: torch's refusal or error then says what is wrong)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return None
            buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
            mapping = Mapping(os.fspath(path), os.fstat(f.fileno()), buffer)
            if path.name.endswith(".safetensors"):
                return read_safetensors(mapping)
            if head[:4] == b"PK\x03\x04":
                return read_torch_zip(f, mapping)
    except ShardReadError:
        raise
    except Exception:  # anything else at all: torch reads it, and says what is wrong
        return None
    return None
