"""The Ollama bridge registered for what it carries: an OpenAI chat goes to Ollama's native API,
with its window set, when the upstream is Ollama and the native API carries the request faithfully
(`detection` knows both)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from proxy.formats import CHAT, Conversation, WireFormat
from proxy.ways.ollama.bridge import OllamaBridge
from proxy.ways.ollama.detection import OllamaUpstream
from proxy.ways.ollama.native_request import Body


@dataclass(frozen=True, slots=True)
class OllamaNative:
    """A `proxy.ways.choice.Bridge`: OpenAI chats to Ollama's `/api/chat`."""

    ollama: OllamaUpstream
    formats: ClassVar[tuple[WireFormat, ...]] = (CHAT,)

    async def way(
        self,
        wire: WireFormat,
        body: Body,
        conversation: Conversation,
        credentials: Sequence[tuple[bytes, bytes]],
    ) -> OllamaBridge | None:
        return await self.ollama.bridge(body, credentials)
