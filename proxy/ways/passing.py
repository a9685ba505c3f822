"""`Passing`: any request sent as it came (a route the proxy does not compact, or a history the
server keeps itself), its answer passed on as it comes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import httpx
from starlette.responses import Response

from proxy.engine.plan import ChatPlan
from proxy.formats import Conversation
from proxy.upstream.streaming import StreamedResponse
from proxy.ways.base import Answer, Body, Headers


@dataclass(frozen=True, slots=True)
class Passing:
    """A request sent as it came (any other route, or a history the server keeps itself), its answer
    passed on as it comes."""

    path: str
    from_root: bool
    window: ClassVar[None] = None
    retries: ClassVar[bool] = False

    def outgoing(self, headers: Headers, query: bytes) -> tuple[Headers, bytes]:
        return headers, query

    def content(self, raw: bytes, body: Body, conversation: Conversation, plan: ChatPlan) -> bytes:
        return raw

    async def relay(self, response: httpx.Response, answer: Answer) -> Response:
        return StreamedResponse(response, metrics=answer.metrics, stream_error=answer.stream_error)
