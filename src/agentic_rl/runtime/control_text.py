"""Chat-template control tokens that a message spells stay text.

`<|im_end|>` typed into a user message or returned by a tool is, to a tokenizer, the id that ends a turn: with it a
user or a tool could forge a system turn, in serving and in every trajectory the trainer learns from. So the renderer
tokenizes each control token spelled by a message's own strings as plain text (`split_special_tokens`), and keeps as
control tokens the ones the chat template writes. Control tokens are the tokenizer's special tokens except the
tool-call tags, which system prompts teach and models emit as content (`parsing.OPEN`, `parsing.CLOSE`).

How: each spelled control token in the messages is swapped for a placeholder (a private-use character that no
message holds, around the token's index); the template renders; the placeholders' positions are the character spans
that came from messages. The real text is tokenized with offsets, and each control-token id inside such a span is
replaced by the plain-text ids of its characters. Every other token is untouched, so a conversation that spells no
control token (nearly all) renders exactly as the template alone would.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .parsing import CLOSE, OPEN

PRIVATE_USE = range(0xE000, 0xF900)  # Unicode's private-use area: characters no tokenizer or template gives meaning


@dataclass
class Marks:
    """The placeholders `ControlText.mark` put in: `mark` + index + `mark` stands for `spelled[index]`."""
    mark: str
    spelled: list[str]


class ControlText:
    """A tokenizer's control tokens, found in messages and tokenized as text there."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        strings = {t.content for t in tokenizer.added_tokens_decoder.values() if t.special} - {OPEN, CLOSE}
        self.ids = {i for i, t in tokenizer.added_tokens_decoder.items() if t.content in strings}
        self.pattern = re.compile("|".join(map(re.escape, sorted(strings, key=len, reverse=True)))) if strings else None

    def spelled(self, messages: Sequence[dict[str, Any]]) -> bool:
        """Whether any string in `messages` spells a control token."""
        return self.pattern is not None and any(self.pattern.search(s) for s in _strings(messages))

    def mark(self, messages: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], Marks]:
        """`messages` with every spelled control token replaced by a placeholder."""
        assert self.pattern is not None
        used = {c for s in _strings(messages) for c in s}
        marks = Marks(chr(next(c for c in PRIVATE_USE if chr(c) not in used)), [])

        def swap(m: re.Match[str]) -> str:
            marks.spelled.append(m.group())
            return f"{marks.mark}{len(marks.spelled) - 1}{marks.mark}"
        return [_map_strings(m, lambda s: self.pattern.sub(swap, s)) for m in messages], marks  # type: ignore[union-attr]

    @staticmethod
    def restore(text: str, marks: Marks) -> tuple[str, list[tuple[int, int]]]:
        """The rendered `text` with the spelled tokens back in place, and their character spans in it."""
        parts: list[str] = []
        spans: list[tuple[int, int]] = []
        pos = length = 0
        for m in re.finditer(f"{re.escape(marks.mark)}(\\d+){re.escape(marks.mark)}", text):
            parts.append(text[pos:m.start()])
            length += m.start() - pos
            token = marks.spelled[int(m.group(1))]
            parts.append(token)
            spans.append((length, length + len(token)))
            length += len(token)
            pos = m.end()
        parts.append(text[pos:])
        return "".join(parts), spans

    def as_text(self, text: str, spans: Sequence[tuple[int, int]], ids: Sequence[int],
                mask: Sequence[int] | None) -> tuple[list[int], list[int] | None]:
        """`ids` (the tokenization of `text`) with each control token inside `spans` replaced by its plain-text ids;
        `mask` stretched to match."""
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        if list(enc["input_ids"]) != list(ids):
            raise ValueError("the chat template renders a message's text differently when it spells a control token; "
                             "its control tokens cannot be kept as text")
        out_ids: list[int] = []
        out_mask: list[int] = []
        for i, (tid, (s, e)) in enumerate(zip(ids, enc["offset_mapping"])):
            piece = [tid]
            if tid in self.ids and any(a < e and s < b for a, b in spans):
                piece = self.tokenizer(text[s:e], add_special_tokens=False, split_special_tokens=True)["input_ids"]
            out_ids += piece
            if mask is not None:
                out_mask += [mask[i]] * len(piece)
        return out_ids, (out_mask if mask is not None else None)


def _strings(value: Any) -> list[str]:
    """Every string inside a message (or a list of them): contents, tool-call names and arguments."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def _map_strings(value: Any, fn: Any) -> Any:
    """`value` with `fn` applied to every string inside it."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_strings(v, fn) for v in value]
    return value
