"""The drafting methods a contract may name (``method:``), one registry entry each.

A method is what the draft reads of the target: EAGLE-3 reads a few aux states through its
``fc``; DFlash reads one tap per draft layer (its ``dflash_config.target_layer_ids``); others
(DSpark, PARD, MTP) read their own. Each entry says which draft config.json keys carry the
method's settings, how many taps it takes, which engines' tap -> canonical layer rules are
read here (``resolve --method``), and which ``architectures`` names a draft config of it
(``infer``). See docs/methods.md. Importing this module loads nothing else of the package.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .named import by_name, lookup

DEFAULT = "eagle3"

# MTP draft architectures the engines register (sglang 0.5.23 models/*_nextn.py / *_mtp.py
# EntryClass, vllm 0.34.0 models/registry.py *_mtp modules; engines/mtp_rules.json lists all)
MTP_ARCHITECTURES = (
    "DeepseekV3ForCausalLMNextN",
    "Glm4MoeForCausalLMNextN",
    "Glm4MoeLiteForCausalLMNextN",
    "BailingMoeForCausalLMNextN",
    "MiMoMTP",
    "MiMoV2MTP",
    "Qwen3NextForCausalLMMTP",
    "Qwen3_5ForCausalLMMTP",
    "Qwen3MoeForCausalLMMTP",
    "NemotronHForCausalLMMTP",
    "Step3p5MTP",
    "Gemma4AssistantForCausalLM",
    "DeepSeekMTPModel",
    "Qwen3NextMTP",
    "Glm4MoeMTPModel",
    "MiMoMTPModel",
    "MiMoV2MTPModel",
    "NemotronHMTPModel",
    "Gemma4MTPModel",
)
# config.json keys that give a model MTP layers (DeepSeek-V3 / GLM-4.5 / MiMo-V2:
# num_nextn_predict_layers; Qwen3-Next / Qwen3.5: mtp_num_hidden_layers)
MTP_LAYER_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")

EAGLE3_ENGINES = (
    "sglang",
    "vllm",
    "trtllm",
    "llama.cpp",
    "mlx",
    "tpu-inference",
    "vllm-ascend",
    "trtllm-autodeploy",
    "sglang-jax",
    "atom",
    "openvino",
    "lmdeploy",
)

# engines whose rules for these methods are answered through engines/method_engines.py: what
# ``resolve --method``, ``matrix``, ``doctor`` and a contract's serving.engine of that method
# take. Read from the wheels (method_engines_rules.json): onnxruntime-genai, lmdeploy's DFlash
# (its EAGLE-3 rules are engines/lmdeploy.py's, its MTP rules engines/mtp.py's); read from
# source (engines/source_methods.py, source_method_rules.json): the SOURCE_READ engines
METHOD_ENGINES: dict[str, tuple[str, ...]] = {
    "onnxruntime-genai": ("dflash2", "dspark", "mtp"),
    "lmdeploy": ("dflash",),
    "ollama": ("dflash", "mtp"),
    "sglang-jax": ("dflash", "mtp"),
    "atom": ("dspark", "mtp"),
    "trtllm": ("dflash", "dspark"),
    "mistralrs": ("dflash", "dflash2", "mtp"),
    "openvino": ("dflash",),
}
# those of them whose rules are read from source, not from wheels
SOURCE_READ: tuple[str, ...] = ("ollama", "sglang-jax", "atom", "trtllm", "mistralrs", "openvino")
# those of them that serve no EAGLE-3: every EAGLE-3 command refuses them
METHOD_ONLY_ENGINES: dict[str, tuple[str, ...]] = {
    k: v for k, v in METHOD_ENGINES.items() if k not in EAGLE3_ENGINES
}


@dataclass(frozen=True)
class Method:
    """One drafting method."""

    name: str
    title: str
    config_keys: tuple[str, ...]  # draft config.json keys of its settings, dotted
    tap_keys: tuple[str, ...]  # where its tap list may be written, dotted
    tap_count: str  # how many taps it takes, in words
    engines: tuple[str, ...]  # engines whose tap rules for it are read here
    architectures: tuple[str, ...] = ()  # draft config ``architectures`` that name it
    config_markers: tuple[str, ...] = ()  # top-level draft config keys that name it
    config_values: tuple[str, ...] = ()  # top-level draft config keys whose int names it
    rules_note: str = ""  # why no engine's rules are read, where none are
    shard_formats: tuple[str, ...] = ()  # shard formats only this method's trainers write

    def serves(self, engine: str) -> bool:
        return engine in self.engines


METHODS: dict[str, Method] = by_name(
    [
        Method(
            "eagle3",
            "EAGLE-3",
            (
                "eagle_config.eagle_aux_hidden_state_layer_ids",
                "eagle_aux_hidden_state_layer_ids",
                "num_aux_hidden_states",
                "target_hidden_size",
                "draft_vocab_size",
            ),
            ("eagle_config.eagle_aux_hidden_state_layer_ids", "eagle_aux_hidden_state_layer_ids"),
            "3 aux states unless the engine reads num_aux_hidden_states or the id list's "
            "length (docs/layers.md)",
            EAGLE3_ENGINES,
            ("LlamaForCausalLMEagle3",),
            ("eagle_config",),
        ),
        Method(
            "eagle3.1",
            "EAGLE-3.1",
            (
                "eagle_config.eagle_aux_hidden_state_layer_ids",
                "eagle_aux_hidden_state_layer_ids",
                "num_aux_hidden_states",
                "fc_norm",
                "use_aux_norm",
                "norm_output",
            ),
            ("eagle_config.eagle_aux_hidden_state_layer_ids", "eagle_aux_hidden_state_layer_ids"),
            "as EAGLE-3: the engines read its ids by their EAGLE-3 rules (sglang 0.5.23 "
            "models/kimi_k25_eagle3.py, llama.cpp src/models/eagle3.cpp); its fc_norm / "
            "norm_output flags are EC927's",
            # lmdeploy: whether its drafters honour EAGLE-3.1's norm flags was not read
            tuple(e for e in EAGLE3_ENGINES if e != "lmdeploy"),
        ),
        Method(
            "dflash",
            "DFlash",
            (
                "dflash_config.target_layer_ids",
                "target_layer_ids",
                "dflash_config.mask_token_id",
                "block_size",
                "num_hidden_layers",
                "num_target_layers",
            ),
            ("dflash_config.target_layer_ids", "target_layer_ids"),
            "the tap list's length; without one, one tap per draft layer (num_hidden_layers)",
            ("sglang", "vllm", "llama.cpp", "mlx", "tpu-inference", "vllm-ascend"),
            ("DFlashDraftModel", "DFlashSpeculator"),  # the latter: speculators' config
            ("dflash_config",),
            shard_formats=("specforge-dflash",),
        ),
        Method(
            "dflash2",
            "DFlash2",
            (
                "dflash_config.target_layer_ids",
                "target_layer_ids",
                "dflash_config.selector_rank",
                "dflash_config.selector_top_k",
                "dflash_config.conv_kernel_size",
                "dflash_config.conv_group_size",
                "dflash_config.mask_token_id",
                "block_size",
                "num_hidden_layers",
            ),
            ("dflash_config.target_layer_ids", "target_layer_ids"),
            "as DFlash: the tap list's length; without one, the engine's DFlash fallback",
            ("sglang", "vllm", "llama.cpp", "mlx"),
            ("DFlash2DraftModel", "DFlash2BeamDraftModel", "MiniMaxDFlash2DraftModel"),
            rules_note="served on each engine's DFlash path (method_rules.json: SGLang from "
            "0.5.19, vLLM from 0.28.0, llama-cpp-python 0.3.36, mlx-vlm from 0.6.16); other "
            "engines not read",
        ),
        Method(
            "dspark",
            "DSpark",
            (
                "dspark_target_layer_ids",
                "dflash_config.target_layer_ids",
                "target_layer_ids",
                "aux_hidden_state_layer_ids",
                "dspark_block_size",
                "dspark_markov_rank",
                "dspark_noise_token_id",
                "markov_rank",
                "markov_head_type",
                "mask_token_id",
            ),
            ("dspark_target_layer_ids", "dflash_config.target_layer_ids", "target_layer_ids"),
            "the tap list's length (one per draft stage on DeepSeek-V4); SGLang falls back to "
            "DFlash's formula without one",
            ("sglang", "vllm", "llama.cpp", "mlx"),
            (
                "DSparkDraftModel",
                "Qwen3DSparkModel",
                "DSparkSpeculator",
                "Lfm2DSparkDraftModel",
                "LingDSparkModel",
                "DeepseekV4DSparkModel",
                "Gemma4DSparkModel",
                "DSparkV41DraftModel",
                "DSparkMiniMaxDraftModel",
                "K3DSparkModel",
                "MistralLarge4DSparkModel",
                "MuseSparkDSparkModel",
                "Qwen3OmniDSparkModel",
            ),
            ("dspark_config",),
            rules_note="method_rules.json: SGLang from 0.5.16 (targets with their own "
            "set_dspark_layers_to_capture refused), vLLM from 0.25.0 (V2 reader), "
            "llama-cpp-python 0.3.36's converters, mlx-vlm from 0.6.16 (its generic DSpark "
            "drafter); other engines not read",
            shard_formats=("specforge-dspark",),
        ),
        Method(
            "pard",
            "PARD",
            ("pard_token",),
            (),
            "no taps: the draft reads no target hidden state (vLLM 0.16.0-0.33.0 serve it as "
            "method draft_model with parallel_drafting, whose proposer passes none)",
            (),
            config_values=("pard_token",),
            rules_note="no tap rule: a PARD draft reads no target hidden state in any release "
            "read here (vLLM 0.16.0-0.33.0 serve it as method draft_model with "
            "parallel_drafting: true, mask token pard_token, and the draft model's proposer "
            "passes no hidden states; 0.34.0 refuses parallel_drafting for draft_model); no "
            "release of vLLM, sglang, mlx-vlm, llama-cpp-python, specforge, speculators or "
            "nvidia-modelopt read here has PARD-2's target_proj or a target-dependent mode",
        ),
        Method(
            "mtp",
            "MTP",
            ("num_nextn_predict_layers", "mtp_num_hidden_layers"),
            (),
            "no tap list: the head reads one target state, the one its engine hands the "
            "draft worker (docs/mtp.md)",
            ("sglang", "vllm", "llama.cpp", "mlx", "lmdeploy"),
            MTP_ARCHITECTURES,
            rules_note="engines/mtp_rules.json (scripts/gen_mtp_rules.py): SGLang 0.5.11-0.5.23, "
            "vLLM 0.24.0-0.34.0 and lmdeploy 0.16.0-0.18.0 feed final_norm on the targets "
            "read; llama-cpp-python 0.3.35+ feeds t_h_nextn (final_norm or residual:L per "
            "graph); mlx-vlm 0.6.15-0.7.10 final_norm or residual:L per model folder; mlx-lm "
            "and the other engines not read",
        ),
    ]
)


def contract_engines(method: str) -> tuple[str, ...]:
    """Every engine a contract takes as its ``serving.engine`` for ``method``: the method's
    own (``Method.engines``), then the METHOD_ENGINES that serve it."""
    own = get_method(method).engines
    return own + tuple(e for e, ms in METHOD_ENGINES.items() if method in ms and e not in own)


def method_of_format(shard_format: str) -> str | None:
    """The method whose trainers alone write ``shard_format`` (SpecForge's DFlash and DSpark
    captures), None for a format every method's trainers share."""
    return next((m.name for m in METHODS.values() if shard_format in m.shard_formats), None)


