"""The wire formats the proxy compacts, one adapter module each, and the one table that routes
them (`routes.py`). Adding a format: a module implementing `WireFormat` (see `base.py`) and one
`FormatRoute` in that table.
"""

from __future__ import annotations

from proxy.formats.base import Conversation, WireFormat
from proxy.formats.routes import (
    ANTHROPIC,
    AZURE,
    CHAT,
    GEMINI,
    GEMINI_STREAM,
    OLLAMA,
    PASSTHROUGHS,
    RESPONSES,
    ROUTES,
    FormatRoute,
    Passthrough,
    RouteTable,
)

__all__ = [
    "ANTHROPIC",
    "AZURE",
    "CHAT",
    "GEMINI",
    "GEMINI_STREAM",
    "OLLAMA",
    "PASSTHROUGHS",
    "RESPONSES",
    "ROUTES",
    "Conversation",
    "FormatRoute",
    "Passthrough",
    "RouteTable",
    "WireFormat",
]
