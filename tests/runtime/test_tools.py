import json

from transformers.utils import get_json_schema

from agentic_rl.envs.tool_use import calculator, search, weather_on, weather_tool
from agentic_rl.runtime.tools import Tool, Toolbox, ToolError

get_weather = weather_tool(lambda: 0)  # the world on day 0


def add(a: int, b: float = 1.0, tags: list[str] | None = None) -> float:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
        tags: Labels, ignored.
    """
    return a + b


def broken(x: str) -> str:
    """Always fails.

    Args:
        x: Anything.
    """
    raise KeyError("boom")


def test_schema_is_derived_from_signature_and_docstring():
    t = Tool(add)
    assert t.schema == get_json_schema(add)
    fn = t.schema["function"]
    assert fn["name"] == "add" and fn["description"] == "Add two numbers."
    assert fn["parameters"]["properties"]["a"] == {"type": "integer", "description": "The first number."}
    assert fn["parameters"]["required"] == ["a"]
    assert fn["parameters"]["properties"]["tags"]["items"] == {"type": "string"}


def test_schemas_text_is_one_compact_json_object_per_tool():
    box = Toolbox([add, calculator, search])
    lines = box.schemas_text().split("\n")
    assert [json.loads(line) for line in lines] == box.schemas
    # no separator spaces: each would be a token of its own for the tiny policy
    assert all(line == json.dumps(json.loads(line), ensure_ascii=False, separators=(",", ":")) for line in lines)
    assert '"type":"function"' in lines[0] and '"type": "function"' not in lines[0]


def test_arguments_are_validated_before_the_call():
    t = Tool(add)
    assert t({"a": 2, "b": 3}).content == "5"
    assert t({"a": 2, "tags": None}).ok  # nullable parameters accept null
    for bad, word in [({"b": 1}, "required"), ({"a": "x"}, "integer"), ({"a": 1, "c": 2}, "Additional"),
                      ([1, 2], "JSON object")]:
        r = t(bad)
        assert not r.ok and r.error_kind == "invalid_arguments" and word in r.content, r.content
        assert "a, b, tags" in r.content or "JSON object" in r.content  # names what is valid


def test_tool_errors_become_observations_never_exceptions():
    box = Toolbox([calculator, get_weather, search, broken])
    r = box.call("calculator", {"expression": "1 / 0"})
    assert not r.ok and r.error_kind == "tool_error" and "division by zero" in r.content
    r = box.call("broken", {"x": "y"})
    assert not r.ok and r.error_kind == "crash" and "KeyError" in r.content
    r = box.call("nope", {})
    assert not r.ok and r.error_kind == "unknown_tool" and "calculator" in r.content
    assert box.call("calculator", {"expression": "__import__('os')"}).error_kind == "tool_error"


def test_env_tools_compute_what_they_say():
    assert calculator("37 * 84") == "3108"
    assert calculator("(2 + 3) * 4 - 1") == "19"
    assert '"condition"' in get_weather("北京") and get_weather("北京") .replace("北京", "Beijing") == get_weather("Beijing")
    assert search("no such company") == "no results"
    try:
        get_weather("Atlantis")
    except ToolError as e:
        assert "Atlantis" in str(e)
    else:
        raise AssertionError("unknown city must raise ToolError")


def test_the_weather_changes_by_day_so_only_the_tool_knows_it():
    # One fixed weather per city would let a model answer from memory of its training tasks.
    assert len({weather_on("Beijing", day) for day in range(30)}) > 10
    assert weather_on("北京", 7) == weather_on("Beijing", 7)
