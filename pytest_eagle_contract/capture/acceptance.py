"""The acceptance a running engine measures with the draft loaded (standard library only).

The shards' own prompts go to the engine, greedy, and the engine's own counters say how many
draft tokens it proposed and accepted, in how many verification rounds:

- llama-server (llama.cpp, the llama-cpp-python 0.3.36 sdist's ``vendor/llama.cpp``):
  ``POST /completion`` with the ids as ``prompt``; the answer's ``timings.draft_n`` and
  ``timings.draft_n_accepted`` (``tools/server/server-common.cpp:99-102``, present when the
  slot drafted). Rounds are not in ``timings``: they come from ``GET /metrics`` (launch
  with ``--metrics``) before and after, ``llamacpp:spec_decode_num_drafts_total`` (the
  verification steps, ``server-task.cpp:1562``) and
  ``llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position}`` (``:1606``); without
  ``/metrics``, rounds are bounded from ``timings.predicted_n`` (each target forward after
  the prefill gives 1 + its accepted tokens, so rounds <= predicted_n - 1 - accepted) and
  the accept length is a lower bound, said so.
- SGLang 0.5.23: ``POST /generate``; ``meta_info.spec_verify_ct`` (rounds),
  ``spec_num_correct_drafts`` (accepted), ``spec_num_proposed_drafts`` and
  ``spec_correct_drafts_histogram`` (rounds by accepted count), set by
  ``managers/tokenizer_manager.py:_calculate_spec_decoding_metrics`` when the request had a
  verify round.
- vLLM (v1): ``POST /v1/completions`` with the ids as ``prompt``; ``GET /metrics`` before and
  after: ``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``,
  ``..._num_accepted_tokens_total`` and ``..._num_accepted_tokens_per_pos_total{position}``
  (``v1/spec_decode/metrics.py``, 0.34.0), summed over their label sets.

Greedy (temperature 0), ``ignore_eos`` (every prompt runs its ``new_tokens``, as the probe's
continuations do). The accept length is ``1 + accepted / rounds``: tokens per target forward
counting the target's own token, as vLLM's ``mean_acceptance_length`` and llama.cpp's ``mean len``
(SGLang's own ``spec_accept_length`` is ``completion_tokens / spec_verify_ct``, which also
counts the prefill's token). Per position ``i``: the share of rounds whose draft token
``i + 1`` was accepted (vLLM's and llama.cpp's per-position rates).

Every answer is untrusted: bounded reads and one deadline per request (``transport``); an
answer of the wrong shape, or counters that contradict each other, is a coded error.
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import CaptureError, ServerUnreachable
from .transport import check_url, exchange

MEASURED_ENGINES = ("llama.cpp", "sglang", "vllm")
METRICS_CAP = 8 << 20  # bytes of Prometheus text (vLLM sends about 100 KB)
ANSWER_CAP = 16 << 20  # bytes of one completion (the text, ids, timings)
MAX_NEW_TOKENS = 1 << 16
DEFINITION = (
    "accept length: tokens per target forward, counting the target's own token "
    "(1 + accepted / rounds, a round = one verification of a draft); per position i: "
    "the share of rounds whose draft token i+1 was accepted"
)
_SETTLE_S, _SETTLE_TRIES = 0.2, 25  # vLLM records its counters after answering
_HINTS = {
    "llama.cpp": "is it llama-server with the draft loaded (--spec-type draft-eagle3 -md "
    "DRAFT.gguf), reached directly? --metrics gives the rounds",
    "sglang": "is it SGLang (python -m sglang.launch_server) with the draft loaded "
    "(--speculative-algorithm EAGLE3 --speculative-draft-model-path DIR)?",
    "vllm": "is it vLLM (vllm serve) with the draft loaded "
    '(--speculative-config \'{"method": "eagle3", "model": DIR, ...}\')?',
}
_METRIC = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^{}]*\})?[ \t]+(\S+)(?:[ \t]+\S+)?")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(frozen=True)
class Counts:
    """What the engine counted over the requests: verification rounds (None when it gives
    none), draft tokens proposed and accepted, and per draft position the rounds that
    accepted it (None when it gives no breakdown)."""

    rounds: int | None
    drafted: int
    accepted: int
    per_position: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Measured:
    """One measurement: the engine, its counters, where the rounds came from, notes."""

    engine: str
    url: str
    prompts: int
    new_tokens: int
    counts: Counts
    rounds_from: str
    lower_bound: bool = False  # rounds over-counted: the accept length is at least this
    engine_accept_length: float | None = None  # the engine's own figure, where it gives one
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def accept_length(self) -> float | None:
        c = self.counts
        return None if not c.rounds else 1.0 + c.accepted / c.rounds

    @property
    def acceptance_rate(self) -> float | None:
        c = self.counts
        return None if not c.drafted else c.accepted / c.drafted

    @property
    def per_position(self) -> tuple[float, ...] | None:
        c = self.counts
        if c.per_position is None or not c.rounds:
            return None
        return tuple(n / c.rounds for n in c.per_position)

    def to_dict(self) -> dict[str, Any]:
        length, rate, per = self.accept_length, self.acceptance_rate, self.per_position
        return {
            "engine": self.engine,
            "url": self.url,
            "prompts": self.prompts,
            "new_tokens": self.new_tokens,
            "rounds": self.counts.rounds,
            "drafted": self.counts.drafted,
            "accepted": self.counts.accepted,
            "accept_length": None if length is None else round(length, 4),
            "accept_length_is_lower_bound": self.lower_bound,
            "acceptance_rate": None if rate is None else round(rate, 4),
            "per_position": None if per is None else [round(p, 4) for p in per],
            "per_position_counts": (
                None if self.counts.per_position is None else list(self.counts.per_position)
            ),
            "rounds_from": self.rounds_from,
            "engine_accept_length": (
                None if self.engine_accept_length is None else round(self.engine_accept_length, 4)
            ),
            "notes": list(self.notes),
            "definition": DEFINITION,
        }


def prompt_of(ids: Sequence[int], mask: Sequence[int] | None) -> list[int] | None:
    """The prompt a shard gives: its ids before the first token the loss mask trains on
    (where the reply the draft learned to predict begins). None without a mask, with a mask
    that trains on nothing, or when the first token is already trained on."""
    if mask is None or len(mask) != len(ids):
        return None
    first = next((i for i, m in enumerate(mask) if m), None)
    if not first:  # None (nothing trained on) or 0 (no prompt before the reply)
        return None
    return [int(i) for i in ids[:first]]


def measure(
    engine: str, url: str, prompts: Sequence[Sequence[int]], new_tokens: int, timeout: float
) -> Measured:
    """Send each prompt (greedy, ``new_tokens`` new tokens) to the engine at ``url`` and read
    its acceptance counters. Raises :class:`CaptureError`: EC705 the server cannot be reached
    or answered something unusable, EC713 it reports no speculative counters (no draft
    loaded, or its metrics off), EC714 counters that contradict each other."""
    if engine not in MEASURED_ENGINES:
        raise ValueError(f"engine {engine!r}: measured are {', '.join(MEASURED_ENGINES)}")
    if not prompts:
        raise ValueError("no prompts")
    if not 1 <= new_tokens <= MAX_NEW_TOKENS:
        raise ValueError(f"new_tokens {new_tokens}: 1 to {MAX_NEW_TOKENS}")
    base = check_url(url)
    ids = [[int(t) for t in p] for p in prompts]
    try:
        if engine == "llama.cpp":
            return _llama(base, ids, new_tokens, timeout)
        if engine == "sglang":
            return _sglang(base, ids, new_tokens, timeout)
        return _vllm(base, ids, new_tokens, timeout)
    except ServerUnreachable as exc:  # transport words it for SGLang: say which engine
        raise ServerUnreachable(
            "EC705",
            exc.message.replace("SGLang at", f"{engine} at"),
            f"start the engine with the draft loaded (docs/measure-acceptance.md) and check "
            f"the URL; {_HINTS[engine]}",
        ) from None


# --- llama-server ---------------------------------------------------------------------


def _llama(base: str, prompts: list[list[int]], n: int, timeout: float) -> Measured:
    before = _metrics(base, timeout, "llamacpp:")
    drafted = accepted = bound = 0
    for ids in prompts:
        body = {
            "prompt": ids,
            "n_predict": n,
            "temperature": 0.0,
            "top_k": 1,
            "ignore_eos": True,
            "cache_prompt": False,
            "stream": False,
        }
        answer = _post_json(base + "/completion", body, timeout, "llama.cpp")
        timings = answer.get("timings")
        if not isinstance(timings, dict):
            raise _unusable(base + "/completion", "an answer without timings", "llama.cpp")
        d = _count(timings, "draft_n", base + "/completion", "llama.cpp", absent=0)
        a = _count(timings, "draft_n_accepted", base + "/completion", "llama.cpp", absent=0)
        p = _count(timings, "predicted_n", base + "/completion", "llama.cpp", absent=0)
        if a > d or p > n + 1:
            raise _contradiction(
                f"{base}/completion: timings draft_n {d}, draft_n_accepted {a}, "
                f"predicted_n {p} for n_predict {n}",
                "llama.cpp",
            )
        drafted, accepted = drafted + d, accepted + a
        bound += max(p - 1 - a, 0)
    if drafted == 0:
        raise _no_counters(
            "llama.cpp",
            f"llama-server drafted nothing for {len(prompts)} prompt(s): timings hold no draft_n",
            "launch llama-server with the draft: --spec-type draft-eagle3 -md DRAFT.gguf "
            "(--spec-draft-n-max K)",
        )
    after = None
    if before is not None:  # llama-server counts a request as it answers; a proxy may lag
        for _ in range(_SETTLE_TRIES):
            after = _metrics(base, timeout, "llamacpp:")
            moved = after is not None and (
                after.get("drafted", 0) - before.get("drafted", 0),
                after.get("accepted", 0) - before.get("accepted", 0),
            ) == (drafted, accepted)
            if moved or after is None:
                break
            time.sleep(_SETTLE_S)
    if before is None or after is None:
        return Measured(
            "llama.cpp",
            base,
            len(prompts),
            n,
            Counts(bound or None, drafted, accepted),
            "timings.predicted_n (rounds <= predicted_n - 1 - accepted; /metrics is off)",
            lower_bound=True,
            notes=(
                "llama-server answered no /metrics: the rounds are bounded from predicted_n "
                "and the accept length is a lower bound; launch with --metrics for the exact "
                "figure and the per-position rates",
            ),
        )
    counts = _difference(before, after, "llamacpp:", base, "llama.cpp")
    if (counts.drafted, counts.accepted) != (drafted, accepted):
        raise _contradiction(
            f"{base}/metrics counted {counts.drafted} drafted and {counts.accepted} accepted "
            f"tokens over these requests, their timings {drafted} and {accepted}",
            "llama.cpp",
            "another client used the server meanwhile: measure on a server of your own",
        )
    return Measured(
        "llama.cpp",
        base,
        len(prompts),
        n,
        counts,
        "/metrics llamacpp:spec_decode_num_drafts_total (before and after)",
    )


# --- SGLang ---------------------------------------------------------------------------


def _sglang(base: str, prompts: list[list[int]], n: int, timeout: float) -> Measured:
    rounds = drafted = accepted = completion = 0
    histogram: list[int] = []
    with_histogram = True
    for ids in prompts:
        body = {
            "input_ids": ids,
            "sampling_params": {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True},
            "extra_key": f"eagle-contract-{uuid.uuid4().hex}",
        }
        answer = _post_json(base + "/generate", body, timeout, "sglang")
        meta = answer.get("meta_info")
        where = base + "/generate"
        if not isinstance(meta, dict):
            raise _unusable(where, "an answer without meta_info", "sglang")
        r = _count(meta, "spec_verify_ct", where, "sglang", absent=0)
        if r == 0:  # SGLang sets the spec_* fields only after a verify round
            continue
        a = _count(meta, "spec_num_correct_drafts", where, "sglang")
        d = _count(meta, "spec_num_proposed_drafts", where, "sglang")
        c = _count(meta, "completion_tokens", where, "sglang", absent=0)
        if a > d or d % r:
            raise _contradiction(
                f"{where}: spec_verify_ct {r}, spec_num_correct_drafts {a}, "
                f"spec_num_proposed_drafts {d} (proposed is rounds * draft tokens per round)",
                "sglang",
            )
        hist = meta.get("spec_correct_drafts_histogram")
        if hist is None:
            with_histogram = False
        else:
            hist = _histogram(hist, where, r, a, d // r)
            histogram += [0] * (len(hist) - len(histogram))
            for k, v in enumerate(hist):
                histogram[k] += v
        rounds, drafted, accepted, completion = (
            rounds + r,
            drafted + d,
            accepted + a,
            completion + c,
        )
    if rounds == 0:
        raise _no_counters(
            "sglang",
            f"SGLang answered {len(prompts)} prompt(s) without meta_info.spec_verify_ct: it ran "
            "no verify round",
            "launch the target with its draft: --speculative-algorithm EAGLE3 "
            "--speculative-draft-model-path DIR (aux-capture mode alone drafts nothing)",
        )
    per = None
    if with_histogram and histogram:
        k = drafted // rounds
        per = tuple(sum(histogram[j] for j in range(i + 1, len(histogram))) for i in range(k))
    return Measured(
        "sglang",
        base,
        len(prompts),
        n,
        Counts(rounds, drafted, accepted, per),
        "meta_info.spec_verify_ct",
        engine_accept_length=completion / rounds if completion else None,
        notes=(
            "SGLang's own spec_accept_length (completion_tokens / spec_verify_ct) also "
            "counts the prefill's token: shown as engine_accept_length",
        ),
    )


def _histogram(value: object, where: str, rounds: int, accepted: int, k: int) -> list[int]:
    """``spec_correct_drafts_histogram``: rounds by accepted count, checked against the
    request's own totals."""
    counts: list[int] = []
    if isinstance(value, list) and 0 < len(value) <= k + 1:
        counts = [v for v in value if type(v) is int and v >= 0]
        if len(counts) != len(value):
            counts = []
    if not counts or sum(counts) != rounds or sum(i * v for i, v in enumerate(counts)) != accepted:
        raise _contradiction(
            f"{where}: spec_correct_drafts_histogram {str(value)[:120]} does not hold "
            f"{rounds} rounds accepting {accepted} tokens of up to {k} each",
            "sglang",
        )
    return counts


