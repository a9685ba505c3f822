"""Which way a compacted request takes upstream: a bridge registered for its format, when the bridge
takes it, else its route's own (`proxy.ways.base` is the seam).

A bridge is registered by the formats whose requests it carries to a server of another API (the
Ollama bridge: OpenAI chats; the Gemini bridge: Gemini API requests); the app wires the bridges once
(`proxy.server.parts`). Nothing here names a bridge or a format.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from proxy.formats import Conversation, FormatRoute, WireFormat
from proxy.ways.base import Body, Way

RawHeaders = Sequence[tuple[bytes, bytes]]


class Bridge(Protocol):
    """A way to a server of another API, for requests in the formats it names."""

    @property
    def formats(self) -> tuple[WireFormat, ...]:
        """The formats whose requests it may carry."""
        ...

    async def way(
        self, wire: WireFormat, body: Body, conversation: Conversation, credentials: RawHeaders
    ) -> Way | None:
        """Its way for this request (in format `wire`), or None: this upstream speaks the request's
        own API, or the bridge cannot carry this request faithfully."""
        ...


class Bridges:
    """The bridges, by the formats they carry: chooses a request's way, once."""

    def __init__(self, bridges: Iterable[Bridge]) -> None:
        self._by_format = {wire: bridge for bridge in bridges for wire in bridge.formats}

    async def choose(
        self, route: FormatRoute, body: Body, conversation: Conversation, credentials: RawHeaders, own: Way
    ) -> Way:
        """The way of the bridge registered for the route's format, if it takes the request, else the
        route's `own` way."""
        bridge = self._by_format.get(route.format)
        if bridge is None:
            return own
        return await bridge.way(route.format, body, conversation, credentials) or own
