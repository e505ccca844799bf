"""The one renderer: messages → token ids and loss mask, driven by the tokenizer's chat template.

SFT renders demonstrations with it; the agent loop renders prompts and tool observations with it; tests check that
re-rendering a sampled trajectory reproduces its ids. The mask comes from the template's `{% generation %}` markers
(1 on the assistant's own tokens), or, for templates without them, from rendering each assistant turn's prefix.

Tool calls with any chat template. A template that renders `tool_calls` and the `tool` role (Qwen2.5's, the tiny
preset's) gets the messages as they are. One that does not — SmolLM2's prints only each message's `content`, so a
call would render as an empty assistant turn and SFT would teach the model never to call a tool — gets them in the
Hermes text convention instead, logged once: the call as `<tool_call>{...}</tool_call>` in the assistant's
content, the tool result as `<tool_response>` text in a user turn (a role every template accepts). The tool
schemas are in the env's system prompt either way.

A model can sample a token sequence that is not the canonical tokenization of its own text ("ab" as "a"+"b").
Re-tokenizing that text would change what the policy said, so callers pass each assistant turn's sampled ids
(`assistant_ids`) and the renderer puts them in the assistant spans verbatim: tokens are kept as sampled.

A control token that a message spells (`<|im_end|>` typed by a user or returned by a tool) is tokenized as text, so
no message can forge a turn (`control_text.py`).

Text no tokenizer can encode — a lone UTF-16 surrogate, which a script policy or an env can put in a message but
a model's decoded text never holds — is rendered as U+FFFD, as any UTF-8 reader would show it; the trajectory keeps
the message as it was (`text.json_text` writes it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from jinja2.exceptions import TemplateError

from ..text import encodable
from .control_text import ControlText
from .parsing import format_tool_call

logger = logging.getLogger(__name__)

# A conversation whose every tool part carries a marker: a template renders tool calls and tool results natively
# when all three markers come out.
_PROBE = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
          {"role": "assistant", "content": "", "tool_calls": [
              {"type": "function", "function": {"name": "probe_tool_name", "arguments": {"q": "probe_argument"}}}]},
          {"role": "tool", "name": "probe_tool_name", "content": "probe_tool_result"}]


def renders_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders assistant `tool_calls` and `tool` messages itself."""
    try:
        text = tokenizer.apply_chat_template(_PROBE, tokenize=False)
    except Exception:  # a template that raises on the tool role (or on tool_calls) does not support them
        return False
    return all(marker in text for marker in ("probe_tool_name", "probe_argument", "probe_tool_result"))


