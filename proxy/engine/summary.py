"""Level 3, the pure part: what a summary of dropped exchanges is asked to keep, how a run of dropped
messages is cut into chunks a summariser can take, and the cache keys that make summaries reusable.

A dropped run is summarised chunk by chunk, each call given the summary so far, so a run of any size
fits a small summariser. Chunks are cut greedily from the start of the run and every key chains the
hashes of all the messages before it, so when the run grows on a later turn, the summaries of its
earlier chunks are found in the cache and only the new part costs a call.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.counting.tokens import fragment_text, json_text, text_of
from proxy.engine.notes import is_dropped_marker

SUMMARY_PREFIX = "[Summary of earlier conversation, written to save context:"
PROMPT_VERSION = "v1"
CHUNK_CHARS = 24_000  # about 6,000 tokens of transcript per summariser call
RESULT_CHARS = 4_000  # a single tool result is cut to this in a transcript

INSTRUCTIONS = """You compress the earlier part of a conversation between a user and an assistant so \
that the assistant can continue it without the original messages. Write a compact summary as terse \
bullet points. You MUST keep, exactly as written: every identifier (order numbers, part numbers, \
SKUs, ticket and invoice ids, account names, file paths, URLs), every number, amount, price and \
date, every decision already made, every promise or open task, and what the user asked for and \
prefers. Keep tool results only as the facts they established. Do not add anything that is not in \
the conversation. No preamble."""


@dataclass(frozen=True, slots=True)
class Chunk:
    key: str  # names the summary of the run up to and including this chunk
    transcript: str


def message_hash(message: dict[str, Any]) -> bytes:
    try:
        encoded = orjson.dumps(message, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # integers beyond 64 bits, nesting past orjson's 255 levels, lone surrogates
        encoded = json.dumps(message, sort_keys=True, separators=(",", ":"), default=fragment_text).encode()
    return hashlib.sha256(encoded).digest()


def _call_text(call: dict[str, Any]) -> str:
    function = call.get("function")
    if not isinstance(function, dict):  # a client's odd shape is shown, not trusted
        return json_text(function)
    return f"{function.get('name')}({function.get('arguments')})"


def render(message: dict[str, Any]) -> str:
    """One message as a transcript line for the summariser."""
    role = str(message.get("role"))
    text = text_of(message.get("content"))
    if role in ("tool", "function"):
        name = message.get("name") or message.get("tool_call_id") or "tool"
        cut = text if len(text) <= RESULT_CHARS else text[:RESULT_CHARS] + f"… [{len(text):,} chars in all]"
        return f"tool result ({name}): {cut}"
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        rendered = ", ".join(_call_text(c) for c in calls if isinstance(c, dict))
        return f"{role}: {text} [called {rendered}]".replace(":  [", ": [")
    return f"{role}: {text}" if text else f"{role}: {json_text(message.get('content'))}"


def chunks(run: Sequence[dict[str, Any]], *, model: str, chunk_chars: int = CHUNK_CHARS) -> list[Chunk]:
    """The run cut greedily into transcripts of at most `chunk_chars` (a longer message is its own chunk)."""
    out: list[Chunk] = []
    chain = hashlib.sha256(f"{PROMPT_VERSION}\0{model}".encode()).digest()
    lines: list[str] = []
    size = 0
    for message in run:
        if is_dropped_marker(message):
            continue
        line = render(message)
        if lines and size + len(line) > chunk_chars:
            out.append(Chunk(chain.hex(), "\n".join(lines)))
            lines, size = [], 0
        chain = hashlib.sha256(chain + message_hash(message)).digest()
        lines.append(line)
        size += len(line) + 1
    if lines:
        out.append(Chunk(chain.hex(), "\n".join(lines)))
    return out


def summary_request(transcript: str, previous: str | None, *, model: str, max_tokens: int) -> dict[str, Any]:
    """The chat request that asks a model for the summary of `transcript`, continuing `previous`."""
    task = f"Summary so far:\n{previous}\n\nContinue it with this later part:\n" if previous else ""
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": f"{task}<conversation>\n{transcript}\n</conversation>"},
        ],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": False,
    }


def summary_message(summary: str, count: int) -> dict[str, Any]:
    return {"role": "assistant", "content": f"{SUMMARY_PREFIX} {count} messages]\n{summary.strip()}"}
