"""Requests sized by their real token count (issue 24, item 1): a system prompt and a pasted text of
a kind (`tests.support.kinds`) that is a given share of an 8,192-token window by the heaviest of the
vocabularies the estimate's margin is fitted on (cl100k_base, o200k_base, Qwen2.5, Llama 3).

The ruler, as in `benchmarks/counting/bench_margin.py`: the heaviest real count, the template's markers added.
Needs the `tokenizers` extra (a test using it is skipped without).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from proxy.counting.modes import HEAVIEST_OF
from proxy.counting.tokenizers import load_text_counter
from proxy.counting.tokens import MESSAGE_OVERHEAD, REPLY_PRIMER, text_of
from tests.support.kinds import text_of_kind

WINDOW = 8192
RESERVE = 1024  # the reply's room a request must leave to count as one that fits


def heaviest() -> Callable[[str], int]:
    try:
        counters = [load_text_counter(spec) for spec in HEAVIEST_OF]
    except RuntimeError:
        pytest.skip("the real tokenizers are not installed (the tokenizers extra)")
    return lambda text: max(count(text) for count in counters)


def lightest_size(messages: list[dict[str, Any]]) -> int:
    """The lightest real count of the messages (the least any of the four vocabularies spends on the
    whole request), with the template's markers."""
    return min(
        sum(load_text_counter(spec)(text_of(m.get("content"))) + MESSAGE_OVERHEAD for m in messages)
        + REPLY_PRIMER
        for spec in HEAVIEST_OF
    )


def real_size(messages: list[dict[str, Any]]) -> int:
    count = heaviest()
    return sum(count(text_of(m.get("content"))) + MESSAGE_OVERHEAD for m in messages) + REPLY_PRIMER


def paste_chat(kind: str, chars: int, *, history: bool, seed: int = 1) -> list[dict[str, Any]]:
    """A system prompt and `chars` of `kind` pasted by the user; with `history`, after a file read
    (6,000 characters of the kind) and a few words of each side."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    if history:
        call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        messages += [
            {"role": "user", "content": "Read the file."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": text_of_kind(kind, 6000, seed + 7)},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "Thanks. One more thing."},
            {"role": "assistant", "content": "Sure, go ahead."},
        ]
    messages.append({"role": "user", "content": "Look at this:\n" + text_of_kind(kind, chars, seed)})
    return messages


def paste(kind: str, fraction: float, seed: int = 1) -> list[dict[str, Any]]:
    """A system prompt and a pasted text of `kind` whose real size is about `fraction` of the window."""
    sample = text_of_kind(kind, 20_000, seed)
    per_char = heaviest()(sample) / len(sample)
    head: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    rest = real_size([*head, {"role": "user", "content": "Look at this:\n"}])
    chars = int((fraction * WINDOW - rest) / per_char)
    return [*head, {"role": "user", "content": "Look at this:\n" + text_of_kind(kind, chars, seed)}]
