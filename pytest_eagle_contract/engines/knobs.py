"""Benchmark knobs that fake acceptance, found in a launch line or a serving environment,
and the engines' draft-length settings brought to one quantity (docs/serving-knobs.md).

Each knob was read in the engine's own code (cited per knob below and in the docs table):

- SGLang: ``SGLANG_SIMULATE_ACC_LEN`` (``EnvFloat(-1)``, on when > 0), with
  ``SGLANG_SIMULATE_ACC_METHOD`` and ``SGLANG_SIMULATE_ACC_TOKEN_MODE`` shaping it:
  ``srt/environ.py`` and ``srt/speculative/spec_utils.py`` of sglang 0.5.23 (also 0.5.6,
  0.5.9, 0.5.14's ``environ.py``; ``_TOKEN_MODE`` is new after 0.5.14).
- vLLM: ``"rejection_sample_method": "synthetic"`` in ``--speculative-config``, with
  ``synthetic_acceptance_rate`` (0.19.0) or ``synthetic_acceptance_length`` /
  ``synthetic_acceptance_rates`` (0.20.0 to 0.33.0): ``vllm/config/speculative.py`` of the
  release wheels 0.19.0, 0.20.0, 0.26.0, 0.33.0 (0.18.0 and older have no synthetic method).
- TensorRT-LLM: ``TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS`` (0 = off; counts accepted
  draft tokens, not the bonus one): ``tensorrt_llm/_torch/speculative/interface.py``,
  ``get_force_num_accepted_tokens`` (NVIDIA/TensorRT-LLM's stored sources, a version after
  1.2.0rc2: the snapshot at b35ac1b, ``version.py`` 1.2.0rc2, has no such knob). No release
  wheel was read: PyPI holds only stubs of tensorrt-llm, and pypi.nvidia.com does not resolve
  from the machine the rules were read on.
- sglang-jax: ``SIMULATE_ACC_LEN`` (and ``SIMULATE_ACC_METHOD``) read with ``os.environ.get``
  in ``python/sgl_jax/srt/speculative/eagle_util.py`` (sgl-project/sglang-jax at 02793f47);
  its releases on the index (0.0.1, 0.0.1.post1) carry no speculative code.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import Problem, UsageError
from ..findings import RuleCode

MAX_ENV_BYTES = 1 << 20
"""The largest ``--serving-env`` file read (an ``env`` listing is a few KiB)."""
MAX_ENV_LINES = 10_000
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Knob:
    """One environment knob: its rule code, the engine that reads it, what it fakes, and
    where it was read."""

    name: str
    code: RuleCode
    engine: str
    fakes: str
    source: str


ENV_KNOBS: tuple[Knob, ...] = (
    Knob(
        "SGLANG_SIMULATE_ACC_LEN",
        "EC517",
        "SGLang",
        "forces every verify step to accept a drawn number of tokens around this mean "
        "accept length, whatever the draft predicts",
        "sglang 0.5.23 srt/environ.py, srt/speculative/spec_utils.py",
    ),
    Knob(
        "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS",
        "EC519",
        "TensorRT-LLM",
        "forces this many draft tokens accepted per step (the bonus token not counted), "
        "whatever the draft predicts",
        "TensorRT-LLM tensorrt_llm/_torch/speculative/interface.py (sources after 1.2.0rc2; "
        "no release wheel read)",
    ),
    Knob(
        "SIMULATE_ACC_LEN",
        "EC520",
        "sglang-jax",
        "forces the accept length to this mean, whatever the draft predicts",
        "sglang-jax python/sgl_jax/srt/speculative/eagle_util.py",
    ),
)
SHAPERS: dict[str, str] = {
    "SGLANG_SIMULATE_ACC_METHOD": "SGLANG_SIMULATE_ACC_LEN",
    "SGLANG_SIMULATE_ACC_TOKEN_MODE": "SGLANG_SIMULATE_ACC_LEN",
    "SIMULATE_ACC_METHOD": "SIMULATE_ACC_LEN",
}
"""Knobs that only shape another one's faking (inert alone): name -> the knob they shape."""


