"""A Gemini API request on a Chat Completions server: `GeminiChatBridge` (a
`proxy.ways.base.Way`), how one request goes there. The request's translation is
`chat_request`, the answer's `gemini_answer`; `relay` carries the answer back over the wire.

The request goes to the upstream's `/chat/completions` (its base URL, as a direct chat does),
without the client's query (`alt=sse`, a `key=`), its key as a bearer token: a configured upstream
key, else the one the client sent in `x-goog-api-key` or `?key=`.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import ClassVar

import httpx
import orjson
from starlette.responses import Response

from proxy.engine.plan import ChatPlan
from proxy.formats import Conversation
from proxy.ways.base import Answer, Body, Headers
from proxy.ways.gemini.chat_request import chat_request
from proxy.ways.gemini.relay import relay_from_chat

GOOGLE_KEY = b"x-goog-api-key"


@dataclass(frozen=True, slots=True)
class GeminiChatBridge:
    """How one Gemini API request goes to a Chat Completions server: streamed or not."""

    streamed: bool
    path: ClassVar[str] = "/chat/completions"
    from_root: ClassVar[bool] = False
    window: ClassVar[None] = None  # the server's own
    retries: ClassVar[bool] = True  # an overflow it reports is retried, harder, like a direct chat's

    def outgoing(self, headers: Headers, query: bytes) -> tuple[Headers, bytes]:
        """No query (`alt=sse` and `key=` are the Gemini API's), and the Gemini key as the chat
        server's bearer token, unless the request carries one already."""
        keys = urllib.parse.parse_qs(query.decode("latin-1")).get("key")
        key = next((v for k, v in headers if k.lower() == GOOGLE_KEY), None)
        key = key or (keys[-1].encode("latin-1") if keys else None)
        out = [(k, v) for k, v in headers if k.lower() != GOOGLE_KEY]
        if key and not any(k.lower() == b"authorization" for k, _ in out):
            out.append((b"authorization", b"Bearer " + key))
        return out, b""

    def content(self, raw: bytes, body: Body, conversation: Conversation, plan: ChatPlan) -> bytes:
        return orjson.dumps(chat_request(body, conversation, plan, stream=self.streamed))

    async def relay(self, response: httpx.Response, answer: Answer) -> Response:
        return await relay_from_chat(response, self.streamed, answer)
