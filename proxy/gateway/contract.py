"""Headroom's `/v1/compress` contract, as its callers speak it (read from headroom-ai 0.42's
`handle_compress`, its TypeScript client 0.37 and LiteLLM 1.108.7's `headroom` guardrail).

The request is `{"messages": [...], "model": "..."}`; Headroom's client adds `token_budget` (the
context limit to fit) and a `config` object. The proxy also reads `window` (the same as
`token_budget`), `target` (the most tokens the returned messages may count), `format` (`chat` or
`messages`; else told from the messages, as Headroom's client does), Anthropic's `system` and
`tools` (counted, never returned), and `dropped`: what becomes of the messages compaction drops
(`stub`, the default: one stub in each one's row, as LiteLLM's guardrail needs; `merge`: one marker
for each dropped run; `remove`: nothing), also asked by the header `x-compaction-dropped` or the
path `/<dropped>/v1/compress` for callers that can set only a URL or headers. The answer is
`{messages, tokens_before, tokens_after, tokens_saved, compression_ratio, transforms_applied,
ccr_hashes}`, with `compression_skipped` and `skip_reason` when the messages come back as they came.
Errors are Headroom's `{"error": {"type", "message"}}` (with OpenAI's `param` and `code` beside them).

Pure: dicts in, dicts out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from proxy.errors import ProxyError

Body = dict[str, Any]
BYPASS_HEADER = b"x-headroom-bypass"  # "true": the messages come back untouched (Headroom's)
AUDIT_HEADER = b"x-compaction-audit"  # "true": untouched, with what would have been cut
DROPPED_HEADER = b"x-compaction-dropped"  # stub, merge or remove: what becomes of dropped messages
STUB, MERGE, REMOVE = "stub", "merge", "remove"
DROPPED_MODES = (STUB, MERGE, REMOVE)
CHAT, ANTHROPIC = "chat", "messages"
FORMAT_NAMES = {"chat": CHAT, "openai": CHAT, "messages": ANTHROPIC, "anthropic": ANTHROPIC}
ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "server_tool_use", "mcp_tool_use", "thinking"})


@dataclass(frozen=True, slots=True)
class CompressRequest:
    """One `/v1/compress` call, read: the caller's messages in their own format, and the window
    they must fit (None: the model's, from the proxy's settings or its upstream)."""

    messages: list[Any]
    model: str
    format: str
    window: int | None = None
    target: int | None = None
    extra: Body | None = None  # what else a format counts (Anthropic's `system`, `tools`)
    dropped: str = STUB  # what becomes of the dropped messages: a stub each, a marker a run, nothing

    def body(self) -> Body:
        """The request the format's adapter reads (a chat request of these messages)."""
        return {**(self.extra or {}), "model": self.model, "messages": self.messages}


def read_request(body: Body, asked: str | None = None) -> CompressRequest:
    """The call, checked: a 400 in the contract's words for what cannot be compressed. `asked`: what
    the header or the path asks for the dropped messages, which the body's `dropped` overrides."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ProxyError(400, "Missing required field: messages (an array).", param="messages")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ProxyError(400, "'model' must be a string.", param="model")
    named = body.get("format")
    if named is not None and FORMAT_NAMES.get(str(named)) is None:
        raise ProxyError(400, "'format' must be 'chat' or 'messages'.", param="format")
    fmt = FORMAT_NAMES[str(named)] if named is not None else detect_format(messages)
    window = _tokens(body, "window") or _tokens(body, "token_budget")
    extra: Body = {key: body[key] for key in ("system", "tools") if key in body}
    dropped = body.get("dropped", asked or STUB)
    if dropped not in DROPPED_MODES:
        raise ProxyError(400, "'dropped' must be 'stub', 'merge' or 'remove'.", param="dropped")
    target = _tokens(body, "target")
    return CompressRequest(messages, model or "", fmt, window, target, extra or None, dropped)


def _tokens(body: Body, field: str) -> int | None:
    value = body.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ProxyError(400, f"'{field}' must be a positive number of tokens.", param=field)
    return value


def detect_format(messages: list[Any]) -> str:
    """Anthropic's when a message holds its blocks (`tool_use`, `tool_result`, an image with a
    `source`), else Chat Completions (Headroom's client decides the same way)."""
    for message in messages:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "tool" or message.get("tool_calls"):
            return CHAT
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                kind = part.get("type") if isinstance(part, dict) else None
                if kind in ANTHROPIC_BLOCKS or (kind == "image" and isinstance(part.get("source"), dict)):
                    return ANTHROPIC
    return CHAT


def answer(
    messages: list[Any],
    before: int,
    after: int,
    *,
    transforms: list[str] | None = None,
    hashes: list[str] | None = None,
    skipped: str | None = None,
) -> Body:
    """The contract's answer: the messages and the figures Headroom's callers read."""
    out: Body = {
        "messages": messages,
        "tokens_before": before,
        "tokens_after": after,
        "tokens_saved": max(0, before - after),
        "compression_ratio": round(after / before, 4) if before > 0 else 1.0,
        "transforms_applied": transforms or [],
        "ccr_hashes": hashes or [],
    }
    if skipped is not None:
        out["compression_skipped"] = True
        out["skip_reason"] = skipped
    return out


def contract_error(status: int, message: str, type: str, code: str | None, param: str | None) -> bytes:
    """Headroom's error shape (`error.type`, `error.message`, which its client reads), with the
    OpenAI fields the proxy's other errors carry."""
    kind = "invalid_request" if status < 500 else "compression_error"
    return orjson.dumps({"error": {"type": kind, "message": message, "param": param, "code": code}})
