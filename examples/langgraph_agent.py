"""The same agent written with a framework — LangGraph's prebuilt ReAct agent over LangChain's `ChatOpenAI` — and run
against the gateway unchanged: only its base_url is the episode's rollout route.

    pip install -e '.[serve,langgraph]'
    agentic-rl grpo --agent examples/langgraph_agent.py:run --env tool_use --policy RUN/sft/model --out runs/lg
"""

import json

from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.errors import GraphRecursionError
from langgraph.prebuilt import ToolNode, create_react_agent

from agentic_rl.envs.tool_use import SYSTEM_PROMPT, answers_match, calculator, search, weather_on


def run(task, client) -> float:
    @tool
    def get_weather(city: str) -> str:
        """Get today's weather in a city, given its name in English or Chinese."""
        condition, temp = weather_on(city, task.get("day", 0))
        return json.dumps({"city": city.strip(), "condition": condition, "temperature_c": temp})

    model = ChatOpenAI(model="agent", base_url=str(client.base_url), api_key="agentic-rl", max_retries=2)
    tools = ToolNode([tool(calculator), get_weather, tool(search)], handle_tool_errors=True)  # errors go to the model
    agent = create_react_agent(model, tools, prompt=SYSTEM_PROMPT)
    try:
        state = agent.invoke({"messages": [("user", task.prompt)]}, {"recursion_limit": 10})
    except GraphRecursionError:  # still calling tools after five rounds: no answer
        return 0.0
    calls = sum(isinstance(m, ToolMessage) and m.status != "error" for m in state["messages"])
    answer = state["messages"][-1].content
    return float(answers_match(answer, task.answer)) - 0.1 * max(0, calls - len(task.reference))
