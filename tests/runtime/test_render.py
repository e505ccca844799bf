import pytest
import torch
from transformers import AutoTokenizer

from agentic_rl.envs import make_env
from agentic_rl.models.tiny.tokenizer import CHAT_TEMPLATE
from agentic_rl.policies import HFPolicy, SamplingConfig, TeacherPolicy
from agentic_rl.runtime.parsing import format_tool_call
from agentic_rl.runtime.render import SUFFIX_CHECKS, Renderer
from agentic_rl.runtime.rollout import run_episodes
from agentic_rl.runtime.trajectory import Trajectory, load_jsonl, save_jsonl
from agentic_rl.train.logprobs import sequence_logprobs


def _teacher_trajs(env, n=20):
    return run_episodes(lambda: make_env("tool_use", fault_rate=0.5), env.tasks("eval", n),
                        TeacherPolicy(dict(env.default_noise)))


def test_render_matches_the_chat_template_and_masks_exactly_the_assistant(tiny_dir, env):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    r = Renderer(tok)
    for t in _teacher_trajs(env):
        out = r.render(t.messages)
        assert out.ids == tok.apply_chat_template(t.messages, tokenize=True, return_dict=True)["input_ids"]
        # the masked tokens are exactly each assistant turn followed by its <|im_end|>, in order
        spans, cur = [], []
        for i, m in zip(out.ids, out.mask):
            if m:
                cur.append(i)
            elif cur:
                spans.append(cur)
                cur = []
        assistants = [m for m in t.messages if m["role"] == "assistant"]
        assert len(spans) == len(assistants)
        for span, m in zip(spans, assistants):
            expected = tok.apply_chat_template([m], tokenize=False).split("<|im_start|>assistant\n", 1)[1]
            assert tok.decode(span) == expected.rstrip("\n") and span[-1] == tok.eos_token_id


def test_the_tiny_template_renders_a_call_as_format_tool_call(tiny_dir):
    """What the policy learns to write is what the parser reads: compact JSON, no space tokens."""
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "北京"}}}
    text = tok.apply_chat_template([{"role": "assistant", "content": "", "tool_calls": [call]}], tokenize=False)
    assert format_tool_call("get_weather", {"city": "北京"}) == \
        '<tool_call>{"name":"get_weather","arguments":{"city":"北京"}}</tool_call>'
    assert text == "<|im_start|>assistant\n" + format_tool_call("get_weather", {"city": "北京"}) + "<|im_end|>\n"


