"""The seam between the pipeline and where a request goes: a `Way` says where it goes upstream
(`path`, `from_root`, `outgoing`), the bytes to send for a plan (`content`), and makes the client's
answer from the upstream's (`relay`). The pipeline sends and relays over a way without knowing which
it is.

Here are the two ways of the route's own API: `Direct` (a compacted request to its own server,
the original bytes when nothing changed) and `Passing` (any request sent as it came, answered as it
comes). A bridge to a server of another API (`proxy.bridges`) is a way too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import httpx
from starlette.responses import Response

from proxy.engine.chat import ChatPlan
from proxy.engine.jsonbody import dump_json
from proxy.formats import Conversation, WireFormat
from proxy.formats.reports import AnswerReport
from proxy.metrics import Metrics
from proxy.upstream.prompt_reports import Truncation
from proxy.upstream.streaming import (
    TAIL_BYTES,
    StreamedResponse,
    buffered_response,
    is_event_stream,
    read_raw,
)

Body = dict[str, Any]
Headers = list[tuple[bytes, bytes]]
# Where the prompt size the upstream reports goes (with the answer's last bytes, when it has them):
# it says whether the upstream cut the prompt.
Learn = Callable[[int | None, bytes], Truncation | None]
# Said on a whole answer when the upstream read less of the prompt than it was sent.
TRUNCATED_HEADER = "x-compaction-upstream-truncated"
# Set on a response whose body the proxy has read already (an overflow it could not retry).
READ = "compacting_proxy.read"


@dataclass(frozen=True, slots=True)
class Answer:
    """What relaying an answer needs: the plan's headers for the client, where the prompt size the
    server reports goes (`learn`), the metrics, and the client's format's event for a stream the
    server broke off."""

    headers: dict[str, str]
    learn: Learn
    metrics: Metrics
    stream_error: Callable[[str], bytes]

    def whole(self, reported: int | None, tail: bytes = b"") -> dict[str, str]:
        """The headers of a whole answer that reports `reported` prompt tokens: the plan's, and
        whether the server cut the prompt."""
        if self.learn(reported, tail):
            return {**self.headers, TRUNCATED_HEADER: "true"}
        return self.headers


class Way(Protocol):
    """One request's way upstream and its answer's way back."""

    @property
    def path(self) -> str:
        """Where the request goes."""
        ...

    @property
    def from_root(self) -> bool:
        """`path` is against the server's root (its base URL without `/v1`)."""
        ...

    @property
    def window(self) -> int | None:
        """The window the way runs the model at (Ollama's `num_ctx`); None: the server's own."""
        ...

    @property
    def retries(self) -> bool:
        """The server reports an overflow (retried once, harder); False: it cuts instead."""
        ...

    def outgoing(self, headers: Headers, query: bytes) -> tuple[Headers, bytes]:
        """The headers and query string for the server, from those the client's request would
        carry upstream."""
        ...

    def content(self, raw: bytes, body: Body, conversation: Conversation, plan: ChatPlan) -> bytes:
        """What to send for `plan` over the client's `body` (its bytes: `raw`)."""
        ...

    async def relay(self, response: httpx.Response, answer: Answer) -> Response:
        """The client's answer for the server's `response` (its body still unread, unless `READ`)."""
        ...


def read_already(response: httpx.Response, body: bytes) -> httpx.Response:
    """`response` again, with the body the proxy read of it, marked `READ`."""
    stream = httpx.ByteStream(body)
    return httpx.Response(
        response.status_code, headers=response.headers, stream=stream, extensions={READ: True}
    )


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
