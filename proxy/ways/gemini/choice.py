"""The Gemini bridge registered for what it carries: a Gemini API request goes to the upstream's Chat
Completions when the upstream does not speak the Gemini API (`COMPACT_GEMINI_UPSTREAM`), and on to
Ollama's native API, its window set, when the upstream is Ollama and that API carries it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from proxy.formats import GEMINI, GEMINI_STREAM, Conversation, WireFormat
from proxy.settings import Settings
from proxy.ways.base import Body, Way
from proxy.ways.gemini.bridge import GeminiChatBridge
from proxy.ways.gemini.over_ollama import GeminiOverOllama, carried
from proxy.ways.ollama.bridge import OllamaBridge

RawHeaders = Sequence[tuple[bytes, bytes]]
GOOGLE_HOSTS = ("generativelanguage.googleapis.com", "aiplatform.googleapis.com")


class OllamaWindows(Protocol):
    async def native_window(self, model: str, headers: RawHeaders = ()) -> int | None: ...


@dataclass(frozen=True, slots=True)
class GeminiOnChat:
    """A `proxy.ways.choice.Bridge`: Gemini API requests to a Chat Completions server (`native`: the
    upstream speaks the Gemini API, and takes them as they are), for `model` when one is set
    (`COMPACT_GEMINI_MODEL`: the request is planned and sent for it, whatever its path names)."""

    ollama: OllamaWindows
    native: bool
    model: str | None = None
    formats: ClassVar[tuple[WireFormat, ...]] = (GEMINI, GEMINI_STREAM)

    @classmethod
    def from_settings(cls, settings: Settings, ollama: OllamaWindows) -> GeminiOnChat:
        return cls(ollama, gemini_native(settings), settings.gemini_model)

    async def way(
        self, wire: WireFormat, body: Body, conversation: Conversation, credentials: RawHeaders
    ) -> Way | None:
        if self.native:
            return None
        if self.model:
            conversation.request["model"] = self.model
        streamed = wire.streamed(body)
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
