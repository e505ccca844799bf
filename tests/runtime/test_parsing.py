import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentic_rl.envs.tool_use import ToolUseEnv
from agentic_rl.runtime.parsing import (
    FinalAnswer,
    ParallelCalls,
    ParseError,
    ToolCall,
    calls_of,
    format_tool_call,
    message_calls,
    message_text,
    parse_turn,
)

TOOLS = ToolUseEnv().tools


def kind(text):
    r = parse_turn(text, TOOLS)
    return r.kind if isinstance(r, ParseError) else type(r).__name__


def test_each_case_is_a_typed_result():
    assert parse_turn("3108", TOOLS) == FinalAnswer("3108")
    assert parse_turn(format_tool_call("calculator", {"expression": "37 * 84"}), TOOLS) == \
        ToolCall("calculator", {"expression": "37 * 84"})
    assert parse_turn('  <tool_call>{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}</tool_call>\n',
                      TOOLS) == ToolCall("search", {"query": "x"})
    assert kind("<tool_call>{oops</tool_call>") == "malformed_json"
    assert kind("<tool_call>[1, 2]</tool_call>") == "malformed_json"
    assert kind('<tool_call>{"arguments": {}}</tool_call>') == "missing_name"
    assert kind('<tool_call>{"name": "calculator", "arguments": 3}</tool_call>') == "bad_arguments"
    assert kind('<tool_call>{"name": "fly", "arguments": {}}</tool_call>') == "unknown_tool"
    assert kind('<tool_call>{"name": "calculator", "arguments": {"expr": "1"}}</tool_call>') == "invalid_arguments"
    two = format_tool_call("search", {"query": "a"}) * 2
    assert kind(two) == "multiple_calls"
    assert kind("Let me check. " + format_tool_call("search", {"query": "a"})) == "text_around_call"
    assert kind('<tool_call>{"name": "search"') == "unbalanced_tags"
    assert kind("</tool_call><tool_call>") == "unbalanced_tags"


def test_parallel_calls_where_the_env_takes_them():
    a, b = format_tool_call("search", {"query": "a"}), format_tool_call("calculator", {"expression": "1 + 1"})
    both = ParallelCalls((ToolCall("search", {"query": "a"}), ToolCall("calculator", {"expression": "1 + 1"})))
    assert parse_turn(a + b, TOOLS, max_calls=4) == both
    assert parse_turn(f" {a}\n\n{b}\n", TOOLS, max_calls=4) == both  # whitespace between the blocks
    assert parse_turn(a, TOOLS, max_calls=4) == ToolCall("search", {"query": "a"})  # one call is a ToolCall
    assert calls_of(both) == [("search", {"query": "a"}), ("calculator", {"expression": "1 + 1"})]
    r = parse_turn(a * 5, TOOLS, max_calls=4)
    assert isinstance(r, ParseError) and r.kind == "multiple_calls" and "at most 4" in r.message
    assert parse_turn(a + " and " + b, TOOLS, max_calls=4).kind == "text_around_call"
    bad = parse_turn(a + '<tool_call>{"name": "fly", "arguments": {}}</tool_call>', TOOLS, max_calls=4)
    assert bad.kind == "unknown_tool"  # one bad call makes the whole turn an error: nothing of it runs
    assert parse_turn(b + "</tool_call><tool_call>" + a, TOOLS, max_calls=4).kind == "unbalanced_tags"
    message = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "search", "arguments": {"query": "a"}}},
        {"type": "function", "function": {"name": "calculator", "arguments": '{"expression": "1 + 1"}'}}]}
    assert message_calls(message) == calls_of(both) and message_text(message) == a + b
    assert message_calls({"role": "assistant", "content": a + b}) == calls_of(both)  # raw text, parsed


def test_error_messages_say_what_is_valid():
    r = parse_turn('<tool_call>{"name": "fly", "arguments": {}}</tool_call>', TOOLS)
    assert isinstance(r, ParseError) and "calculator, get_weather, search" in r.message


FRAGMENTS = ["<tool_call>", "</tool_call>", "{", "}", '"name"', '"arguments"', ":", ",", '"calculator"', '"search"',
             '"query"', '"expression"', "[", "]", "null", "1e999", "\\u0000", '"', " ", "\n", "北京", "3108", "{{", "]]"]
fragments = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=5), max_size=30).map("".join)


@settings(max_examples=6000, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(max_size=200))
def test_fuzz_free_text_never_raises(text):
    assert isinstance(parse_turn(text, TOOLS), (FinalAnswer, ToolCall, ParseError))


@settings(max_examples=6000, deadline=None, suppress_health_check=list(HealthCheck))
@given(fragments)
def test_fuzz_tool_call_shaped_text_never_raises(text):
    r = parse_turn(text, TOOLS)
    assert isinstance(r, (FinalAnswer, ToolCall, ParseError))
    if isinstance(r, ToolCall):  # whatever parsed as a call really is a valid call
        assert r.name in TOOLS.tools and TOOLS.tools[r.name].validate(r.arguments) is None


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.text(max_size=8), st.recursive(st.none() | st.integers() | st.text(max_size=8),
                                                         lambda c: st.lists(c, max_size=3), max_leaves=5), max_size=3))
def test_fuzz_json_objects_roundtrip_or_error(args):
    text = "<tool_call>" + json.dumps({"name": "search", "arguments": args}) + "</tool_call>"
    r = parse_turn(text, TOOLS)
    assert isinstance(r, ToolCall) == (set(args) == {"query"} and isinstance(args["query"], str))


def test_one_call_per_turn_reads_and_words_errors_as_before_parallel_calls():
    """An env of one call per turn (max_calls=1) gets the observations it always got: its episodes do not change."""
    a = format_tool_call("search", {"query": "a"})
    assert parse_turn("hi " + a, TOOLS).message == "a turn is either one tool call or a final answer, not both"
    assert parse_turn(a + a, TOOLS).message == "found 2 tool calls in one turn; make one call per turn"
    assert "write exactly one" in parse_turn("<tool_call>{", TOOLS).message
    # text after a malformed call: the text is the error, as before (the blocks are placed before any is read)
    assert parse_turn("<tool_call>{oops</tool_call> hi", TOOLS).kind == "text_around_call"
