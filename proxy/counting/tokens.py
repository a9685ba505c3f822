"""How many tokens a request costs: per message, and for what is sent besides the messages.

Counting is pure and cheap. A `TextCounter` turns text into tokens (an estimate by default, a real
tokenizer where one is configured); `RequestCounter` applies it to the shapes of the OpenAI chat API,
so that each message is counted once per request. A calibration factor learned from the upstream's
reported `usage` scales every count (see `calibration.py`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from proxy.counting.images import image_tokens

TextCounter = Callable[[str], int]

# Role markers and separators the chat template wraps around every message.
MESSAGE_OVERHEAD = 4
# The assistant header the template appends to prime the reply.
REPLY_PRIMER = 3
# Request fields that are rendered into the prompt besides the messages.
PROMPT_FIELDS = ("tools", "functions", "response_format", "tool_choice", "function_call")
IMAGE_PART_TYPES = frozenset({"image_url", "input_image", "image"})
AUDIO_PART_TYPES = frozenset({"input_audio", "audio"})


def token_count(value: Any) -> int | None:
    """A token count or limit as JSON gives it (a request's `max_tokens`, a server's `n_ctx`): a
    positive integer, else None (a bool, a float, a string or 0 is no count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class MemoTextCounter:
    """A text counter that remembers what it counted. A chat resends its whole history every turn,
    so nearly every text of a request was counted for the one before: looking it up is ten times
    cheaper than counting it again. Texts are remembered by their hash and length, not kept, so the
    memo's memory is a few dozen bytes an entry whatever the texts' size; the least recently used
    go first past `size` entries. Every text but the empty one is remembered: counting even a
    short one (a translate and a dozen class counts) costs several times the lookup."""

    MIN_CHARS = 1

    def __init__(self, count_text: TextCounter, size: int = 200_000) -> None:
        self.count_text = count_text
        self.size = size
        self._memo: dict[tuple[int, int], int] = {}

    def __call__(self, text: str) -> int:
        if len(text) < self.MIN_CHARS:
            return self.count_text(text)
        key = (hash(text), len(text))
        memo = self._memo
        tokens = memo.pop(key, None)
        if tokens is None:
            tokens = self.count_text(text)
            if len(memo) >= self.size:
                # Plans of large requests run in worker threads: another may evict the same entry.
                with contextlib.suppress(KeyError, RuntimeError, StopIteration):
                    del memo[next(iter(memo))]
        memo[key] = tokens
        return tokens


def count_chars4(text: str) -> int:
    """The pattern's rule of thumb: about four characters per token."""
    return (len(text) + 3) // 4


def json_text(value: Any) -> str:
    """Compact JSON of a value, for counting structures a template renders as JSON."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # lone surrogates; numbers kept as their text (orjson.Fragment) written as text
        import json

        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=fragment_text)


def fragment_text(value: Any) -> str:
    """`default=` for the standard library's encoder: a kept number's text (an `orjson.Fragment`, as
    `proxy.server.jsonbody` parses numbers beyond a double or 64 bits), written as it came."""
    if isinstance(value, orjson.Fragment):
        return orjson.dumps(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class RequestCounter:
    """Counts the parts of one chat request with a text counter, scaled by a calibration factor."""

    def __init__(self, count_text: TextCounter, *, factor: float = 1.0, image_tokens: int = 768) -> None:
        self.count_text = count_text
        self.factor = factor
        self.image_tokens = image_tokens

    def message(self, message: Mapping[str, Any]) -> int:
        """The tokens one message costs in the prompt."""
        raw = MESSAGE_OVERHEAD
        for key, value in message.items():
            if key == "role" or key == "tool_call_id" or value is None:
                continue
            if key == "content":
                raw += self.count_text(value) if value.__class__ is str else self.content(value)
            elif isinstance(value, str):
                raw += self.count_text(value)
            else:
                raw += self.count_text(json_text(value))
        return math.ceil(raw * self.factor)

    def content(self, content: Any) -> int:
        """Unscaled tokens of a `content` value: a string, or a list of text and media parts."""
        if isinstance(content, str):
            return self.count_text(content)
        if not isinstance(content, list):
            return self.count_text(json_text(content))
        total = 0
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            kind = kind if isinstance(kind, str) else None
            if kind in IMAGE_PART_TYPES:
                total += image_tokens(part, self.image_tokens)
            elif kind in AUDIO_PART_TYPES:
                total += self.image_tokens
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                total += self.count_text(part["text"])
            else:
                total += self.count_text(json_text(part))
        return total

    def fixed(self, body: Mapping[str, Any]) -> int:
        """The tokens a request costs besides its messages: tool schemas, response format, primer."""
        raw = REPLY_PRIMER
        for key in PROMPT_FIELDS:
            value = body.get(key)
            if value is not None:
                raw += self.count_text(json_text(value))
        return math.ceil(raw * self.factor)


def text_of(content: Any) -> str:
    """The plain text of a `content` value, media parts left out."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return "" if content is None else json_text(content)
