"""What the upstream's answer says it read: the prompt tokens it counted (the format's own reader,
`WireFormat.reported_prompt_tokens`) and those it served from its prompt cache, read here from the
tail of the answer: OpenAI's `prompt_tokens_details.cached_tokens` (Chat Completions) and
`input_tokens_details.cached_tokens` (Responses), Anthropic's `cache_read_input_tokens`, llama.cpp's
`timings.cache_n`, the last one in the tail (a stream's final usage)."""

from __future__ import annotations

import re

_CACHED = re.compile(rb'"(?:cached_tokens|cache_read_input_tokens|cache_n)"\s*:\s*(\d{1,12})')


def cached_tokens(tail: bytes) -> int | None:
    """The prompt tokens the upstream served from its cache, if its answer says."""
    found = _CACHED.findall(tail)
    return int(found[-1]) if found else None
