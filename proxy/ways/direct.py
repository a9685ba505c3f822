"""`Direct`: a compacted request to its own route's server, and its answer back (the route's own
way; `proxy.ways.base` is the seam, `passing` and the bridges the other ways)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import httpx
from starlette.responses import Response

from proxy.bodies.jsonbody import dump_json
from proxy.engine.plan import ChatPlan
from proxy.formats import Conversation, WireFormat
from proxy.formats.reports import AnswerReport
from proxy.upstream.streaming import (
    TAIL_BYTES,
    StreamedResponse,
    buffered_response,
    is_event_stream,
    read_raw,
)
from proxy.ways.base import READ, Answer, Body, Headers


@dataclass(frozen=True, slots=True)
class Direct:
    """A compacted request to its own route's server: the original bytes when the plan changed
    nothing, else the body rewritten by its format; the answer streamed as it comes, or read whole
    (for the prompt size it reports) when it was not asked to stream."""

    format: WireFormat
    path: str
    from_root: bool
    streamed: bool
    report: AnswerReport | None = None  # what the answer must say the proxy did in the server's place
    window: ClassVar[None] = None
    retries: ClassVar[bool] = True

    def outgoing(self, headers: Headers, query: bytes) -> tuple[Headers, bytes]:
        return headers, query

    def content(self, raw: bytes, body: Body, conversation: Conversation, plan: ChatPlan) -> bytes:
        if not plan.result.changed and plan.max_tokens is None:
            return raw
        return dump_json(self.format.write(body, conversation, plan))

    async def relay(self, response: httpx.Response, answer: Answer) -> Response:
        read = bool(response.extensions.get(READ))
        if not read and (self.streamed or is_event_stream(response)):
            reported = self.format.reported_prompt_tokens

            def learn(tail: bytes) -> None:
                answer.learn(reported(tail), tail)

            return StreamedResponse(
                response,
                answer.headers,
                on_complete=learn,
                metrics=answer.metrics,
                stream_error=answer.stream_error,
                rewrite=self.report.into_stream if self.report else None,
            )
        body = await read_raw(response)
        headers = answer.headers
        if response.is_success and "content-encoding" not in response.headers:
            tail = body[-TAIL_BYTES:]
            headers = answer.whole(self.format.reported_prompt_tokens(tail), tail)
            if self.report:
                body = self.report.into_body(body)
        return buffered_response(response, body, headers)