def methods_served(engine: str) -> tuple[str, ...]:
    """Every method whose rules for ``engine`` are read here, in METHODS' order: those its
    Method entry lists it for and a method engine's own (``METHOD_ENGINES``)."""
    own = METHOD_ENGINES.get(engine, ())
    return tuple(m.name for m in METHODS.values() if m.serves(engine) or m.name in own)


def get_method(name: str) -> Method:
    """The method named ``name``. Raises EagleContractError listing the known ones."""
    return lookup(METHODS, name, "method")


def _dspark_head(config: Mapping[str, Any]) -> bool:
    """A DSpark head in a DFlash-shaped config: ``dflash_config.projector_type`` ``dspark`` or
    a ``markov_rank`` above 0 (how mlx-vlm 0.7.10's ``utils.get_model_type`` routes a draft;
    nvidia-modelopt 0.47.0's DSparkExporter writes architectures DFlashDraftModel with these)."""
    dc = config.get("dflash_config")
    if not isinstance(dc, dict):
        return False
    rank = config.get("markov_rank") or dc.get("markov_rank") or 0
    return dc.get("projector_type") == "dspark" or (type(rank) is int and rank > 0)


def detect(config: Mapping[str, Any]) -> str | None:
    """The method a draft config.json names (a DSpark head first, then its ``architectures``,
    then a key only that method writes: a section, then a token id such as PARD's
    ``pard_token``), or None where it names none of them."""
    archs = config.get("architectures")
    names = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    if "DFlash2DraftModel" not in names and _dspark_head(config):
        return "dspark"
    for method in METHODS.values():
        if any(a in method.architectures for a in names):
            return method.name
    for method in METHODS.values():
        if any(isinstance(config.get(k), dict) for k in method.config_markers):
            return method.name
    for method in METHODS.values():
        if any(type(config.get(k)) is int for k in method.config_values):
            return method.name
    eagle = "draft_vocab_size" in config or any(str(k).startswith("eagle") for k in config)
    if mtp_layers(config) and not eagle:  # an EAGLE-3 draft may carry its target's keys
        return "mtp"
    return None


def mtp_layers(config: Mapping[str, Any]) -> int:
    """How many MTP layers a config (draft or target, or its ``text_config``) declares
    (``MTP_LAYER_KEYS``), 0 where none."""
    text = config.get("text_config")
    for holder in (config, text if isinstance(text, dict) else {}):
        for key in MTP_LAYER_KEYS:
            n = holder.get(key)
            if type(n) is int and n > 0:
                return n
    return 0
