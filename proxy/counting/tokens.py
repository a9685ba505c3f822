"""How many tokens a request costs: per message, and for what is sent besides the messages.

Counting is pure and cheap. A `TextCounter` turns text into tokens (an estimate by default, a real
tokenizer where one is configured); `RequestCounter` applies it to the shapes of the OpenAI chat API,
so that each message is counted once per request. A calibration factor learned from the upstream's
reported `usage` scales every count (see `calibration.py`).
"""

from __future__ import annotations

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
    memo's memory is a few dozen bytes an entry whatever the texts' size (the two in one int: a
    tuple of two cost 100 bytes an entry, 80 MB for the five memos of the four vocabularies and the
    heaviest of them once a 200,000-item history had been counted). Every text but the empty
    one is remembered: counting even a short one (a translate and a dozen class counts) costs
    several times the lookup.

    Two generations instead of a least-recently-used order: a hit in the young one is a single
    lookup (no reordering on every hit: 2,000 texts a request), a hit in the old one moves the text
    to the young one, and when the young one holds `size // 2` texts it becomes the old one, the
    old one forgotten. What a chat still resends survives; what it stopped sending goes."""

    def __init__(self, count_text: TextCounter, size: int = 200_000) -> None:
        self.count_text = count_text
        self.size = size
        self._young: dict[int, int] = {}
        self._old: dict[int, int] = {}

    def __call__(self, text: str) -> int:
        if not text:
            return self.count_text(text)
        key = hash(text) << 32 | len(text)  # as (hash, length): no text is 4 GB long
        tokens = self._young.get(key)
        if tokens is None:
            tokens = self._old.get(key)
            if tokens is None:
                tokens = self.count_text(text)
            young = self._young
            if len(young) >= self.size // 2:
                # Plans of large requests run in worker threads: another may age the same generation;
                # a text lost on the way is only counted again.
                self._old, self._young = young, {}
            self._young[key] = tokens
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


# The JSON texts of one request's structures (its messages' tool calls) by the structure's identity:
# counting and the margin each read them again in a plan. Each value is kept beside its text, so its
# identity stays its own while the entry lives; the table lives as long as the request's draft.
WrittenJson = dict[int, tuple[Any, str]]


def json_text_once(value: Any, written: WrittenJson | None) -> str:
    """`json_text(value)`, written only once for a request that keeps what was written in `written`."""
    if written is None:
        return json_text(value)
    found = written.get(id(value))
    if found is not None and found[0] is value:
        return found[1]
    text = json_text(value)
    written[id(value)] = (value, text)
    return text


def fragment_text(value: Any) -> str:
    """`default=` for the standard library's encoder: a kept number's text (an `orjson.Fragment`, as
    `proxy.bodies.jsonbody` parses numbers beyond a double or 64 bits), written as it came."""
    if isinstance(value, orjson.Fragment):
        return orjson.dumps(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class RequestCounter:
    """Counts the parts of one chat request with a text counter, scaled by a calibration factor."""

    def __init__(
        self,
        count_text: TextCounter,
        *,
        factor: float = 1.0,
        image_tokens: int = 768,
        written: WrittenJson | None = None,
    ) -> None:
        self.count_text = count_text
        self.factor = factor
        self.image_tokens = image_tokens
        self.written = written  # the request's structures as JSON, shared with its margin

    def message(self, message: Mapping[str, Any]) -> int:
        """The tokens one message costs in the prompt."""
        raw = MESSAGE_OVERHEAD
        count_text = self.count_text
        for key, value in message.items():
            if value.__class__ is str:  # most values: checked first
                if key != "role" and key != "tool_call_id":
                    raw += count_text(value)
            elif value is None or key == "role" or key == "tool_call_id":
                continue
            elif key == "content":
                raw += self.content(value)
            elif isinstance(value, str):
                raw += count_text(value)
            else:
                raw += count_text(json_text_once(value, self.written))
        factor = self.factor
        return raw if factor == 1.0 else math.ceil(raw * factor)

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