def read_env_file(path: str | Path, stdin_text: str | None = None) -> dict[str, str]:
    """``KEY=VALUE`` per line (``env`` output; ``export`` and ``#`` comments allowed; quotes
    around a value removed) or NUL-separated (``/proc/PID/environ``); ``-`` reads
    ``stdin_text``. A file that is missing, too large, not text or holds a line that is not
    ``KEY=VALUE`` is a :class:`UsageError` naming the line."""
    if str(path) == "-":
        text = stdin_text or ""
        if len(text.encode("utf-8", "replace")) > MAX_ENV_BYTES:
            raise UsageError(f"--serving-env -: more than {MAX_ENV_BYTES} bytes on stdin")
    else:
        file = Path(path)
        try:
            with file.open("rb") as fh:
                data = fh.read(MAX_ENV_BYTES + 1)
        except OSError as exc:
            raise UsageError(f"--serving-env {path}: {exc.strerror or exc}") from None
        if len(data) > MAX_ENV_BYTES:
            raise UsageError(
                f"--serving-env {path}: larger than {MAX_ENV_BYTES} bytes: not an env listing"
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError(f"--serving-env {path}: not UTF-8 text") from None
    return parse_env(text, str(path))


def parse_env(text: str, label: str) -> dict[str, str]:
    """The variables of an ``env`` listing (see :func:`read_env_file`)."""
    entries = text.split("\0") if "\0" in text else text.splitlines()
    if len(entries) > MAX_ENV_LINES:
        raise UsageError(f"--serving-env {label}: more than {MAX_ENV_LINES} lines")
    env: dict[str, str] = {}
    for number, raw in enumerate(entries, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        name, sep, value = line.partition("=")
        if not sep or not _NAME.fullmatch(name):
            shown = line if len(line) <= 60 else line[:57] + "..."
            raise UsageError(
                f"--serving-env {label}:{number}: not KEY=VALUE: {shown!r} "
                "(give `env` output, one variable a line)"
            )
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[name] = value
    return env


def launch_env(command: str) -> dict[str, str]:
    """The variables a launch line sets: leading ``NAME=VALUE`` words (and after ``env``),
    and docker's ``-e NAME=VALUE`` / ``--env NAME=VALUE``."""
    try:
        words = shlex.split(command)
    except ValueError:
        return {}  # the launch lint reports the unparsable line
    env: dict[str, str] = {}
    leading = True
    for i, word in enumerate(words):
        name, sep, value = word.partition("=")
        if leading and sep and _NAME.fullmatch(name):
            env[name] = value
            continue
        if leading and word == "env":
            continue
        leading = False
        if word in ("-e", "--env") and i + 1 < len(words):
            name, sep, value = words[i + 1].partition("=")
            if sep and _NAME.fullmatch(name):
                env[name] = value
        elif word.startswith("--env="):
            name, sep, value = word[len("--env=") :].partition("=")
            if sep and _NAME.fullmatch(name):
                env[name] = value
    return env


def _count(flags: Mapping[str, str], name: str) -> int:
    """``--name N`` as a count; 0 when absent or not a number."""
    try:
        return int(flags.get(name, "0"))
    except ValueError:
        return 0


def _number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def _active(knob: Knob, value: str) -> bool:
    """Whether the engine fakes acceptance with ``value``: SGLang's is off below 0 (its
    default -1), TensorRT-LLM's at 0 (its default, and what a non-integer falls back to),
    sglang-jax's whenever set to a value."""
    number = _number(value.strip())
    if knob.name == "SGLANG_SIMULATE_ACC_LEN":
        return number is not None and number > 0
    if knob.name == "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS":
        # the snapshot read parses an int (a float falls back to 0 with a warning); benchmark
        # recipes set floats (1.78) for releases that read them: any non-zero number counts
        return number is not None and number != 0
    return value.strip() != ""


OLD_SGLANG = Knob(
    "SIMULATE_ACC_LEN",
    "EC517",
    "SGLang",
    "(0.4.6 to 0.5.2 read this name; 0.5.4 on SGLANG_SIMULATE_ACC_LEN) forces the accept "
    "length to this mean, whatever the draft predicts",
    "sglang 0.4.6 and 0.5.2 srt/speculative/eagle_utils.py",
)
"""sglang-jax's name is SGLang's old one: served by SGLang, it is SGLang's knob (EC517)."""


def env_knobs(env: Mapping[str, str], where: str, engine: str | None = None) -> list[Problem]:
    """A problem per acceptance-faking knob set in ``env`` (``where`` names the source;
    ``engine``, the contract's serving engine, picks whose ``SIMULATE_ACC_LEN`` it is)."""
    out: list[Problem] = []
    knobs = [
        OLD_SGLANG if k.name == OLD_SGLANG.name and engine == "sglang" else k for k in ENV_KNOBS
    ]
    for knob in knobs:
        if knob.name not in env:
            continue
        value = env[knob.name]
        shaped = [f"{s}={env[s]}" for s, of in SHAPERS.items() if of == knob.name and s in env]
        extra = f" (with {', '.join(shaped)})" if shaped else ""
        if _active(knob, value):
            out.append(
                Problem(
                    knob.code,
                    f"{where} sets {knob.name}={value}{extra}: {knob.engine} {knob.fakes}; "
                    "the acceptance it reports is the knob's, not the draft's",
                    f"unset {knob.name} (a benchmark knob; {knob.source})",
                )
            )
    for shaper, of in SHAPERS.items():
        knob = next(k for k in knobs if k.name == of)
        if shaper in env and not (of in env and _active(knob, env[of])):
            out.append(
                Problem(
                    knob.code,
                    f"{where} sets {shaper}={env[shaper]}, which shapes {of}'s faked "
                    f"acceptance: inert while {of} is off, a benchmark setting left behind",
                    f"unset {shaper}",
                    severity="warning",
                )
            )
    return out


def speculative_config(flags: Mapping[str, str]) -> tuple[dict[str, object] | None, str]:
    """vLLM's ``--speculative-config`` JSON (None when absent) and why it could not be read."""
    raw = flags.get("speculative-config")
    if raw is None:
        return None, ""
    try:
        value = json.loads(raw)
    except ValueError as exc:
        return None, f"--speculative-config is not JSON: {exc}"
    if not isinstance(value, dict):
        return None, "--speculative-config is not a JSON object"
    return value, ""


SYNTHETIC_KEYS = (
    "synthetic_acceptance_length",  # vLLM 0.20.0 on
    "synthetic_acceptance_rates",  # vLLM 0.20.0 on
    "synthetic_acceptance_rate",  # vLLM 0.19.0
)


def config_knobs(config: Mapping[str, object]) -> list[Problem]:
    """EC518 when vLLM's speculative config asks for synthetic rejection sampling."""
    method = config.get("rejection_sample_method")
    given = [k for k in SYNTHETIC_KEYS if k in config]
    if method != "synthetic" and not given:
        return []
    shown = ", ".join(f"{k}={json.dumps(config[k])}" for k in given) or "no target given"
    return [
        Problem(
            "EC518",
            f'--speculative-config has "rejection_sample_method": {json.dumps(method)} ({shown}):'
            " vLLM accepts draft tokens with a synthetic probability instead of checking them"
            " against the target; the acceptance it reports is the setting's, not the draft's",
            'remove "rejection_sample_method": "synthetic" and the synthetic_acceptance_* keys '
            "(a benchmark setting; vllm/config/speculative.py)",
        )
    ]


def launch_knobs(
    command: str,
    env: Mapping[str, str] | None = None,
    env_label: str = "",
    engine: str | None = None,
) -> list[Problem]:
    """Every faking knob in a launch line (its leading variables and vLLM's speculative
    config) and in ``env`` (a ``--serving-env`` listing, named ``env_label``)."""
    from .sglang_launch import parse_flags

    out = env_knobs(launch_env(command), "the launch line", engine) if command else []
    if command:
        try:
            flags = parse_flags(command)
        except ValueError:
            flags = {}
        config, _ = speculative_config(flags)
        if config is not None:
            out += config_knobs(config)
    if env:
        out += env_knobs(env, env_label or "the serving environment", engine)
    return out


@dataclass(frozen=True)
class DraftLength:
    """The engine's draft-length settings as one quantity: ``k``, the most draft tokens a
    verify step can accept (the bonus token not counted), so the mean accept length lies in
    ``[1, k + 1]``; ``said`` is how the launch line put it."""

    k: int
    said: str


def draft_length(command: str) -> DraftLength | None:
    """``k`` from a launch line. vLLM's ``num_speculative_tokens`` is ``k``. SGLang's
    ``--speculative-num-draft-tokens`` counts the tree's root, the verified token (sglang
    0.5.23 srt/speculative/eagle_utils.py puts the bonus token before the drafted ones), and
    with ``--speculative-eagle-topk 1`` is reset to ``--speculative-num-steps + 1``; the depth
    a step can accept is ``--speculative-num-steps`` either way."""
    from .sglang_launch import parse_flags

    try:
        flags = parse_flags(command)
    except ValueError:
        return None
    config, _ = speculative_config(flags)
    if config is not None:
        n = config.get("num_speculative_tokens")
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            return DraftLength(n, f"vLLM num_speculative_tokens {n}")
    n = _count(flags, "num-speculative-tokens")  # vLLM's old spelling
    if n > 0:
        return DraftLength(n, f"--num-speculative-tokens {n}")
    steps = _count(flags, "speculative-num-steps")
    tokens = _count(flags, "speculative-num-draft-tokens")
    if steps > 0:
        said = f"SGLang --speculative-num-steps {steps}"
        if tokens:
            said += f" (--speculative-num-draft-tokens {tokens} counts the root token)"
        return DraftLength(steps, said)
    if tokens > 1 and flags.get("speculative-eagle-topk", "1") == "1":
        return DraftLength(
            tokens - 1,
            f"SGLang --speculative-num-draft-tokens {tokens} (the root token, then "
            f"{tokens - 1} drafted)",
        )
    return None
