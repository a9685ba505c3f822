"""The wire formats the proxy compacts, one adapter module each, and the one table that routes
them. Adding a format: a module implementing `WireFormat` (see `base.py`) and one `Route` below.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from starlette.routing import compile_path

from proxy.formats.anthropic import AnthropicMessages
from proxy.formats.base import Conversation, WireFormat
from proxy.formats.chat import ChatCompletions
from proxy.formats.ollama import OllamaChat
from proxy.formats.responses import Responses

__all__ = ["FORMATS", "ROUTES", "Conversation", "Route", "WireFormat", "format_for_path", "match_route"]

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
