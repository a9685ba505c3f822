"""The wire formats the proxy compacts, one adapter module each, and the one table that routes
them. Adding a format: a module implementing `WireFormat` (see `base.py`) and one `Route` below.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from starlette.routing import compile_path

from proxy.chat import Body
from proxy.estimator import estimate_text_tokens
from proxy.formats.anthropic import AnthropicMessages, apply_context_edits
from proxy.formats.base import Conversation, WireFormat, str_field
from proxy.formats.chat import ChatCompletions
from proxy.formats.ollama import OllamaChat
from proxy.formats.responses import SERVER_COMPACTION, Responses
from proxy.tokens import json_text

__all__ = [
    "FORMATS",
    "ROUTES",
    "Conversation",
    "Route",
    "WireFormat",
    "client_field",
    "context_edits",
    "format_for_path",
    "match_route",
    "server_manages_context",
]

CHAT = ChatCompletions()
AZURE = ChatCompletions(model_param="deployment", name="azure")
OLLAMA = OllamaChat()
RESPONSES = Responses()
ANTHROPIC = AnthropicMessages()


@dataclass(frozen=True, slots=True)
class Route:
    """A compacted route: the proxy's path (FastAPI syntax), its format, and where it goes upstream:
    `upstream` relative to the upstream's base URL, or the client's own path when None; `from_root`
    against the server's root (the base without `/v1`) instead."""

    path: str
    format: WireFormat
    upstream: str | None
    from_root: bool = False


ROUTES: tuple[Route, ...] = (
    Route("/v1/chat/completions", CHAT, "/chat/completions"),
    Route("/v1/responses", RESPONSES, "/responses"),
    Route("/v1/messages", ANTHROPIC, "/messages"),
    Route("/api/chat", OLLAMA, "/api/chat", from_root=True),
    Route("/openai/deployments/{deployment}/chat/completions", AZURE, None, from_root=True),
    Route("/deployments/{deployment}/chat/completions", AZURE, None),
)
FORMATS: dict[str, WireFormat] = {f.name: f for f in (CHAT, AZURE, OLLAMA, RESPONSES, ANTHROPIC)}


_PATTERNS: tuple[tuple[re.Pattern[str], Route], ...] = tuple((compile_path(r.path)[0], r) for r in ROUTES)


def match_route(path: str) -> tuple[Route, dict[str, str]] | None:
    """The compacted route `path` is, with its path parameters."""
    for pattern, route in _PATTERNS:
        if match := pattern.fullmatch(path):
            return route, match.groupdict()
    return None


def format_for_path(path: str) -> WireFormat:
    """The format a request to `path` speaks, compacted or not: whose error shape it expects
    (Anthropic's under `/v1/messages`) and whose server reads its key (Azure's `api-key`)."""
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return ANTHROPIC
    if path.startswith("/api/"):
        return OLLAMA  # Ollama's clients read `{"error": "..."}`
    return AZURE if path.startswith(("/openai/", "/deployments/")) else CHAT


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
