"""Relaying Ollama's native chat answer to an OpenAI client: a Chat Completions object, or its NDJSON
stream re-framed as SSE chunk by chunk as it arrives (the translation is `proxy.ways.ollama.openai_answer`).

The prompt size the answer reports goes to `learn`, which says whether the upstream cut the prompt;
a non-streamed answer then carries `x-compaction-upstream-truncated` (a stream's headers are gone).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Protocol

import httpx
import orjson
from starlette.responses import Response

from proxy.errors import openai_error_body
from proxy.metrics import Metrics
from proxy.upstream.forwarding import MAX_ANSWER_BYTES, decoded_lines, map_transport_errors, read_decoded
from proxy.upstream.streaming import UpstreamStream
from proxy.ways.base import Answer, Learn
from proxy.ways.ollama.openai_answer import (
    SseTranslator,
    chat_completion,
    completion_id,
    error_from_ollama,
)

log = logging.getLogger("proxy.ollama")

MAX_LINE_BYTES = 16 * 1024 * 1024  # one NDJSON event: a chunk of a reply, never megabytes


async def relay_from_ollama(
    response: httpx.Response, relay: Answer, *, stream: bool, include_usage: bool
) -> Response:
    """The OpenAI client's answer for Ollama's `response` (its body still unread): streamed as the
    client asked, with the usage chunk where it asked for one."""
    headers = relay.headers
    if stream and response.is_success:
        translator = SseTranslator(completion_id(), include_usage)
        return SseResponse(response, translator, relay)
    try:
        with map_transport_errors():
            content = await read_decoded(response, MAX_ANSWER_BYTES)
    except ValueError as exc:  # too large, or a coding the proxy cannot undo
        log.warning("Ollama's answer could not be read: %s", exc)
        body = openai_error_body(
            "The upstream's answer could not be read.", type="upstream_error", code="bad_upstream_answer"
        )
        return Response(body, status_code=502, media_type="application/json", headers=headers)
    if not response.is_success:
        return Response(
            error_from_ollama(response.status_code, content),
            status_code=response.status_code,
            media_type="application/json",
            headers=headers,
        )
    try:
        answer = orjson.loads(content)
    except orjson.JSONDecodeError:
        answer = None
    if not isinstance(answer, dict):
        body = openai_error_body(
            "The upstream's answer is not JSON.", type="upstream_error", code="bad_upstream_answer"
        )
        return Response(body, status_code=502, media_type="application/json", headers=headers)
    headers = relay.whole(answer.get("prompt_eval_count"))
    return Response(
        orjson.dumps(chat_completion(answer, completion_id())), media_type="application/json", headers=headers
    )


class Lines(Protocol):
    """A stream's translator: the SSE bytes for each NDJSON line, whether the answer is done, and the
    prompt size it reported (`SseTranslator`; the Gemini bridge's over Ollama)."""

    @property
    def done(self) -> bool: ...

    @property
    def prompt_eval_count(self) -> int | None: ...

    def line(self, line: bytes) -> bytes: ...


class SseResponse(UpstreamStream):
    """Ollama's NDJSON lines, translated to SSE events as they arrive; the upstream response is closed
    when the client has it all, goes away, or the upstream fails."""

    def __init__(
        self,
        response: httpx.Response,
        translator: Lines,
        answer: Answer,
    ) -> None:
        self.stream_error = answer.stream_error  # the client's own event
        super().__init__(
            self._events(response, translator, answer.learn),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", **answer.headers},
        )
        self.response = response
        self.metrics: Metrics = answer.metrics

    async def _events(
        self, response: httpx.Response, translator: Lines, learn: Learn
    ) -> AsyncIterator[bytes]:
        try:
            async for line in decoded_lines(response, MAX_LINE_BYTES):
                if events := translator.line(line):
                    yield events
        except (httpx.HTTPError, ValueError) as exc:  # broken off, a line past the bound, bad coding
            log.warning("upstream stream failed after the response began: %s: %s", type(exc).__name__, exc)
            self.metrics.upstream_errors.labels("stream_broken").inc()
        if translator.done:
            learn(translator.prompt_eval_count, b"")
            return
        yield self.stream_error("The upstream stream broke off before it was done.")
