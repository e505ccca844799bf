"""Tool calling with any chat template: native tool support is used as it is; otherwise calls and results are written
as Hermes text. For each template: the calls are trained on, and sampled multi-turn trajectories re-render exactly."""

from __future__ import annotations

import json
import re

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentic_rl.envs import make_env
from agentic_rl.models.tiny.tokenizer import CHAT_TEMPLATE
from agentic_rl.policies import HFPolicy, SamplingConfig, TeacherPolicy
from agentic_rl.runtime.render import Renderer, assistant_spans
from agentic_rl.runtime.rollout import run_episodes

# SmolLM2-135M-Instruct's template: roles and contents only, and a default system prompt when none is given.
SMOLLM2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\n"
           "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + "
           "message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
           "{{ '<|im_start|>assistant\\n' }}{% endif %}")
# A Qwen2.5-style template with tool support (written for this test): calls as <tool_call> JSON with spaces and
# newlines, tool results in user turns.
QWEN_STYLE = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' + (m['content'] or '') -}}"
    "{%- for tc in m.get('tool_calls') or [] -%}"
    "{{- '<tool_call>\\n' + ({'name': tc['function']['name'], 'arguments': tc['function']['arguments']} | tojson) "
    "+ '\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- elif m['role'] == 'tool' -%}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + m['content'] + '\\n</tool_response><|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")
# A template that knows three roles and raises on any other.
STRICT = ("{%- for m in messages -%}{%- if m['role'] not in ['system', 'user', 'assistant'] -%}"
          "{{- raise_exception('unknown role: ' + m['role']) -}}{%- endif -%}"
          "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}{%- endfor -%}"
          "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")
TEMPLATES = {"tiny": (CHAT_TEMPLATE, True), "smollm2": (SMOLLM2, False), "qwen-style": (QWEN_STYLE, True),
             "strict": (STRICT, False)}
CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


def _tokenizer(path, template: str):
    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = template
    return tok


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_every_demonstrated_call_is_inside_the_trained_tokens(tiny_dir, env, name):
    template, native = TEMPLATES[name]
    renderer = Renderer(_tokenizer(tiny_dir, template))
    assert renderer.native_tools == native
    trajs = run_episodes(lambda: make_env("tool_use", fault_rate=0.5), env.tasks("eval", 16),
                         TeacherPolicy(dict(env.default_noise)))
    calls = 0
    for t in trajs:
        out = renderer.render(t.messages)
        spans = assistant_spans(out.mask)
        assistants = [m for m in t.messages if m["role"] == "assistant"]
        assert len(spans) == len(assistants)
        for (s, e), m in zip(spans, assistants):
            trained = renderer.tokenizer.decode(out.ids[s:e])
            assert trained.endswith(renderer.tokenizer.eos_token)
            for call in m.get("tool_calls") or []:
                found = [json.loads(c) for c in CALL.findall(trained)]
                assert {"name": call["function"]["name"], "arguments": call["function"]["arguments"]} in found
                calls += 1
            if not m.get("tool_calls"):
                assert m["content"] in trained
    assert calls >= 20


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_sampled_multiturn_trajectories_rerender_exactly(trained_dir, env, name):
    template, _ = TEMPLATES[name]
    tok = _tokenizer(trained_dir, template)
    policy = HFPolicy(trained_dir, SamplingConfig(temperature=1.0, max_new_tokens=48),
                      model=AutoModelForCausalLM.from_pretrained(trained_dir), tokenizer=tok)
    trajs = run_episodes(lambda: make_env("tool_use", fault_rate=0.3), env.tasks("eval", 8), policy, group_size=2,
                         seed=1)
    assert sum(t.n_turns >= 2 for t in trajs) >= 3, "the fixture model should produce multi-turn episodes"
    for t in trajs:
        out = policy.renderer.render(t.messages, assistant_ids=t.assistant_ids)
        assert out.ids == t.ids and out.mask == t.mask
