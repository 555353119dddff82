"""A tokenizer folder, read as data: its fingerprint, vocabulary, special ids and chat
template, and its ``tokenizers`` backend for encoding and decoding.

Nothing from the folder runs: only ``tokenizer.json`` is loaded (by the ``tokenizers``
library, Rust), never a Python tokenizer class, and a folder whose tokenizer exists only as
remote code (``auto_map`` with no ``tokenizer.json``) is refused. Every file is read with a
size cap (docs/security.md): the JSON files under ``EAGLE_TARGET_JSON_MAX_BYTES``, a
``chat_template.jinja`` under ``EAGLE_TEMPLATE_MAX_BYTES``.
"""

from __future__ import annotations

import hashlib
import json
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CodedError, UsageError
from ..limits import env_bytes, read_json_object

TEMPLATE_MAX_BYTES_ENV = "EAGLE_TEMPLATE_MAX_BYTES"
DEFAULT_TEMPLATE_MAX_BYTES = 1 << 20  # the longest real templates (gpt-oss, Kimi) are ~20 KiB
SPECIAL_NAMES = ("bos_token", "eos_token", "pad_token", "unk_token")
# Keys of tokenizer_config.json that name where or how it was saved, not what it does.
_VOLATILE = frozenset({"chat_template", "name_or_path", "tokenizer_file", "auto_map"})
_HINT = "point --tokenizer (or tokenizer.path) at a folder with tokenizer.json"


@dataclass(frozen=True)
class TokenizerFolder:
    """What a tokenizer folder holds, read once."""

    path: Path
    files_sha256: str
    chat_template: str | None
    chat_template_sha256: str | None
    vocab_size: int
    special: dict[str, str]  # bos_token, eos_token, ...: the token's text
    special_ids: dict[str, int | None]  # bos, eos, pad: the token's id
    added_special: dict[str, int]  # every special added token: text -> id
    backend: Any = field(repr=False, compare=False)  # tokenizers.Tokenizer

    def encode(self, text: str) -> list[int]:
        """``text``'s ids as a chat template's output is tokenized: no special tokens added
        (transformers' ``apply_chat_template(tokenize=True)``)."""
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self.backend.decode(ids, skip_special_tokens=False))

    def token_id(self, text: str) -> int | None:
        found = self.backend.token_to_id(text)
        return None if found is None else int(found)

    def knows(self, token_id: int) -> bool:
        return 0 <= token_id < self.vocab_size and self.backend.id_to_token(token_id) is not None


def read_tokenizer(path: Path) -> TokenizerFolder:
    """The tokenizer folder ``path``, read as data. Raises CodedError EC330."""
    cannot = f"cannot read the tokenizer folder {path}"
    if not path.is_dir():
        raise CodedError("EC330", f"{cannot}: not a folder", _HINT)
    config = _json(path / "tokenizer_config.json", cannot, required=False)
    main = path / "tokenizer.json"
    if not main.exists():
        why = (
            "its tokenizer is remote code (auto_map) and no tokenizer.json; remote code "
            "never runs here"
            if "auto_map" in config
            else "no tokenizer.json (slow, sentencepiece-only tokenizers are not read)"
        )
        raise CodedError("EC330", f"{cannot}: {why}", _HINT)
    raw = _json(main, cannot, required=True)
    specials_map = _json(path / "special_tokens_map.json", cannot, required=False)
    template = _template(path, config, cannot)
    backend = _backend(raw, cannot)
    special = {**_texts(specials_map), **_texts(config)}
    added = {
        str(t["content"]): int(t["id"])
        for t in raw.get("added_tokens") or []
        if isinstance(t, dict)
        and t.get("special")
        and isinstance(t.get("content"), str)
        and type(t.get("id")) is int
    }
    ids: dict[str, int | None] = {}
    for name in ("bos", "eos", "pad"):
        text = special.get(f"{name}_token")
        ids[name] = None if text is None else _maybe(backend.token_to_id(text))
    return TokenizerFolder(
        path=path,
        files_sha256=_fingerprint(raw, config, specials_map),
        chat_template=template,
        chat_template_sha256=None if template is None else template_sha256(template),
        vocab_size=int(backend.get_vocab_size(with_added_tokens=True)),
        special=special,
        special_ids=ids,
        added_special=added,
        backend=backend,
    )


def template_sha256(template: str) -> str:
    """The template's fingerprint: its text with line ends normalized and trailing space
    cut (an editor's save changes neither what it renders)."""
    lines = template.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    text = "\n".join(line.rstrip() for line in lines).strip("\n")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _fingerprint(raw: dict[str, Any], config: dict[str, Any], specials: dict[str, Any]) -> str:
    """sha256 over the normalized files: keys sorted, the template and saved-where keys left
    out (the template has its own fingerprint)."""
    kept = {k: v for k, v in config.items() if k not in _VOLATILE}
    text = json.dumps([raw, kept, specials], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _json(path: Path, cannot: str, *, required: bool) -> dict[str, Any]:
    if not path.exists() and not path.is_symlink():
        if required:
            raise CodedError("EC330", f"{cannot}: no {path.name}", _HINT)
        return {}
    try:
        return read_json_object(path, f"{cannot}: {path.name}")
    except UsageError as exc:
        raise CodedError("EC330", str(exc), _HINT) from None


def _template(path: Path, config: dict[str, Any], cannot: str) -> str | None:
    """The chat template: ``chat_template.jinja`` (transformers >= 4.43 saves it there),
    else the config's ``chat_template`` (a string, or named templates: the ``default``)."""
    jinja = path / "chat_template.jinja"
    if jinja.exists():
        return _bounded_text(jinja, cannot)
    value = config.get("chat_template")
    if isinstance(value, list):
        named = {
            t.get("name"): t.get("template")
            for t in value
            if isinstance(t, dict) and isinstance(t.get("template"), str)
        }
        value = named.get("default")
    if value is None:
        return None
    if not isinstance(value, str):
        raise CodedError("EC330", f"{cannot}: chat_template is not text", _HINT)
    limit = env_bytes(TEMPLATE_MAX_BYTES_ENV, DEFAULT_TEMPLATE_MAX_BYTES)
    if len(value.encode("utf-8", "surrogatepass")) > limit:
        raise CodedError(
            "EC330",
            f"{cannot}: chat_template larger than {limit} bytes",
            f"set {TEMPLATE_MAX_BYTES_ENV} to raise the limit",
        )
    return value


def _bounded_text(path: Path, cannot: str) -> str:
    limit = env_bytes(TEMPLATE_MAX_BYTES_ENV, DEFAULT_TEMPLATE_MAX_BYTES)
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise CodedError("EC330", f"{cannot}: {path.name} is not a regular file", _HINT)
        with path.open("rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise CodedError(
                "EC330",
                f"{cannot}: {path.name} larger than {limit} bytes",
                f"set {TEMPLATE_MAX_BYTES_ENV} to raise the limit",
            )
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CodedError("EC330", f"{cannot}: {path.name}: {exc}", _HINT) from None


def _backend(raw: dict[str, Any], cannot: str) -> Any:
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_str(json.dumps(raw))
    except Exception as exc:  # the Rust parser's error, whatever the file holds
        text = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        raise CodedError("EC330", f"{cannot}: tokenizer.json: {text}", _HINT) from None


def _texts(data: dict[str, Any]) -> dict[str, str]:
    """The special tokens' texts: a string, or an AddedToken dict's ``content``."""
    out: dict[str, str] = {}
    for name in SPECIAL_NAMES:
        value = data.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            out[name] = value
    return out


def _maybe(value: Any) -> int | None:
    return None if value is None else int(value)
