"""A request's way through the proxy, top to bottom: read, decode, adapt, plan, summarise, check
the overflow, send, retry, relay.

`Pipeline` runs over the parts wired once per app (`parts.py`: the upstream, the planner, the
bridges, the summariser, the metrics, the settings, the headers sent upstream); its methods are the
steps, in the order a request takes them. `compact_and_forward` is the whole compacted route;
`forward_as_is` every other route. The dry run `/compact` takes the first steps (`dry_run.py`).
"""

from __future__ import annotations

import functools
import logging
import time
import urllib.parse
from dataclasses import replace
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response

from proxy.bridges.base import TRUNCATED_HEADER, Answer, Bridge
from proxy.engine.chat import ChatPlan
from proxy.engine.jsonbody import dump_json, parse_json_object
from proxy.engine.overflow import OVERFLOW_STATUSES, parse_overflow
from proxy.engine.refusal import refusal_for
from proxy.errors import ProxyError
from proxy.formats import Conversation, Route, WireFormat
from proxy.formats.reports import ReportsContextEdits
from proxy.server.exchange import Exchange
from proxy.server.intake import (
    check_messages,
    check_path,
    raw_path,
    read_body,
    read_json_body,
    until_disconnect,
)
from proxy.server.logs import request_id
from proxy.server.parts import Parts
from proxy.server.remote_compaction import RemoteCompaction
from proxy.server.split_parse import SPLIT_PARSER
from proxy.upstream.prompt_reports import Truncation
from proxy.upstream.streaming import (
    TAIL_BYTES,
    StreamedResponse,
    buffered_response,
    is_event_stream,
    read_raw,
)

log = logging.getLogger("proxy")

LOGGED_BODY_BYTES = 64 * 1024
OFFLOAD_BYTES = 1024 * 1024


