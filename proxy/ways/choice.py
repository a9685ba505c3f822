"""Which way a compacted request takes upstream: a bridge, chosen once per request from its route's
`bridge` name and what the upstream is, or its route's own (`proxy.ways.base` is the seam)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from proxy.formats import Conversation, FormatRoute
from proxy.settings import Settings
from proxy.ways.base import Body, Way
from proxy.ways.gemini.bridge import GeminiChatBridge
from proxy.ways.gemini.over_ollama import GeminiOverOllama, carried
from proxy.ways.ollama.bridge import OllamaBridge

RawHeaders = Sequence[tuple[bytes, bytes]]
GOOGLE_HOSTS = ("generativelanguage.googleapis.com", "aiplatform.googleapis.com")


class OllamaChooser(Protocol):
    async def bridge(self, body: dict[str, object], headers: RawHeaders = ()) -> Way | None: ...

    async def native_window(self, model: str, headers: RawHeaders = ()) -> int | None: ...


class Bridges:
    """Chooses a request's way, once, from its route's `bridge` name and the upstream."""

    def __init__(self, settings: Settings, ollama: OllamaChooser) -> None:
        self.ollama = ollama
        self.gemini_native = gemini_native(settings)

    async def choose(
        self, route: FormatRoute, body: Body, conversation: Conversation, credentials: RawHeaders, own: Way
    ) -> Way:
        """The bridge the route names, if it applies, else the route's `own` way."""
        return await self.bridge(route, body, conversation, credentials) or own

    async def bridge(
        self, route: FormatRoute, body: Body, conversation: Conversation, credentials: RawHeaders
    ) -> Way | None:
        """`ollama`: an OpenAI chat to Ollama's native API. `gemini`: a Gemini API request to the
        upstream's Chat Completions, or for Ollama to its native API (its window set)."""
        if route.bridge == "ollama":
            return await self.ollama.bridge(body, credentials)
        if route.bridge != "gemini" or self.gemini_native:
            return None
        streamed = route.format.streamed(body)
        gemini = GeminiChatBridge(streamed=streamed)
        model = str(conversation.request.get("model") or "")
        num_ctx = await self.ollama.native_window(model, credentials)
        if num_ctx is None or not carried(body, conversation, streamed=streamed):
            return gemini
        return GeminiOverOllama(gemini, OllamaBridge(num_ctx, stream=streamed, include_usage=True))


def gemini_native(settings: Settings) -> bool:
    """Whether Gemini API requests go to the upstream as they are (`COMPACT_GEMINI_UPSTREAM`; by
    default only Google's own API speaks it), else over its Chat Completions."""
    if settings.gemini_upstream != "auto":
        return settings.gemini_upstream == "native"
    return settings.upstream_host.endswith(GOOGLE_HOSTS)