# --- vLLM -----------------------------------------------------------------------------


def _vllm(base: str, prompts: list[list[int]], n: int, timeout: float) -> Measured:
    from .vllm_client import served_model

    model, version = served_model(base, timeout)
    before = _metrics(base, timeout, "vllm:")
    if before is None:
        raise _no_counters(
            "vllm",
            f"{base}/metrics did not answer: vLLM's spec-decode counters cannot be read",
            "reach the vLLM server itself (its /metrics is on by default)",
        )
    generated: int | None = 0
    for ids in prompts:
        body = {
            "model": model,
            "prompt": ids,
            "max_tokens": n,
            "temperature": 0.0,
            "ignore_eos": True,
        }
        answer = _post_json(base + "/v1/completions", body, timeout, "vllm")
        if not isinstance(answer.get("choices"), list):
            raise _unusable(base + "/v1/completions", "an answer without choices", "vllm")
        usage = answer.get("usage")
        if generated is not None and isinstance(usage, dict):
            generated += _count(usage, "completion_tokens", base + "/v1/completions", "vllm")
        else:
            generated = None
    after = _settled(base, timeout, before, generated)
    counts = _difference(before, after, "vllm:", base, "vllm")
    if not counts.rounds:
        raise _no_counters(
            "vllm",
            f"vLLM counted no draft over {len(prompts)} prompt(s) "
            "(vllm:spec_decode_num_drafts_total did not move)",
            "launch vllm serve with --speculative-config naming the EAGLE-3 draft",
        )
    notes = (f"vLLM {version}",) if version else ()
    return Measured(
        "vllm",
        base,
        len(prompts),
        n,
        counts,
        "/metrics vllm:spec_decode_num_drafts_total (before and after)",
        notes=notes,
    )