class Pipeline:
    """A request's steps, over the proxy's parts."""

    def __init__(self, parts: Parts) -> None:
        self.settings, self.metrics, self.routes = parts.settings, parts.metrics, parts.routes
        self.upstream, self.planner, self.bridges = parts.upstream, parts.planner, parts.bridges
        self.summarizer = parts.summarizer
        # The headers of the request's own call upstream, and of the calls the proxy makes for it.
        self.upstream_headers, self.credentials = parts.headers.for_request, parts.headers.credentials
        self.summary_headers = parts.headers.for_summary
        self.records = parts.records
        settings = parts.settings
        self.remote_compaction = RemoteCompaction.from_settings(settings)
        self._upstream_server = {
            "upstream_host": (urllib.parse.urlsplit(settings.upstream_url).hostname or "").lower(),
            "upstream_kind": settings.upstream_kind,
        }

    # ------------------------------------------------------------------ the compacted route

    async def compact_and_forward(self, request: Request, route: Route) -> Response:
        """Read the request into the neutral conversation, compact it, forward it, relay the answer."""
        raw = await self.read(request)
        body = await self.decode(raw)
        if self.remote_compaction.applies(route):  # Codex's remote compaction, in the server's place
            expand = self.remote_compaction.expand  # a large body's items walked off the loop
            expanded = (
                await self.planner.in_thread(expand, body) if len(raw) >= OFFLOAD_BYTES else expand(body)
            )
            if expanded is not body:
                body, raw = expanded, dump_json(expanded)
            if self.remote_compaction.is_trigger(body):
                return await self.remote_compaction.answer(self, request, route, body)
        path = route.upstream or raw_path(request)
        original = body
        if len(raw) >= OFFLOAD_BYTES:  # a large body is read item by item in a worker thread too
            adapted = await self.planner.in_thread(self.adapt, route.format, body, raw, request.path_params)
        else:
            adapted = self.adapt(route.format, body, raw, request.path_params)
        body, raw, conversation = adapted
        if conversation is None:  # the server keeps or compacts this history itself
            return await until_disconnect(request, self.forward(request, path, raw, route))
        plan, bridge = await self.plan(request, route, body, conversation)
        plan = await self.summarise(request, conversation.request, plan)
        record = self.records.add(request.scope["headers"], route.format.name, conversation, plan)
        self.check_overflow(route.format, body, conversation, plan)
        self.log_plan(raw, plan)
        wire = route.format  # what the answer reports of the edits the proxy applied in the server's place
        report = wire.context_report(original, body) if isinstance(wire, ReportsContextEdits) else None
        exchange = Exchange(route, path, raw, body, conversation, bridge, report=report, record=record)
        response = await until_disconnect(request, self.send_compacted(request, exchange, plan))
        if len(raw) >= OFFLOAD_BYTES:  # its million objects freed off the loop, a few at a time
            big = [body, conversation.request, conversation.sources, plan.result.messages]
            del body, original, conversation, plan, exchange
            self.planner.offloader.release(big)
        return response

    async def read(self, request: Request) -> bytes:
        return await read_json_body(request, self.settings.max_body_bytes)

    async def decode(self, raw: bytes) -> dict[str, Any]:
        # A large body is parsed off the loop, like its plan (a huge one in a child process, handed
        # back in pieces: `split_parse.py`): other clients are served meanwhile.
        if len(raw) >= OFFLOAD_BYTES:
            return await SPLIT_PARSER.parse(raw, self.planner.offloader)
        return parse_json_object(raw)

    def adapt(
        self, wire: WireFormat, body: dict[str, Any], raw: bytes, params: dict[str, str]
    ) -> tuple[dict[str, Any], bytes, Conversation | None]:
        """The body (with the context edits the proxy applies itself), its bytes and its neutral
        conversation; no conversation when the server keeps or compacts this history itself."""
        if wire.server_manages_context(body, **self._upstream_server):
            return body, raw, None
        if (edited := wire.context_edits(body)) is not body:
            body, raw = edited, dump_json(edited)
        conversation = wire.read(body, params)
        if conversation is not None:
            check_messages(conversation.request, self.settings.max_messages)
        return body, raw, conversation

    async def plan(
        self, request: Request, route: Route, body: dict[str, Any], conversation: Conversation
    ) -> tuple[ChatPlan, Bridge | None]:
        """The engine's plan for the window the request will get, and the bridge it takes to a server
        of another API (chosen once, here), if any."""
        bridge = await self.bridges.choose(route, body, conversation, self.credentials(request))
        window = conversation.window or (bridge.window if bridge else None)
        plan = await self.planner.plan(conversation.request, self.credentials(request), window_tokens=window)
        return plan, bridge

    async def summarise(self, request: Request, body: dict[str, object], plan: ChatPlan) -> ChatPlan:
        """Level 3: the dropped runs of `plan` replaced by summaries, when summaries are on."""
        summarizer = self.summarizer
        if summarizer is None or not plan.result.dropped:
            return plan
        auth, counter = self.summary_headers(request), self.planner.counter_for(plan)
        done = await summarizer.apply(plan, body["messages"], counter, auth)  # type: ignore[arg-type]
        if done.summarized:
            self.metrics.summaries.labels("written").inc(done.summarized)
        return done

    def check_overflow(
        self, wire: WireFormat, body: dict[str, Any], conversation: Conversation, plan: ChatPlan
    ) -> None:
        """Count the compaction; refuse a request still over its limit when the policy (or the
        window itself) says so, in the client's protocol's words."""
        self.metrics.record_compaction(plan.result)
        if not plan.result.overflow:
            return
        overflow = self.settings.overflow
        rejected = overflow == "reject" or plan.result.over_window  # never over the window
        self.metrics.overflows.labels("reject" if rejected else overflow).inc()
        if rejected:
            refusal = refusal_for(
                replace(plan, reply_field=wire.reply_field or plan.reply_field),
                functools.partial(wire.client_field, body, conversation),
            )
            raise wire.overflow_error(refusal, streamed=wire.streamed(body))

    def log_plan(self, raw: bytes, plan: ChatPlan) -> None:
        if plan.result.changed:
            log.info(plan.summary())
        if self.settings.log_bodies:
            log.info("request body: %s", raw[:LOGGED_BODY_BYTES].decode("utf-8", "replace"))
            if plan.result.changed:
                compacted = dump_json(plan.result.messages)[:LOGGED_BODY_BYTES]
                log.info("compacted messages: %s", compacted.decode("utf-8", "replace"))

    async def send_compacted(self, request: Request, exchange: Exchange, plan: ChatPlan) -> Response:
        """Forward a planned request; on an overflow the upstream reports, retry once, harder."""
        response = await self.send_planned(request, exchange, plan)
        if exchange.retries and response.status_code in OVERFLOW_STATUSES:
            retried = await self.retry(request, exchange, plan, response)
            if isinstance(retried, Response):
                return retried
            plan, response = retried
        return await self.relay(request, response, plan, exchange)

    async def retry(
        self, request: Request, exchange: Exchange, plan: ChatPlan, response: httpx.Response
    ) -> Response | tuple[ChatPlan, httpx.Response]:
        """After an overflow the upstream reported: the harder plan and the upstream's second answer,
        or the first answer as it came when there is nothing harder to try."""
        error = await read_raw(response)
        overflow = parse_overflow(response.status_code, error)
        harder = self.planner.harder(exchange.conversation.request, plan, overflow) if overflow else None
        if harder is None:
            if overflow:
                self.metrics.retries.labels("not_possible").inc()
            if exchange.bridge is not None:  # the error as its server said it, translated
                again = httpx.Response(
                    response.status_code, headers=response.headers, stream=httpx.ByteStream(error)
                )
                return await self.relay(request, again, plan, exchange)
            return buffered_response(response, error, plan.headers())
        log.info(
            "The upstream reported an overflow (%s); retrying once, compacted harder. %s",
            overflow,
            harder.summary(),
        )
        self.metrics.retries.labels("retried").inc()
        plan = await self.summarise(request, exchange.conversation.request, harder)
        self.records.retried(exchange.record, overflow, plan, exchange.conversation)
        return plan, await self.send_planned(request, exchange, plan)

    async def send_planned(self, request: Request, exchange: Exchange, plan: ChatPlan) -> httpx.Response:
        path, from_root = exchange.target
        content = exchange.content(plan)
        label = exchange.route.format.name
        return await self.send(request, path, content, label, from_root=from_root, bridge=exchange.bridge)

    # ------------------------------------------------------------------ every route's last steps

    async def send(
        self,
        request: Request,
        path: str,
        content: bytes,
        route: str,
        *,
        from_root: bool = False,
        bridge: Bridge | None = None,
    ) -> httpx.Response:
        """Send to the upstream (over `bridge`, with its query and headers); the response comes back
        with its body unread."""
        upstream, metrics = self.upstream, self.metrics
        check_path(path)
        headers = self.upstream_headers(request)
        query: bytes = request.scope.get("query_string", b"")
        if bridge is not None:
            headers, query = bridge.outgoing(headers, query)
        if route != "passthrough":  # a compacted route's body is read decoded, and sent so
            headers = [(k, v) for k, v in headers if k.lower() != b"content-encoding"]
        if b"x-request-id" not in {k.lower() for k, _ in headers}:
            headers.append((b"x-request-id", request_id.get().encode()))
        url = upstream.url(path, query, from_root=from_root)
        started = time.perf_counter()
        try:
            response = await upstream.open(request.method, url, headers, content)
        except ProxyError as exc:
            metrics.upstream_errors.labels(exc.code or "error").inc()
            raise
        metrics.upstream_latency.labels(route).observe(time.perf_counter() - started)
        if response.status_code >= 500:
            metrics.upstream_errors.labels("status_5xx").inc()
        return response

    async def relay(
        self,
        request: Request,
        response: httpx.Response,
        plan: ChatPlan | None,
        exchange: Exchange | None = None,
    ) -> Response:
        """The upstream's answer for the client: streamed as it comes, or read whole for an answer
        that was not asked to stream (to learn the prompt size it reports)."""
        metrics = self.metrics
        if plan is None or exchange is None:
            stream_error = self.routes.for_path(request.url.path).format.stream_error_event
            return StreamedResponse(response, metrics=metrics, stream_error=stream_error)
        extra = plan.headers()
        if exchange.bridge is not None:  # its server's answer, translated back
            stream_error = exchange.route.format.stream_error_event

            def read(reported: int | None) -> Truncation | None:
                truncation = self.planner.read_report(plan, reported)
                self.records.answered(exchange.record, reported, b"", truncation)
                return truncation

            return await exchange.bridge.relay(response, Answer(extra, read, metrics, stream_error))
        if exchange.streamed or is_event_stream(response):

            def learn(tail: bytes) -> None:
                self.answered(plan, exchange, tail)

            return StreamedResponse(
                response,
                extra,
                on_complete=learn,
                metrics=metrics,
                stream_error=exchange.route.format.stream_error_event,
                rewrite=exchange.report.into_stream if exchange.report else None,
            )
        body = await read_raw(response)
        readable = response.is_success and "content-encoding" not in response.headers
        if readable and self.answered(plan, exchange, body[-TAIL_BYTES:]):
            extra = {**extra, TRUNCATED_HEADER: "true"}
        if readable and exchange.report:
            body = exchange.report.into_body(body)
        return buffered_response(response, body, extra)

    def answered(self, plan: ChatPlan, exchange: Exchange, tail: bytes) -> Truncation | None:
        """What the end of the answer reports: the prompt the upstream read (for the calibration; a
        silent cut when it read less than it was sent), and its cached tokens for the live page."""
        reported = exchange.route.format.reported_prompt_tokens(tail)
        truncation = self.planner.read_report(plan, reported)
        self.records.answered(exchange.record, reported, tail, truncation)
        return truncation

    async def forward(self, request: Request, path: str, content: bytes, route: Route) -> Response:
        """A compacted route's request the proxy leaves alone, sent as it came."""
        response = await self.send(request, path, content, route.format.name, from_root=route.from_root)
        return await self.relay(request, response, None)

    async def forward_as_is(self, request: Request, path: str, *, from_root: bool) -> Response:
        """Any other route of the upstream's: the body read under the limit and sent unchanged."""
        content = await read_body(request, self.settings.max_body_bytes)

        async def forward() -> Response:
            response = await self.send(request, path, content, "passthrough", from_root=from_root)
            return await self.relay(request, response, None)

        return await until_disconnect(request, forward())
