"""A plain tool-using agent written against the official `openai` client — the kind of agent you already have — and
trained unchanged through the gateway:

    agentic-rl grpo --agent examples/openai_agent.py:run --env tool_use --policy RUN/sft/model --out runs/agent

`run(task, client)` is all the trainer calls: the client already points at the policy in training, under this
episode's rollout id, so every request is recorded token for token. The tools are plain Python functions (tool_use's
world: a calculator, the weather on the task's day, a company search); the reward is the env's: 1 for the right
answer, less 0.1 per call beyond what the task needs.
"""

import json

from agentic_rl.envs.tool_use import SYSTEM_PROMPT, answers_match, calculator, search, weather_on
from agentic_rl.runtime.tools import Toolbox


def run(task, client) -> float:
    def get_weather(city: str) -> str:
        """Get today's weather in a city.

        Args:
            city: The city name, in English or Chinese, for example "Beijing" or "北京".
        """
        condition, temp = weather_on(city, task.get("day", 0))
        # compact JSON, as tool_use's own get_weather answers: the SFT model learned to read that form
        return json.dumps({"city": city.strip(), "condition": condition, "temperature_c": temp},
                          ensure_ascii=False, separators=(",", ":"))

    functions = {f.__name__: f for f in (calculator, get_weather, search)}
    tools = Toolbox(list(functions.values())).schemas  # OpenAI function schemas from signatures and docstrings
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task.prompt}]
    calls = 0
    for _ in range(5):
        reply = client.chat.completions.create(model="agent", messages=messages, tools=tools).choices[0].message
        if not reply.tool_calls:
            return float(answers_match(reply.content or "", task.answer)) - 0.1 * max(0, calls - len(task.reference))
        messages.append(reply.model_dump(include={"role", "content", "tool_calls"}))
        for call in reply.tool_calls:
            try:
                result = functions[call.function.name](**json.loads(call.function.arguments))
                calls += 1
            except Exception as e:  # an unknown tool, bad arguments, a tool error: the model reads it and goes on
                result = f"error: {e}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return 0.0  # no answer within five turns
