"""The built-in `tiny` model: a small Qwen2 built from a config, its tokenizer trained on the environment's text.

Nothing is downloaded. The result is a normal Hugging Face directory (safetensors, tokenizer.json, chat template)
that plain `transformers` loads with AutoModelForCausalLM / AutoTokenizer and no project code.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from pydantic import Field, model_validator
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

from ...atomic import umask_modes
from ...config import Config
from ...envs.base import Env
from ...policies.scripted import TeacherPolicy
from ...runtime.parsing import format_tool_call
from ...runtime.rollout import run_episodes
from .induction_init import install_induction_heads
from .tokenizer import IM_END, PAD, train_tokenizer


class TinyConfig(Config):
    """The tiny model's size, for `policy: tiny`."""

    hidden: int = Field(256, ge=1)
    """Hidden size of the built-in tiny Qwen2 model."""
    layers: int = Field(4, ge=1)
    """Transformer layers."""
    heads: int = Field(4, ge=1)
    """Attention heads."""
    kv_heads: int = Field(2, ge=1)
    """Key/value heads (grouped-query attention)."""
    intermediate: int = Field(768, ge=1)
    """MLP width."""
    vocab_size: int = Field(4096, ge=256)
    """Most BPE tokens; the trainer stops early when the env's text needs fewer."""
    induction_init: bool = True
    """Start with a copying circuit (induction heads) written into layers 0–1 (models/tiny/induction_init.py)."""

    @model_validator(mode="after")
    def _shapes_fit(self) -> TinyConfig:
        if self.hidden % self.heads:
            raise ValueError(f"tiny.hidden ({self.hidden}) must be a multiple of tiny.heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise ValueError(f"tiny.heads ({self.heads}) must be a multiple of tiny.kv_heads ({self.kv_heads})")
        if self.induction_init and self.layers < 2:
            raise ValueError(f"tiny.induction_init writes its circuit into layers 0 and 1, so it needs tiny.layers "
                             f">= 2 (got {self.layers}); or set tiny.induction_init=false")
        return self


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
    umask_modes(out_dir)  # safetensors writes its weights 0600
    return out_dir


def env_corpus(env_factory, n_tasks: int | None = None, seed: int = 0) -> list[str]:
    """Texts the tokenizer learns from: noisy-teacher episodes on train tasks (prompts, calls, observations)."""
    env = env_factory()
    n_tasks = n_tasks or env.tokenizer_tasks
    trajs = run_episodes(env_factory, env.tasks("train", n_tasks, seed), TeacherPolicy(dict(env.default_noise)),
                         seed=seed)
    texts = [env.reset(env.tasks("train", 1, seed)[0])[0]["content"], "system user assistant tool"]
    for t in trajs:
        for m in t.messages[1:]:
            texts.append(m.get("content") or "")
            for tc in m.get("tool_calls") or []:
                texts.append(format_tool_call(tc["function"]["name"], tc["function"]["arguments"]))
    return texts


def build_tiny_for_env(env: Env, out_dir: Path, seed: int = 0, **model_kwargs: int) -> Path:
    """Train the tokenizer on the env's text and save an untrained tiny model there (skipped if already built)."""
    if (out_dir / "config.json").exists():
        return out_dir
    factory = type(env)
    return build_tiny(env_corpus(factory, seed=seed), out_dir, seed=seed, **model_kwargs)