def as_hermes_text(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same conversation with tool calls as `<tool_call>` text in the assistant's content and tool results as
    `<tool_response>` text in user turns: for templates that render only roles and contents."""
    out = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = "".join(format_tool_call(c["function"]["name"], c["function"]["arguments"]) for c in m["tool_calls"])
            out.append({"role": "assistant", "content": (m.get("content") or "") + calls})
        elif m["role"] == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{m['content']}\n</tool_response>"})
        else:
            out.append(m)
    return out

SUFFIX_CHECKS = 16  # continuations per renderer checked against the whole conversation's (see continuation)


class RenderError(ValueError):
    """The chat template cannot be used as the trainer needs (no template, or assistant spans not found)."""


@dataclass
class Rendered:
    ids: list[int]
    mask: list[int]  # 1 on assistant-generated tokens, 0 elsewhere


class Renderer:
    """Turns OpenAI-format messages into (ids, mask) with `tokenizer.apply_chat_template`."""

    def __init__(self, tokenizer: Any):
        if not getattr(tokenizer, "chat_template", None):
            raise RenderError("the tokenizer has no chat_template; give the model directory one "
                              "(tokenizer_config.json 'chat_template' or chat_template.jinja)")
        self.tokenizer = tokenizer
        self.eos_id: int = tokenizer.eos_token_id
        self.has_generation_markers = "generation" in tokenizer.chat_template and \
            "endgeneration" in tokenizer.chat_template
        self.native_tools = renders_tools(tokenizer)
        self.control = ControlText(tokenizer)
        self._suffix_checks_left: int | None = SUFFIX_CHECKS  # None: render whole conversations (see continuation)
        if not self.has_generation_markers:
            logger.warning("chat template has no {% generation %} markers; finding assistant spans by prefix rendering")
        if not self.native_tools:
            logger.warning("chat template does not render tool calls or tool results; writing them as Hermes text: "
                           "<tool_call>{...}</tool_call> in the assistant's content, <tool_response> in user turns")

    def apply(self, messages: Sequence[dict[str, Any]], **kwargs: Any) -> Any:
        """`apply_chat_template` on the messages as this template can render them (see the module docstring)."""
        messages = [_encodable(m) for m in messages]
        return self.tokenizer.apply_chat_template(messages if self.native_tools else as_hermes_text(messages),
                                                  **kwargs)

    def _template(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool,
                  with_mask: bool) -> tuple[list[int], list[int] | None]:
        out = self.apply(
            messages, tokenize=True, return_dict=True, add_generation_prompt=add_generation_prompt,
            return_assistant_tokens_mask=with_mask)
        ids = list(out["input_ids"])
        mask = list(out["assistant_masks"]) if with_mask else None
        if self.control.spelled(messages):
            text, spans = self._text_and_spelled(messages, add_generation_prompt)
            ids, mask = self._as_text(text, spans, ids, mask)
        return ids, mask

    def _text_and_spelled(self, messages: Sequence[dict[str, Any]],
                          add_generation_prompt: bool) -> tuple[str, list[tuple[int, int]]]:
        """The rendered text and the character spans of the control tokens its messages spell."""
        marked, marks = self.control.mark(messages)
        return self.control.restore(self.apply(marked, tokenize=False, add_generation_prompt=add_generation_prompt),
                                    marks)

    def _as_text(self, text: str, spans: Sequence[tuple[int, int]], ids: list[int],
                 mask: list[int] | None) -> tuple[list[int], list[int] | None]:
        try:
            return self.control.as_text(text, spans, ids, mask)
        except ValueError as e:
            raise RenderError(str(e)) from None

    def render(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = False,
               assistant_ids: Sequence[Sequence[int] | None] | None = None) -> Rendered:
        """Render `messages`; with `assistant_ids`, the k-th assistant span is replaced by the k-th sampled ids."""
        if self.has_generation_markers:
            ids, mask = self._template(messages, add_generation_prompt, with_mask=True)
            spans = assistant_spans(mask)  # type: ignore[arg-type]
        else:
            ids, _ = self._template(messages, add_generation_prompt, with_mask=False)
            spans = self._spans_by_prefix(messages)
        n_assistant = sum(m["role"] == "assistant" for m in messages)
        if len(spans) != n_assistant:
            raise RenderError(f"found {len(spans)} assistant spans for {n_assistant} assistant messages; "
                              "the chat template must render every assistant turn")
        mask = [0] * len(ids)
        for s, e in spans:
            mask[s:e] = [1] * (e - s)
        if assistant_ids is None:
            return Rendered(ids, mask)
        if len(assistant_ids) != n_assistant:
            raise RenderError(f"got {len(assistant_ids)} assistant_ids for {n_assistant} assistant messages")
        out_ids: list[int] = []
        out_mask: list[int] = []
        prev = 0
        for (s, e), sampled in zip(spans, assistant_ids):
            out_ids += ids[prev:s]
            out_mask += [0] * (s - prev)
            span = list(sampled) if sampled is not None else ids[s:e]
            out_ids += span
            out_mask += [1] * len(span)
            prev = e
        out_ids += ids[prev:]
        out_mask += [0] * (len(ids) - prev)
        return Rendered(out_ids, out_mask)

    def continuation(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True) -> list[int]:
        """Ids the template puts after the last assistant turn's EOS: its closing text, the new messages and the
        generation prompt. The agent loop appends these to the tokens it already has, so each turn tokenizes only
        what is new; `render` of the whole conversation checks the result once the episode ends.

        Renders from the last assistant turn on, not the whole conversation, so a turn costs the same however long
        the episode has grown (rendering everything twice per turn grows with the episode:
        docs/design-notes.md#incremental-rendering). Templates that look further back — one that
        raises unless a user turn comes first, or renders a message by its position — get the whole conversation:
        the first SUFFIX_CHECKS continuations of a renderer are compared with it, and one difference is enough."""
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        if self._suffix_checks_left is None:
            return self._continuation(messages, last, add_generation_prompt)
        try:
            short: list[int] | None = self._continuation(messages[last:], 0, add_generation_prompt)
        except (TemplateError, ValueError):  # e.g. "roles must alternate user/assistant/…"
            short = None
        if short is None or self._suffix_checks_left > 0:
            full = self._continuation(messages, last, add_generation_prompt)
            if short != full:
                logger.info("chat template renders a turn by what came before it; rendering whole conversations")
                self._suffix_checks_left = None
                return full
            self._suffix_checks_left -= 1
        return short

    def _continuation(self, messages: Sequence[dict[str, Any]], last: int, add_generation_prompt: bool) -> list[int]:
        """Works by text: the conversation up to messages[last] must be a prefix of the whole one."""
        before = self.apply(messages[: last + 1], tokenize=False)
        after = self.apply(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
        eos = self.tokenizer.eos_token
        cut = before.rfind(eos)
        if cut < 0 or not after.startswith(before):
            raise RenderError("the chat template is not prefix-stable (appending messages rewrites earlier text); "
                              "multi-turn sampling needs one that is")
        tail = after[cut + len(eos):]
        ids = self.tokenizer(tail, add_special_tokens=False)["input_ids"]
        if self.control.spelled(messages):
            text, spans = self._text_and_spelled(messages, add_generation_prompt)
            if text != after:
                raise RenderError("the chat template renders a message's text differently when it spells a control "
                                  "token; its control tokens cannot be kept as text")
            start = len(after) - len(tail)
            ids, _ = self._as_text(tail, [(a - start, b - start) for a, b in spans if b > start], ids, None)
        return ids

    def _spans_by_prefix(self, messages: Sequence[dict[str, Any]]) -> list[tuple[int, int]]:
        """Assistant spans for templates without generation markers: from the end of the generation prompt up to
        and including the first EOS after it (what sampling would have produced)."""
        spans = []
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            start = len(self._template(messages[:i], True, with_mask=False)[0])
            full = self._template(messages[: i + 1], False, with_mask=False)[0]
            end = next((j + 1 for j in range(start, len(full)) if full[j] == self.eos_id), len(full))
            spans.append((start, end))
        return spans

    def decode(self, ids: Sequence[int]) -> str:
        """The text of one sampled assistant turn, without its closing EOS; special tags like <tool_call> kept."""
        ids = list(ids)
        if ids and ids[-1] == self.eos_id:
            ids = ids[:-1]
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _encodable(value: Any) -> Any:
    """`value` (a message, or anything in one) with every lone surrogate in its strings replaced by U+FFFD."""
    if isinstance(value, str):
        return encodable(value)
    if isinstance(value, dict):
        return {k: _encodable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encodable(v) for v in value]
    return value


def longest_assistant_turn(rendered: Iterable[Rendered]) -> int:
    """Tokens in the longest assistant turn (its end-of-turn token included) of these rendered conversations."""
    return max((end - start for r in rendered for start, end in assistant_spans(r.mask)), default=0)


def assistant_spans(mask: Sequence[int]) -> list[tuple[int, int]]:
    """[start, end) of each run of ones: the assistant turns of a loss mask."""
    runs, start = [], None
    for i, v in enumerate(list(mask) + [0]):
        if v and start is None:
            start = i
        elif not v and start is not None:
            runs.append((start, i))
            start = None
    return runs
