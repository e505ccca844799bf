"""Text every encoder takes. A Python string can hold a lone UTF-16 surrogate (a script policy, an env or a model
behind an API can emit one) that no UTF-8 encoder accepts: tokenizers get it as U+FFFD, as any UTF-8 reader shows it,
and JSON files get its `\\uXXXX` escape, so the string round-trips."""

from __future__ import annotations

import json
import re
from typing import Any

LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD (what a tokenizer is given)."""
    return LONE_SURROGATE.sub("\ufffd", text)


def json_text(obj: Any, indent: int | None = None) -> str:
    """JSON that keeps non-ASCII text readable and writes each lone surrogate as its `\\uXXXX` escape, so every
    string round-trips through `json.loads` (`ensure_ascii=False` alone would fail to write it to a UTF-8 file)."""
    return LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(obj, indent=indent, ensure_ascii=False))