def _settled(
    base: str, timeout: float, before: dict[str, Any], generated: int | None
) -> dict[str, Any]:
    """/metrics once it has recorded the requests: vLLM's stat loggers record an engine
    step (its spec-decode counters with its ``vllm:generation_tokens_total``) after the
    step's outputs went out. Read until the generated tokens counted reach the answers'
    ``usage.completion_tokens`` (without usage: two reads in a row agree after the rounds
    moved), for at most 5 s."""
    last = _metrics(base, timeout, "vllm:")
    for _ in range(_SETTLE_TRIES):
        if last is not None and generated is not None and "generated" in last:
            if last["generated"] - before.get("generated", 0) >= generated:
                break
        time.sleep(_SETTLE_S)
        now = _metrics(base, timeout, "vllm:")
        if generated is None and now == last and (now or {}).get("rounds") != before.get("rounds"):
            break
        last = now
    if last is None:
        raise _unusable(base + "/metrics", "nothing after the requests", "vllm")
    return last


# --- Prometheus text --------------------------------------------------------------------

_NAMES = {
    "rounds": "spec_decode_num_drafts_total",
    "drafted": "spec_decode_num_draft_tokens_total",
    "accepted": "spec_decode_num_accepted_tokens_total",
    "generated": "generation_tokens_total",  # vLLM's; the settle signal (:func:`_settled`)
}
_PER_POS = "spec_decode_num_accepted_tokens_per_pos_total"


