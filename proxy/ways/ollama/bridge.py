"""An OpenAI chat on Ollama's native `/api/chat`: `OllamaBridge` (a `proxy.ways.base.Way`),
how one request goes there (its window, streamed or not). The request's translation is
`native_request`, the answer's `openai_answer`; `relay` carries the answer back over the wire.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import httpx
import orjson
from starlette.responses import Response

from proxy.engine.plan import ChatPlan
from proxy.formats import Conversation
from proxy.ways.base import Answer, Headers
from proxy.ways.ollama.native_request import Body, to_ollama_chat
from proxy.ways.ollama.relay import relay_from_ollama


@dataclass(frozen=True, slots=True)
class OllamaBridge:
    """How one OpenAI chat goes to Ollama's native API: with this window, streamed or not."""

    num_ctx: int
    stream: bool = False
    include_usage: bool = False
    path: ClassVar[str] = "/api/chat"
    from_root: ClassVar[bool] = True
    retries: ClassVar[bool] = False  # Ollama cuts a prompt past num_ctx instead of refusing it

    @classmethod
    def for_request(cls, body: Body, num_ctx: int) -> OllamaBridge:
        options = body.get("stream_options")
        usage_asked = isinstance(options, dict) and options.get("include_usage") is True
        return cls(num_ctx, stream=body.get("stream") is True, include_usage=usage_asked)

    def request_bytes(self, body: Body, num_predict: int | None = None) -> bytes:
        """The native request for `body` (already compacted). It was checked translatable before."""
        native = to_ollama_chat(body, num_ctx=self.num_ctx, num_predict=num_predict)
        if native is None:
            raise ValueError("compaction made the request untranslatable")  # it only shortens strings
        return orjson.dumps(native)

    @property
    def window(self) -> int:
        return self.num_ctx

    def outgoing(self, headers: Headers, query: bytes) -> tuple[Headers, bytes]:
        return headers, query

    def content(self, raw: bytes, body: Body, conversation: Conversation, plan: ChatPlan) -> bytes:
        return self.request_bytes({**body, "messages": plan.result.messages}, plan.max_tokens)

    async def relay(self, response: httpx.Response, answer: Answer) -> Response:
        return await relay_from_ollama(response, answer, stream=self.stream, include_usage=self.include_usage)
