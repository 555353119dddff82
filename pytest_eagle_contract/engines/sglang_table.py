"""SGLang's EAGLE-3 capture rules, as data: which layers a draft's aux ids make it capture.

Read from the sglang release wheels on PyPI (0.4.3 to 0.5.23), method
``set_eagle3_layers_to_capture`` of each model file, and the forward loops that use
``layers_to_capture`` (see docs/layers.md). A row holds for releases ``since`` <= v <
``until`` of the architectures it names. ``rule`` is one of:

``default-only``  ids are not read; always ``[2, L//2, L-3]`` (0.4.5-0.4.8)
``plus1``         explicit ids get +1 ("output of layer k"); the default gets none
``plus1-flag``    as ``plus1``, and the inner model flags ``layers[id]``: an id + 1 >= L
                  raises IndexError at start-up
``deepseek``      +1 only when the first id == 1, else the ids are used as they are
``gpt-oss``       ids used as they are when max(id) == L, else +1

Capture index c is the residual stream entering layer c (``residual:c``). Indices are
matched with ``i in layers_to_capture`` inside the layer loop, so the output is in
ascending order and an index >= L is never reached, except where ``final_boundary``.
"""

from __future__ import annotations

from dataclasses import dataclass

Version = tuple[int, ...]

# Every release read (there is no final 0.5.0 on PyPI: 0.4.10 is followed by 0.5.1).
RELEASES: tuple[str, ...] = (
    "0.4.3",
    "0.4.4",
    "0.4.5",
    "0.4.6",
    "0.4.7",
    "0.4.8",
    "0.4.9",
    "0.4.10",
    *(f"0.5.{i}" for i in range(1, 24)),
)
NEWEST = RELEASES[-1]
FIRST_EAGLE3 = "0.4.5"
CUDA_GRAPH_DEFAULT_BUG = ("0.4.9", "0.5.11")  # graphs captured with the default list
MISSING_CAPTURE_RAISES = "0.5.17"  # deepseek_v2: AuxHiddenStatePacker fails on a missed id


@dataclass(frozen=True)
class Row:
    archs: frozenset[str]
    since: str
    until: str | None  # exclusive; None: still true in NEWEST
    rule: str
    source: str
    final_boundary: bool = False  # can capture index L (the pre-norm last state)
    method_in: str = ""  # "file.py:Class" defining set_eagle3_layers_to_capture (or delegating)


LLAMA_FAMILY = frozenset(
    {
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "Phi3ForCausalLM",
        "InternLM3ForCausalLM",
        "Llama4ForCausalLM",
    }
)
DEEPSEEK = frozenset({"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM"})