def _metrics(base: str, timeout: float, prefix: str) -> dict[str, Any] | None:
    """The spec-decode counters in ``GET /metrics``, summed over label sets (per position
    for the per-position counter); None when the endpoint is off (not HTTP 200)."""
    reply = exchange(base + "/metrics", None, timeout=timeout, cap=METRICS_CAP)
    if reply.status != 200:
        return None
    try:
        text = reply.body.decode("utf-8")
    except UnicodeDecodeError:
        raise _unusable(
            base + "/metrics", "bytes that are not UTF-8 text", _engine(prefix)
        ) from None
    return parse_metrics(text, prefix, base + "/metrics")


def parse_metrics(text: str, prefix: str, where: str = "/metrics") -> dict[str, Any]:
    """``{"rounds", "drafted", "accepted": int, "per_position": {pos: int}}`` from Prometheus
    text, each counter ``prefix + name`` summed over its label sets; a counter absent is
    absent from the result. A sample that is not a finite whole number >= 0 is EC705."""
    wanted = {prefix + name: key for key, name in _NAMES.items()}
    out: dict[str, Any] = {}
    per: dict[int, int] = {}
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        match = _METRIC.fullmatch(line.strip())
        if match is None:
            raise _unusable(where, f"a line it cannot read: {line[:120]!r}", _engine(prefix))
        name, labels, raw = match.groups()
        if name not in wanted and name != prefix + _PER_POS:
            continue
        value = _whole(raw, where, name, prefix)
        if name in wanted:
            out[wanted[name]] = out.get(wanted[name], 0) + value
            continue
        position = dict(_LABEL.findall(labels or "")).get("position", "")
        if not (position.isascii() and position.isdigit() and len(position) <= 4):
            raise _unusable(where, f"{name} with position {position[:20]!r}", _engine(prefix))
        per[int(position)] = per.get(int(position), 0) + value
    if per:
        out["per_position"] = per
    return out


