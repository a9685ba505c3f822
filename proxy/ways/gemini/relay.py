"""Relaying a Chat Completions server's answer to a Gemini client: a `GenerateContentResponse`, or
the chat SSE stream re-framed as Gemini's `data:` events chunk by chunk as it arrives (the
translation is `proxy.ways.gemini.gemini_answer`).

The prompt size the answer reports (`usage.prompt_tokens`) goes to `learn`; a whole answer then
carries `x-compaction-upstream-truncated` when the server read less than it was sent.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

import httpx
import orjson
from starlette.responses import Response

from proxy.formats.gemini import gemini_error
from proxy.metrics import Metrics
from proxy.upstream.forwarding import MAX_ANSWER_BYTES, decoded_lines, map_transport_errors, read_decoded
from proxy.upstream.streaming import UpstreamStream, is_event_stream
from proxy.ways.base import Answer, Learn
from proxy.ways.gemini.gemini_answer import StreamTranslator, error_from_chat, event, generate_response

log = logging.getLogger("proxy.gemini")

MAX_LINE_BYTES = 16 * 1024 * 1024  # one SSE line: a chunk of a reply, never megabytes
JSON = "application/json"


async def relay_from_chat(response: httpx.Response, streamed: bool, answer: Answer) -> Response:
    """The Gemini client's answer for the chat server's `response` (its body still unread)."""
    headers = answer.headers
    if streamed and response.is_success and is_event_stream(response):
        return _SseResponse(response, StreamTranslator(""), answer)
    try:
        with map_transport_errors():
            content = await read_decoded(response, MAX_ANSWER_BYTES)
    except ValueError as exc:  # too large, or a coding the proxy cannot undo
        log.warning("the chat server's answer could not be read: %s", exc)
        body = gemini_error(502, "The upstream's answer could not be read.")
        return Response(body, status_code=502, media_type=JSON, headers=headers)
    if not response.is_success:
        body = error_from_chat(response.status_code, content)
        return Response(body, status_code=response.status_code, media_type=JSON, headers=headers)
    try:
        chat = orjson.loads(content)
    except orjson.JSONDecodeError:
        chat = None
    if not isinstance(chat, dict):
        body = gemini_error(502, "The upstream's answer is not JSON.")
        return Response(body, status_code=502, media_type=JSON, headers=headers)
    usage = chat.get("usage")
    headers = answer.whole(usage.get("prompt_tokens") if isinstance(usage, dict) else None)
    translated = generate_response(chat, "")
    if streamed:  # the server answered whole what was asked streamed: one event
        return Response(event(translated), media_type="text/event-stream", headers=headers)
    return Response(orjson.dumps(translated), media_type=JSON, headers=headers)


class _SseResponse(UpstreamStream):
    """The chat server's SSE events, translated to Gemini's as they arrive; the upstream response
    is closed when the client has it all, goes away, or the upstream fails."""

    def __init__(self, response: httpx.Response, translator: StreamTranslator, answer: Answer) -> None:
        super().__init__(
            self._events(response, translator, answer.learn, answer.stream_error),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", **answer.headers},
        )
        self.response = response
        self.metrics: Metrics = answer.metrics

    async def _events(
        self,
        response: httpx.Response,
        translator: StreamTranslator,
        learn: Learn,
        stream_error: Callable[[str], bytes],
    ) -> AsyncIterator[bytes]:
        try:
            async for line in decoded_lines(response, MAX_LINE_BYTES):
                line = line.rstrip(b"\r")
                if line.startswith(b"data:") and (events := translator.data(line[5:].strip())):
                    yield events
        except (httpx.HTTPError, ValueError) as exc:  # broken off, a line past the bound, bad coding
            log.warning("upstream stream failed after the response began: %s: %s", type(exc).__name__, exc)
            self.metrics.upstream_errors.labels("stream_broken").inc()
            yield stream_error("The upstream stream broke off before it was done.")
            return
        if not translator.done and translator.finish_reason is not None:
            yield translator.finish()  # a server that sends no `[DONE]`
        if translator.done:
            learn(translator.prompt_tokens, b"")
            return
        yield stream_error("The upstream stream broke off before it was done.")
