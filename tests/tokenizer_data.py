"""Real tokenizer folders made offline, with the chat templates of the major families.

A byte-level BPE is trained by the ``tokenizers`` library on a few lines of text (tens of
milliseconds), wrapped in transformers' ``PreTrainedTokenizerFast`` and saved with
``save_pretrained``, so each folder is what a Hub download holds: tokenizer.json,
tokenizer_config.json (and chat_template.jinja).

The templates are written here to reproduce each family's layout, not copied: Llama-3's
header tokens with the BOS written by the template itself (the Llama 3 template is under
the Llama 3 Community License, so it is reproduced, not copied), Qwen3's ChatML with
``<think>`` blocks and ``enable_thinking`` (Qwen3's template is Apache-2.0; this is a
shortened reproduction of its think-block handling), and a plain template that adds no
BOS, for a tokenizer whose post-processor would.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

LLAMA3_SPECIALS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
]
CHATML_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

# Llama-3 style: the template writes BOS; each turn is a header, the content, <|eot_id|>.
LLAMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{{ message['content'] | trim }}{{ '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)

# Qwen3 style ChatML: an assistant turn's reasoning goes in <think>...</think>; with
# enable_thinking false the generation prompt gets an empty think block.
QWEN3_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{% if message.get('reasoning_content') %}"
    "{{ '<think>\\n' + message['reasoning_content'] + '\\n</think>\\n\\n' }}"
    "{% endif %}"
    "{{ message['content'] + '<|im_end|>\\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}"
    "{% endif %}"
    "{% endif %}"
)

# The same ChatML, re-templated: every assistant turn gets a think block, empty when there
# is no reasoning (what SpecForge#296 saw done to non-thinking data).
QWEN3_EMPTY_THINK_TEMPLATE = QWEN3_TEMPLATE.replace(
    "{% if message.get('reasoning_content') %}"
    "{{ '<think>\\n' + message['reasoning_content'] + '\\n</think>\\n\\n' }}"
    "{% endif %}",
    "{{ '<think>\\n' + message.get('reasoning_content', '') + '\\n</think>\\n\\n' }}",
)

TEXT = [
    "Hello there, how are you today? I am fine, thank you.",
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France? Paris is the capital of France.",
    "Let me think about this step by step. First, add the numbers.",
    "user assistant system Hi Hello okay sure",
] * 4


@dataclass(frozen=True)
class Family:
    specials: list[str]
    template: str
    bos: str | None
    eos: str
    pad: str | None = None


LLAMA3 = Family(LLAMA3_SPECIALS, LLAMA3_TEMPLATE, "<|begin_of_text|>", "<|eot_id|>")
QWEN3 = Family(CHATML_SPECIALS, QWEN3_TEMPLATE, None, "<|im_end|>", "<|endoftext|>")


def make_tokenizer(
    folder: Path,
    family: Family = LLAMA3,
    *,
    template: str | None = None,
    vocab_size: int = 300,
    extra_specials: tuple[str, ...] = (),
    text: list[str] | None = None,
) -> Path:
    """A real tokenizer folder (byte-level BPE) with ``family``'s special tokens and
    chat template (or ``template``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = [*family.specials, *extra_specials]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(text or TEXT, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=family.bos,
        eos_token=family.eos,
        pad_token=family.pad,
    )
    fast.chat_template = template if template is not None else family.template
    folder.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(folder))
    return folder