def _whole(raw: str, where: str, name: str, prefix: str) -> int:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0 and value == int(value) and value < 2**53):
        raise _unusable(where, f"{name} = {raw[:40]!r}, not a count", _engine(prefix))
    return int(value)


def _difference(
    before: dict[str, Any], after: dict[str, Any], prefix: str, base: str, engine: str
) -> Counts:
    missing = [_NAMES[k] for k in ("rounds", "drafted", "accepted") if k not in after]
    if missing:
        raise _no_counters(
            engine,
            f"{base}/metrics has no {prefix}{missing[0]}: the engine runs no speculative decoding",
            {
                "llama.cpp": "launch llama-server with the draft (--spec-type draft-eagle3 "
                "-md DRAFT.gguf)",
                "vllm": "launch vllm serve with --speculative-config naming the EAGLE-3 draft",
            }.get(engine, _HINTS[engine]),
        )
    got = {k: after[k] - before.get(k, 0) for k in ("rounds", "drafted", "accepted")}
    pb: dict[int, int] = before.get("per_position", {})
    pa: dict[int, int] = after.get("per_position", {})
    per_pos = {i: pa[i] - pb.get(i, 0) for i in pa}
    problem = None
    if any(v < 0 for v in [*got.values(), *per_pos.values()]):
        problem = "counters went down between the reads (the server restarted?)"
    elif got["accepted"] > got["drafted"] or got["drafted"] < got["rounds"]:
        problem = (
            f"{got['rounds']} rounds, {got['drafted']} drafted and {got['accepted']} "
            "accepted tokens: more accepted than drafted, or a round without a draft"
        )
    elif per_pos and sum(per_pos.values()) != got["accepted"]:
        problem = (
            f"the per-position counts add up to {sum(per_pos.values())}, the accepted "
            f"tokens are {got['accepted']}"
        )
    elif per_pos and any(per_pos.get(i + 1, 0) > per_pos.get(i, 0) for i in range(max(per_pos))):
        problem = f"a later draft position accepted more often than an earlier one: {per_pos}"
    if problem is not None:
        raise _contradiction(f"{base}/metrics: {problem}", engine)
    per = tuple(per_pos.get(i, 0) for i in range(max(per_pos) + 1)) if per_pos else None
    return Counts(got["rounds"], got["drafted"], got["accepted"], per)