ROWS: tuple[Row, ...] = (
    Row(
        LLAMA_FAMILY,
        "0.4.5",
        "0.4.9",
        "default-only",
        "srt/models/llama.py",
        method_in="llama.py:LlamaForCausalLM",
    ),
    Row(
        LLAMA_FAMILY,
        "0.4.9",
        None,
        "plus1",
        "srt/models/llama.py",
        method_in="llama.py:LlamaForCausalLM",
    ),
    Row(
        frozenset({"Qwen3ForCausalLM"}),
        "0.4.9",
        None,
        "plus1",
        "srt/models/qwen3.py",
        method_in="qwen3.py:Qwen3ForCausalLM",
    ),
    Row(
        frozenset({"Qwen3MoeForCausalLM"}),
        "0.4.9",
        "0.5.5",
        "plus1",
        "srt/models/qwen3_moe.py",
        method_in="qwen3_moe.py:Qwen3MoeForCausalLM",
    ),
    Row(
        frozenset({"Qwen3MoeForCausalLM"}),
        "0.5.5",
        None,
        "plus1-flag",
        "srt/models/qwen3_moe.py",
        method_in="qwen3_moe.py:Qwen3MoeForCausalLM",
    ),
    Row(
        frozenset({"Qwen2ForCausalLM"}),
        "0.5.2",
        None,
        "plus1",
        "srt/models/qwen2.py",
        method_in="qwen2.py:Qwen2ForCausalLM",
    ),
    Row(
        frozenset({"Qwen2MoeForCausalLM"}),
        "0.5.2",
        "0.5.5",
        "plus1",
        "srt/models/qwen2_moe.py",
        method_in="qwen2_moe.py:Qwen2MoeForCausalLM",
    ),
    Row(
        frozenset({"Qwen2MoeForCausalLM"}),
        "0.5.5",
        None,
        "plus1-flag",
        "srt/models/qwen2_moe.py",
        method_in="qwen2_moe.py:Qwen2MoeForCausalLM",
    ),
    Row(
        frozenset({"Qwen3NextForCausalLM"}),
        "0.5.9",
        None,
        "plus1-flag",
        "srt/models/qwen3_next.py",
        method_in="qwen3_next.py:Qwen3NextForCausalLM",
    ),
    Row(
        frozenset({"GptOssForCausalLM"}),
        "0.5.1",
        "0.5.17",
        "plus1",
        "srt/models/gpt_oss.py",
        method_in="gpt_oss.py:GptOssForCausalLM",
    ),
    Row(
        frozenset({"GptOssForCausalLM"}),
        "0.5.17",
        None,
        "gpt-oss",
        "srt/models/gpt_oss.py",
        final_boundary=True,
        method_in="gpt_oss.py:GptOssForCausalLM",
    ),
    Row(
        DEEPSEEK,
        "0.5.5",
        "0.5.13",
        "plus1",
        "srt/models/deepseek_v2.py",
        method_in="deepseek_v2.py:DeepseekV2ForCausalLM",
    ),
    Row(
        DEEPSEEK,
        "0.5.13",
        None,
        "deepseek",
        "srt/models/deepseek_v2.py (sglang PR #25454)",
        method_in="deepseek_v2.py:DeepseekV2ForCausalLM",
    ),
    Row(
        frozenset({"KimiK25ForConditionalGeneration"}),
        "0.5.10",
        "0.5.13",
        "plus1",
        "srt/models/kimi_k25.py -> deepseek_v2.py",
        method_in="kimi_k25.py:KimiK25ForConditionalGeneration",
    ),
    Row(
        frozenset({"KimiK25ForConditionalGeneration"}),
        "0.5.13",
        None,
        "deepseek",
        "srt/models/kimi_k25.py -> deepseek_v2.py (sglang PR #25454)",
        method_in="kimi_k25.py:KimiK25ForConditionalGeneration",
    ),
    Row(
        frozenset({"Glm4MoeForCausalLM"}),
        "0.5.5",
        None,
        "plus1",
        "srt/models/glm4_moe.py",
        method_in="glm4_moe.py:Glm4MoeForCausalLM",
    ),
    Row(
        frozenset({"Glm4MoeLiteForCausalLM"}),
        "0.5.8",
        "0.5.13",
        "plus1",
        "srt/models/glm4_moe_lite.py -> deepseek_v2.py",
        method_in="deepseek_v2.py:DeepseekV2ForCausalLM",
    ),
    Row(
        frozenset({"Glm4MoeLiteForCausalLM"}),
        "0.5.13",
        None,
        "deepseek",
        "srt/models/glm4_moe_lite.py",
        method_in="glm4_moe_lite.py:Glm4MoeLiteForCausalLM",
    ),
    Row(
        frozenset({"MiniMaxM2ForCausalLM"}),
        "0.5.6",
        None,
        "plus1",
        "srt/models/minimax_m2.py",
        method_in="minimax_m2.py:MiniMaxM2ForCausalLM",
    ),
)

# Architectures SGLang serves but can never capture aux states for.
NO_CAPTURE: dict[str, str] = {
    "KimiVLForConditionalGeneration": "srt/models/kimi_vl.py has no set_eagle3_layers_to_capture "
    "(AttributeError before 0.5.23, ValueError in 0.5.23)",
}

# model_type (config.json) and common short names -> HF architecture class.
ALIASES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "internlm3": "InternLM3ForCausalLM",
    "llama4": "Llama4ForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "qwen3_next": "Qwen3NextForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "deepseek_v32": "DeepseekV32ForCausalLM",
    "kimi_k2": "DeepseekV3ForCausalLM",
    "kimi_k25": "KimiK25ForConditionalGeneration",
    "glm4_moe": "Glm4MoeForCausalLM",
    "glm4_moe_lite": "Glm4MoeLiteForCausalLM",
    "minimax_m2": "MiniMaxM2ForCausalLM",
    "kimi_vl": "KimiVLForConditionalGeneration",
}

KNOWN_ARCHS = frozenset(a for row in ROWS for a in row.archs) | frozenset(NO_CAPTURE)


def parse_version(text: str) -> Version:
    parts = []
    for piece in text.strip().lstrip("v").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
        if not piece.isdigit():
            break
    return tuple(parts)


def canonical_arch(arch: str) -> str:
    return ALIASES.get(arch.lower(), arch) if arch.lower() in ALIASES else arch


def row_for(arch: str, version: str) -> Row | None:
    v = parse_version(version)
    for row in ROWS:
        if (
            arch in row.archs
            and parse_version(row.since) <= v
            and (row.until is None or v < parse_version(row.until))
        ):
            return row
    return None
