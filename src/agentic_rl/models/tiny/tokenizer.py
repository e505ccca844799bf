"""The tiny model's tokenizer: byte-level BPE trained locally on an environment's text, with a ChatML template."""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from ...text import encodable

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [PAD, IM_START, IM_END, "<tool_call>", "</tool_call>"]

# ChatML roles. The assistant's generated part (content, tool calls, <|im_end|>) sits inside {% generation %} so
# `return_assistant_tokens_mask` marks exactly what the policy produced; the newline after <|im_end|> is not
# generated (sampling stops at <|im_end|>) and so stays outside. Tool calls render exactly as `format_tool_call`:
# compact JSON (tools.JSON_SEPARATORS), since each space would be a token of its own.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- generation -%}"
    "{%- if message['content'] -%}{{- message['content'] -}}{%- endif -%}"
    "{%- for tc in message.get('tool_calls') or [] -%}"
    "{{- '<tool_call>' + ({'name': tc['function']['name'], 'arguments': tc['function']['arguments']} | tojson(separators=(',', ':')))"
    " + '</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>' -}}"
    "{%- endgeneration -%}"
    "{{- '\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int = 4096) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on `texts`.

    Pre-tokenization isolates Latin words, single digits, single Han characters, each whitespace character and
    punctuation runs. So a word is the same token wherever it stands — "Rutan" after a space in the question and
    after a quote in the tool call — and copying an argument or an answer is copying tokens, which a small model
    learns far sooner than a mapping between " Rutan" and "Rutan" (GPT-2-style merges of a leading space).
    """
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{Han}|[A-Za-z]+|\d|\s|[^\sA-Za-z\d\p{Han}]+"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((encodable(t) for t in texts), trainer=trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=IM_END, pad_token=PAD,
                                 additional_special_tokens=SPECIAL_TOKENS[1:], clean_up_tokenization_spaces=False)
    hf.chat_template = CHAT_TEMPLATE
    return hf