# --- the answers ----------------------------------------------------------------------


def _post_json(url: str, body: dict[str, Any], timeout: float, engine: str) -> dict[str, Any]:
    reply = exchange(url, json.dumps(body).encode(), timeout=timeout, cap=ANSWER_CAP)
    try:
        payload = json.loads(reply.body)
    except (ValueError, RecursionError):
        text = reply.body[:200].decode("utf-8", "replace").strip()
        raise _unusable(url, f"HTTP {reply.status} with no JSON: {text!r}", engine) from None
    if reply.status != 200:
        raise _unusable(url, f"HTTP {reply.status}: {json.dumps(payload)[:300]}", engine)
    if not isinstance(payload, dict):
        raise _unusable(url, f"a JSON {type(payload).__name__}, not an object", engine)
    return payload


def _count(d: dict[str, Any], key: str, where: str, engine: str, absent: int | None = None) -> int:
    value = d.get(key, absent)
    if type(value) is not int or not 0 <= value < 2**53:
        raise _unusable(where, f"{key} {str(value)[:40]}, not a count", engine)
    return value


def _engine(prefix: str) -> str:
    return "llama.cpp" if prefix == "llamacpp:" else "vllm"


def _unusable(where: str, what: str, engine: str) -> CaptureError:
    return CaptureError("EC705", f"{where} answered {what}", _HINTS[engine])


def _no_counters(engine: str, message: str, hint: str) -> CaptureError:
    return CaptureError("EC713", message, hint)


def _contradiction(message: str, engine: str, hint: str = "") -> CaptureError:
    return CaptureError(
        "EC714",
        message,
        hint or f"the counters cannot be trusted: {_HINTS[engine]}",
    )
