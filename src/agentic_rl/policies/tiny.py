"""The built-in `tiny` policy: a byte-level BPE tokenizer trained locally and a small Qwen2 model built from a config.

Nothing is downloaded. The result is a normal Hugging Face directory (safetensors, tokenizer.json, chat template)
that plain `transformers` loads with AutoModelForCausalLM / AutoTokenizer and no project code.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from .induction_init import install_induction_heads

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
    tok.train_from_iterator(texts, trainer=trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=IM_END, pad_token=PAD,
                                 additional_special_tokens=SPECIAL_TOKENS[1:], clean_up_tokenization_spaces=False)
    hf.chat_template = CHAT_TEMPLATE
    return hf


def tiny_config(vocab_size: int, eos_id: int, pad_id: int, hidden: int = 256, layers: int = 4, heads: int = 4,
                kv_heads: int = 2, intermediate: int = 768, max_positions: int = 2048) -> Qwen2Config:
    """About 4M parameters at the defaults: small enough to train on two CPU cores in minutes.

    rope_theta = 1e6 (Qwen2's released models use it too): the lowest RoPE frequencies then barely rotate over a
    tool-use episode, which the induction heads need to match tokens regardless of distance.
    """
    return Qwen2Config(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=intermediate,
                       num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                       max_position_embeddings=max_positions, tie_word_embeddings=True, eos_token_id=eos_id,
                       pad_token_id=pad_id, bos_token_id=None, attention_dropout=0.0, dtype="float32",
                       rope_parameters={"rope_type": "default", "rope_theta": 1e6})


def build_tiny(texts: Iterable[str], out_dir: str | Path, seed: int = 0, vocab_size: int = 4096,
               induction_init: bool = True, **model_kwargs: int) -> Path:
    """Train the tokenizer on `texts`, initialise the model with `seed`, and save both as an HF directory.

    With `induction_init`, layers 0–1 start with a copying circuit (see `induction_init.py`).
    """
    out_dir = Path(out_dir)
    tok = train_tokenizer(texts, vocab_size)
    eos, pad = tok.convert_tokens_to_ids(IM_END), tok.convert_tokens_to_ids(PAD)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(tiny_config(len(tok), eos, pad, **model_kwargs))
    if induction_init:
        install_induction_heads(model, seed=seed)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad, do_sample=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir
