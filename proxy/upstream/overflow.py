"""Recognising an upstream's "your prompt is too long" answer, and what it says about the real count.

Each server words it differently: OpenAI's `context_length_exceeded` ("…maximum context length is
8192 tokens. However, your messages resulted in 9000 tokens"), vLLM's ("…you requested 5000 tokens
(4500 in the messages, 500 in the completion)", or "your request has 5000 input tokens", or its
renderer's "You passed 9000 input tokens and requested 500 output tokens. However, the model's
context length is only 8192 tokens, …", whose "input characters" variant gives no count), llama.cpp's
`exceed_context_size_error` with `n_prompt_tokens` and `n_ctx` (on every route, `/v1/messages`
and `/v1/responses` too), Anthropic's ("prompt is too long: 208437 tokens > 200000 maximum", "input
length and `max_tokens` exceed context limit: 197000 + 8192 > 200000", in its own error shape), and
Ollama's and others' plainer phrases. Pure: status and body bytes in, an `Overflow` (or None) out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.counting.tokens import token_count

OVERFLOW_STATUSES = frozenset({400, 413, 422})

_PHRASES = re.compile(
    r"context[ _]length|maximum context|context size|context window|exceeds? the (?:available )?context|"
    r"too many tokens|prompt is too long|input length|input is too long|reduce the length|context limit",
    re.IGNORECASE,
)
_PROMPT_COUNT = re.compile(
    r"too long: (\d+) tokens|context limit: (\d+) \+|resulted in (\d+) tokens|\((\d+) in the messages|"
    r"has (\d+) input tokens|request \((\d+) tokens\)|prompt(?: has| of)? \(?(\d+) tokens|"
    r"passed (\d+) input tokens",
    re.IGNORECASE,
)
_WINDOW = re.compile(
    r"tokens > (\d+) maximum|> (\d+), decrease|maximum context length is (\d+)|"
    r"available context size \((\d+) tokens\)|context length is only (\d+) tokens",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Overflow:
    prompt_tokens: int | None  # the upstream's count of the prompt it rejected, where it says
    window: int | None  # the window it enforces, where it says


def _first_number(pattern: re.Pattern[str], text: str) -> int | None:
    match = pattern.search(text)
    return int(next(g for g in match.groups() if g)) if match else None


def parse_overflow(status: int, body: bytes) -> Overflow | None:
    """The overflow an error response reports, or None if it is some other error."""
    if status not in OVERFLOW_STATUSES or len(body) > 64 * 1024:
        return None
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        payload = None
    error = payload.get("error", payload) if isinstance(payload, dict) else None
    fields: dict[str, Any] = error if isinstance(error, dict) else {}
    message = str(fields.get("message") or body.decode("utf-8", "replace"))
    code = str(fields.get("code") or "")
    kind = str(fields.get("type") or "")
    if not (
        code == "context_length_exceeded" or kind == "exceed_context_size_error" or _PHRASES.search(message)
    ):
        return None
    return Overflow(
        prompt_tokens=token_count(fields.get("n_prompt_tokens")) or _first_number(_PROMPT_COUNT, message),
        window=token_count(fields.get("n_ctx")) or _first_number(_WINDOW, message),
    )
