"""The wire formats the proxy compacts, one adapter module each, and the one table that routes
them (`routes.py`). Adding a format: a module implementing `WireFormat` (see `base.py`) and one
`Route` in that table.
"""

from __future__ import annotations

import urllib.parse

from proxy.counting.estimator import estimate_text_tokens
from proxy.counting.tokens import json_text
from proxy.engine.chat import Body
from proxy.formats.anthropic_context_edits import apply_context_edits
from proxy.formats.base import Conversation, WireFormat, str_field
from proxy.formats.responses import SERVER_COMPACTION
from proxy.formats.routes import (
    ANTHROPIC,
    AZURE,
    CHAT,
    OLLAMA,
    PASSTHROUGHS,
    RESPONSES,
    ROUTES,
    Passthrough,
    Route,
    RouteTable,
)

__all__ = [
    "ANTHROPIC",
    "AZURE",
    "CHAT",
    "FORMATS",
    "OLLAMA",
    "PASSTHROUGHS",
    "RESPONSES",
    "ROUTES",
    "Conversation",
    "Passthrough",
    "Route",
    "RouteTable",
    "WireFormat",
    "client_field",
    "context_edits",
    "format_for_path",
    "match_route",
    "server_manages_context",
]

FORMATS: dict[str, WireFormat] = {f.name: f for f in (CHAT, AZURE, OLLAMA, RESPONSES, ANTHROPIC)}
_TABLE = RouteTable()


def match_route(path: str) -> tuple[Route, dict[str, str]] | None:
    """The compacted route `path` is, in the proxy's own table, with its path parameters."""
    return _TABLE.match(path)


def format_for_path(path: str) -> WireFormat:
    """The format a request to `path` speaks in the proxy's own table (see `RouteTable.for_path`)."""
    return _TABLE.for_path(path).format


# Where each format keeps what lives outside its list of messages (neutral messages with no source).
_OUTSIDE_FIELDS = {"messages": "system", "responses": "instructions"}
_LIST_FIELDS = {"messages": "messages", "responses": "input"}


def client_field(wire: WireFormat, body: Body, conversation: Conversation, index: int) -> str:
    """The client's own name for neutral message `index`: `system` or `instructions` for what lives
    outside the list, else `messages[i]` / `input[i]` in the client's own indexing."""
    sources = conversation.sources
    if not sources or index >= len(sources):  # Chat Completions and Ollama: the list is the messages
        return f"messages[{index}]"
    parts = sources[index]
    if not parts:
        return _OUTSIDE_FIELDS.get(wire.name, "messages")
    name = _LIST_FIELDS.get(wire.name, "messages")
    if wire.name == "responses" and isinstance(body.get("input"), str):
        return "input"
    return f"{name}[{parts[0].item}]"


def server_manages_context(wire: WireFormat, body: Body, *, upstream_url: str, upstream_kind: str) -> bool:
    """Whether `body` asks for server-side context management that this upstream really implements:
    Anthropic's `context_management` on Anthropic's own API (or `COMPACT_UPSTREAM_KIND=anthropic`),
    the Responses API's `context_management` and `compaction` items on OpenAI's own API. Local
    servers that speak these formats (llama.cpp, vLLM, Ollama, LiteLLM) ignore the field, so for
    them the proxy compacts."""
    host = (urllib.parse.urlsplit(upstream_url).hostname or "").lower()
    if wire.name == "messages":
        asks = body.get("context_management") is not None
        return asks and (upstream_kind == "anthropic" or host == "api.anthropic.com")
    if wire.name == "responses":
        items = body.get("input")
        asks = body.get("context_management") is not None or (
            isinstance(items, list)
            and any(isinstance(i, dict) and str_field(i.get("type")) in SERVER_COMPACTION for i in items)
        )
        return asks and host == "api.openai.com"
    return False


def context_edits(wire: WireFormat, body: Body) -> Body:
    """`body` with the context edits it asks for that the proxy applies itself, for a server that
    does not (Anthropic's `clear_thinking` and `clear_tool_uses`); `body` itself when none applies."""
    if wire.name != "messages" or body.get("context_management") is None:
        return body
    return apply_context_edits(body, _prompt_estimate)


def _prompt_estimate(body: Body) -> int:
    return estimate_text_tokens(json_text({k: body.get(k) for k in ("system", "messages", "tools")}))