def test_parallel_calls_render_as_one_block_each_in_both_conventions(tiny_dir):
    """The tiny template (native tool calls) and a template that prints only contents (Hermes text) both write a
    turn of parallel calls as the parser reads it, with one tool message per call after it."""
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    calls = [("get_weather", {"city": "Oslo"}), ("calculator", {"expression": "2 + 3"})]
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]},
                {"role": "tool", "name": "get_weather", "content": "sunny"}, {"role": "tool", "name": "calculator",
                                                                            "content": "5"},
                {"role": "assistant", "content": "done"}]
    plain = AutoTokenizer.from_pretrained(tiny_dir)
    plain.chat_template = ("{%- for m in messages -%}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                           "{%- endfor -%}{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}")
    for renderer in (Renderer(tok), Renderer(plain)):
        out = renderer.render(messages)
        spans = tok.decode([i for i, m in zip(out.ids, out.mask) if m])
        assert format_tool_call(*calls[0]) + format_tool_call(*calls[1]) in spans and spans.count("<tool_call>") == 2
        text = tok.decode(out.ids)
        assert text.index("sunny") < text.index("5") and text.count("done") == 1


def test_templates_without_generation_markers_give_the_same_mask(tiny_dir, env, caplog):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    plain = AutoTokenizer.from_pretrained(tiny_dir)
    plain.chat_template = CHAT_TEMPLATE.replace("{%- generation -%}", "").replace("{%- endgeneration -%}", "")
    with caplog.at_level("WARNING", logger="agentic_rl.runtime.render"):
        a, b = Renderer(tok), Renderer(plain)
    assert "chat template has no {% generation %} markers" in caplog.text  # the template's syntax, as written
    assert a.has_generation_markers and not b.has_generation_markers
    for t in _teacher_trajs(env, 8):
        assert a.render(t.messages) == b.render(t.messages)


def test_sampled_multiturn_trajectories_rerender_exactly(trained_dir, env, tmp_path):
    policy = HFPolicy(trained_dir, SamplingConfig(temperature=1.0, max_new_tokens=48))
    trajs = run_episodes(lambda: make_env("tool_use", fault_rate=0.3), env.tasks("eval", 12), policy,
                         group_size=3, seed=1)
    assert sum(t.n_turns >= 2 for t in trajs) >= 5, "the fixture model should produce multi-turn episodes"
    save_jsonl(trajs, tmp_path / "t.jsonl")
    for t in load_jsonl(tmp_path / "t.jsonl"):  # through JSONL and back, as a user would replay them
        out = policy.renderer.render(t.messages, assistant_ids=t.assistant_ids)
        assert out.ids == t.ids and out.mask == t.mask
        # the masked spans are exactly the sampled assistant turns, and nothing else has a logprob
        assert [i for i, m in zip(t.ids, t.mask) if m] == [i for a in t.assistant_ids for i in a]
        assert all(lp == 0.0 for lp, m in zip(t.logprobs, t.mask) if not m)
        assert all(lp <= 0.0 for lp in t.logprobs)


def test_sampling_logprobs_match_a_plain_forward(trained_dir, env):
    policy = HFPolicy(trained_dir, SamplingConfig(temperature=0.8, max_new_tokens=48))
    trajs = run_episodes(lambda: make_env("tool_use"), env.tasks("eval", 6), policy, group_size=2, seed=2)
    lp, _ = sequence_logprobs(policy.model, [t.ids for t in trajs], temperature=0.8, masks=[t.mask for t in trajs])
    for b, t in enumerate(trajs):
        m = torch.tensor(t.mask, dtype=torch.bool)
        assert torch.allclose(lp[b, : len(t.ids)][m], torch.tensor(t.logprobs)[m], atol=1e-4)


def test_batched_greedy_decoding_equals_one_episode_at_a_time(trained_dir, env):
    """Holes in the shared KV cache must not change what any row sees."""
    policy = HFPolicy(trained_dir, SamplingConfig(temperature=0.0, max_new_tokens=48))
    tasks = env.tasks("eval", 6)
    batched = run_episodes(lambda: make_env("tool_use", fault_rate=0.3), tasks, policy, group_size=2)
    alone = [run_episodes(lambda: make_env("tool_use", fault_rate=0.3), [t], policy, group_size=1)[0] for t in tasks]
    for b, a in zip(batched[::2], alone):
        assert b.ids == a.ids
    assert [t.ids for t in batched[::2]] == [t.ids for t in batched[1::2]]  # greedy: the G samples agree


def test_trajectory_jsonl_is_openai_messages(env, tmp_path):
    trajs = _teacher_trajs(env, 5)
    save_jsonl(trajs, tmp_path / "d.jsonl")
    back = load_jsonl(tmp_path / "d.jsonl")
    assert back == trajs
    call = next(m for t in back for m in t.messages if m.get("tool_calls"))
    assert call["tool_calls"][0]["type"] == "function" and isinstance(call["tool_calls"][0]["function"]["arguments"], dict)
    with pytest.raises(ValueError, match="outcome"):
        Trajectory(**{**trajs[0].to_dict(), "outcome": "great"})


def test_continuation_is_the_suffix_of_the_full_render(tiny_dir, env):
    """What the agent loop appends after a turn equals what rendering the whole conversation puts there."""
    r = Renderer(AutoTokenizer.from_pretrained(tiny_dir))
    calls = 0
    for t in _teacher_trajs(env, 30):
        for k, m in enumerate(t.messages):
            if m["role"] != "assistant" or k == len(t.messages) - 1:
                continue
            upto = r.render(t.messages[: k + 1]).ids
            end = len(upto) - upto[::-1].index(r.eos_id)  # just after the turn's EOS
            full = r.render(t.messages[: k + 2], add_generation_prompt=True).ids
            assert upto[:end] + r.continuation(t.messages[: k + 2]) == full
            calls += 1
    # Past its checks, it renders from the last assistant turn on (and was still exact).
    assert calls > SUFFIX_CHECKS and r._suffix_checks_left == 0


# Templates that look back further than the last assistant turn: one numbers its messages, one refuses a
# conversation that does not open with the system prompt.
NUMBERED = ("{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + ' ' + loop.index|string + '\\n' + "
            "(m['content'] or '') + '<|im_end|>\\n' -}}{%- endfor -%}"
            "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")
STRICT = ("{%- if messages[0]['role'] != 'system' -%}{{- raise_exception('the system prompt must come first') -}}"
          "{%- endif -%}" + CHAT_TEMPLATE)


@pytest.mark.parametrize("template", [NUMBERED, STRICT], ids=["numbered", "strict"])
def test_continuation_renders_the_whole_conversation_when_the_template_needs_it(tiny_dir, env, template):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    tok.chat_template = template
    r = Renderer(tok)
    for t in _teacher_trajs(env, 5):
        for k, m in enumerate(t.messages[:-1]):
            if m["role"] != "assistant":
                continue
            # the whole conversation as the renderer writes it for this template (NUMBERED has no tool support,
            # so its calls and results are Hermes text: render.as_hermes_text)
            before = r.apply(t.messages[: k + 1], tokenize=False)
            after = r.apply(t.messages[: k + 2], tokenize=False, add_generation_prompt=True)
            new = after[before.rfind(tok.eos_token) + len(tok.eos_token):]
            assert r.continuation(t.messages[: k + 2]) == tok(new, add_special_tokens=False)["input_ids"]
    assert r._suffix_checks_left is None


def test_the_context_limit_is_the_models_own_unless_set(tiny_dir, env):
    """An episode may grow to the model's max_position_embeddings (codefix demonstrations run ~1,700 tokens, and a
    fixed 1,024 cut every one of the policy's episodes short); `max_context` sets a tighter limit."""
    task = env.tasks("eval", 1)[0]

    def generated(max_context, model_limit):
        policy = HFPolicy(tiny_dir, SamplingConfig(temperature=1.0, max_new_tokens=10_000, max_context=max_context))
        policy.model.config.max_position_embeddings = model_limit
        eos = policy.renderer.eos_id  # never sampled here, so only a token limit ends the turn
        policy.model.lm_head.register_forward_hook(lambda m, i, out: out.index_fill(-1, torch.tensor([eos]), -1e9))
        [t] = run_episodes(lambda: make_env("tool_use"), [task], policy, seed=0)
        return len(t.assistant_ids[0])  # the one turn, cut by the context limit

    prompt = len(HFPolicy(tiny_dir).renderer.render(env.reset(task), add_generation_prompt=True).ids)
    assert generated(None, prompt + 60) == 60  # the model's own limit
    assert generated(prompt + 25, 4096) == 25  # max_context, tighter than the model's
