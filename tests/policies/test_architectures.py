"""The sampler's fast paths (packed GQA attention, in-place KV cache, last-position prefill) on each architecture the
presets use, as tiny random configs: its logprobs equal a plain HF forward's, and greedy decoding equals `generate`."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from agentic_rl.envs import make_env
from agentic_rl.policies import HFPolicy, SamplingConfig
from agentic_rl.runtime.rollout import run_episodes

# Gemma 3 is not here: its sliding-window layers are not honoured by the sampler, whose logprobs then differ from a
# plain forward's once an episode outgrows the window (measured on a tiny random config).
ARCHS = {"qwen2": (Qwen2Config, Qwen2ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}


@pytest.fixture(scope="module", params=list(ARCHS))
def arch_dir(request, tiny_dir, tmp_path_factory):
    """A random 2-layer model of the architecture, with grouped-query attention, and the tiny tokenizer."""
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    config_cls, model_cls = ARCHS[request.param]
    config = config_cls(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                        tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = model_cls(config)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    out = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_sampled_logprobs_equal_a_plain_forward(arch_dir, env):
    policy = HFPolicy(arch_dir, SamplingConfig(temperature=0.9, max_new_tokens=24))
    assert policy.model.config._attn_implementation == "sdpa_packed_gqa"
    trajs = run_episodes(lambda: make_env("tool_use", fault_rate=0.5), env.tasks("eval", 3), policy, group_size=2,
                         seed=3)
    plain = HFPolicy(arch_dir).model  # transformers' own attention, no cache, one sequence at a time
    plain.set_attn_implementation("eager")
    for t in trajs:
        with torch.no_grad():
            logits = plain(torch.tensor([t.ids])).logits[0].float() / 0.9
        logp = torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(t.ids[1:])[:, None])[:, 0]
        mask = torch.tensor(t.mask[1:], dtype=torch.bool)
        assert mask.any()
        assert torch.allclose(logp[mask], torch.tensor(t.logprobs[1:])[mask], atol=2e-4)


def test_greedy_turns_equal_generate(arch_dir, env):
    policy = HFPolicy(arch_dir, SamplingConfig(temperature=0.0, max_new_tokens=16))
    task = env.tasks("eval", 1)[0]
    traj = run_episodes(lambda: make_env("tool_use"), [task], policy, seed=0)[0]
    prompt = policy.renderer.render(make_env("tool_use").reset(task), add_generation_prompt=True).ids
    with torch.no_grad():
        out = policy.model.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False)
    assert traj.assistant_ids[0] == out[0, len(prompt):].tolist()
