"""A request's way through the proxy, top to bottom: read, decode, adapt, plan, summarise, send,
retry, relay.

`Pipeline` holds the parts wired once per app (the upstream, the planner, the Ollama probe, the
summariser, the metrics, the settings); its methods are the steps, in the order a request takes
them. `compact_and_forward` is the whole compacted route; `forward_as_is` every other route.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response

from proxy.bridges.ollama.bridge import OllamaBridge
from proxy.bridges.ollama.relay import TRUNCATED_HEADER, relay_from_ollama
from proxy.bridges.ollama.upstream import OllamaUpstream
from proxy.counting.cache import SummaryCache
from proxy.engine.chat import ChatPlan, context_length_error, dump_json, parse_json_object
from proxy.engine.overflow import OVERFLOW_STATUSES, parse_overflow
from proxy.errors import ProxyError
from proxy.formats import (
    Conversation,
    Route,
    RouteTable,
    WireFormat,
    client_field,
    context_edits,
    server_manages_context,
)
from proxy.metrics import Metrics
from proxy.server.intake import (
    check_messages,
    check_path,
    raw_path,
    read_body,
    read_json_body,
    until_disconnect,
)
from proxy.server.logs import request_id
from proxy.server.readiness import Readiness
from proxy.settings import Settings
from proxy.upstream.forwarding import (
    CREDENTIAL_HEADERS,
    TAIL_BYTES,
    StreamedResponse,
    Upstream,
    buffered_response,
    build_timeout,
    is_event_stream,
    read_raw,
)
from proxy.upstream.planner import Planner
from proxy.upstream.probes import UpstreamTokenCounter, WindowDetector
from proxy.upstream.summarizer import Summarizer

log = logging.getLogger("proxy")

LOGGED_BODY_BYTES = 64 * 1024
OFFLOAD_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Exchange:
    """One compacted request on its way: its route, the upstream path, the original bytes and body,
    and the neutral conversation read from them."""

    route: Route
    path: str
    raw: bytes
    body: dict[str, Any]
    conversation: Conversation
    bridge: OllamaBridge | None = None  # set when an OpenAI chat goes to Ollama's native API

    def content(self, plan: ChatPlan) -> bytes:
        """What to forward: the original bytes when nothing changed, else the original body with
        `plan`'s decisions applied by the route's format."""
        if not plan.result.changed and plan.max_tokens is None:
            return self.raw
        return dump_json(self.route.format.write(self.body, self.conversation, plan))

    @property
    def streamed(self) -> bool:
        return self.route.format.streamed(self.body)


class Pipeline:
    """The proxy's parts, wired once over one upstream transport, and a request's steps."""

    def __init__(
        self, settings: Settings, transport: httpx.AsyncBaseTransport, metrics: Metrics, routes: RouteTable
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.routes = routes
        key = settings.upstream_api_key.get_secret_value() if settings.upstream_api_key else None
        self.upstream = Upstream(transport, settings.upstream_url, key, build_timeout(settings))
        # Probes and summaries are off the hot path: they may use the client's conveniences.
        self.http = httpx.AsyncClient(
            transport=transport,
            timeout=build_timeout(settings),
            trust_env=False,
            headers={"accept-encoding": "gzip, deflate"},  # what `read_decoded` can undo, bounded
        )
        detector = WindowDetector(self.http, settings.upstream_url, refresh=settings.window_refresh)
        exact = UpstreamTokenCounter(self.http, settings.upstream_url)
        self.planner = Planner(settings, detector=detector, exact=exact, metrics=metrics)
        self.ollama = OllamaUpstream(self.http, settings)
        self.summarizer: Summarizer | None = None
        if settings.summarize:
            cache = SummaryCache(
                size=settings.cache_size, redis_url=settings.cache_url, ttl=settings.cache_ttl
            )
            self.summarizer = Summarizer(
                self.http,
                settings.summary_url or settings.upstream_url,
                cache,
                model=settings.summary_model,
                max_tokens=settings.summary_tokens,
                timeout=settings.summary_timeout,
            )
        for name, table in (
            ("windows", detector._cache),
            ("ollama_windows", self.ollama._windows),
            ("ollama_unknown", self.ollama._window_retry),
            ("calibration", self.planner.calibrator),
            ("seen_windows", self.planner.seen_windows),
            ("notes", self.planner.notes),
            ("upstream_urls", self.upstream._urls),
        ):
            metrics.watch_table(name, functools.partial(len, table))
        self.api_keys = [key.get_secret_value().encode() for key in settings.api_keys]
        self._upstream_kind = {"upstream_url": settings.upstream_url, "upstream_kind": settings.upstream_kind}
        self.readiness = Readiness(self.upstream)

    async def aclose(self, *, transport: bool) -> None:
        """Close the summary cache, and the transport too when the app built it."""
        if self.summarizer:
            await self.summarizer.cache.close()
        if transport:
            await self.http.aclose()  # closes the transport too

    # ------------------------------------------------------------------ the compacted route

    async def compact_and_forward(self, request: Request, route: Route) -> Response:
        """Read the request into the neutral conversation, compact it, forward it, relay the answer."""
        raw = await self.read(request)
        body = await self.decode(raw)
        path = route.upstream or raw_path(request)
        body, raw, conversation = self.adapt(route.format, body, raw, request.path_params)
        if conversation is None:  # the server keeps or compacts this history itself
            return await until_disconnect(request, self.forward(request, path, raw, route))
        plan, bridge = await self.plan(request, route, body, conversation)
        plan = await self.summarise(request, conversation.request, plan)
        self.check_overflow(route.format, body, conversation, plan)
        self.log_plan(raw, plan)
        exchange = Exchange(route, path, raw, body, conversation, bridge)
        return await until_disconnect(request, self.send_compacted(request, exchange, plan))

    async def read(self, request: Request) -> bytes:
        return await read_json_body(request, self.settings.max_body_bytes)

    async def decode(self, raw: bytes) -> dict[str, Any]:
        # A large body is parsed in a worker thread, like its plan: other clients are served meanwhile.
        if len(raw) >= OFFLOAD_BYTES:
            return await asyncio.to_thread(parse_json_object, raw)
        return parse_json_object(raw)

    def adapt(
        self, wire: WireFormat, body: dict[str, Any], raw: bytes, params: dict[str, str]
    ) -> tuple[dict[str, Any], bytes, Conversation | None]:
        """The body (with the context edits the proxy applies itself), its bytes and its neutral
        conversation; no conversation when the server keeps or compacts this history itself."""
        if server_manages_context(wire, body, **self._upstream_kind):
            return body, raw, None
        if (edited := context_edits(wire, body)) is not body:
            body, raw = edited, dump_json(edited)
        conversation = wire.read(body, params)
        if conversation is not None:
            check_messages(conversation.request, self.settings.max_messages)
        return body, raw, conversation

    async def plan(
        self, request: Request, route: Route, body: dict[str, Any], conversation: Conversation
    ) -> tuple[ChatPlan, OllamaBridge | None]:
        """The engine's plan for the window the request will get, and the Ollama bridge if it goes
        to Ollama's native API."""
        bridge = await self.ollama_bridge(request, route, body)
        window = conversation.window or (bridge.num_ctx if bridge else None)
        plan = await self.planner.plan(conversation.request, self.credentials(request), window_tokens=window)
        return plan, bridge

    async def ollama_bridge(
        self, request: Request, route: Route, body: dict[str, Any]
    ) -> OllamaBridge | None:
        """For an Ollama upstream, a bridged route (an OpenAI chat) goes to its native API with the
        window the proxy compacts for (its `/v1` ignores `num_ctx`); None when it stays on its route."""
        if not route.bridged:
            return None
        return await self.ollama.bridge(body, self.credentials(request))

    async def summarise(self, request: Request, body: dict[str, object], plan: ChatPlan) -> ChatPlan:
        """Level 3: the dropped runs of `plan` replaced by summaries, when summaries are on."""
        summarizer, settings = self.summarizer, self.settings
        if summarizer is None or not plan.result.dropped:
            return plan
        if settings.summary_api_key:
            auth = [(b"authorization", f"Bearer {settings.summary_api_key.get_secret_value()}".encode())]
        elif settings.summary_url:
            auth = []  # another server: the upstream's credentials are not sent there
        else:
            auth = self.upstream_headers(request, key_header=b"authorization")  # a /chat/completions call
        counter = self.planner.counter_for(plan)
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
            raise context_length_error(
                replace(plan, reply_field=wire.reply_field or plan.reply_field),
                wire=wire.name,
                field_of=functools.partial(client_field, wire, body, conversation),
                streamed=wire.streamed(body),
            )

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
        route = exchange.route
        if exchange.bridge is not None:  # Ollama cuts instead of rejecting: there is no overflow to retry
            bridge = exchange.bridge
            content = bridge.request_bytes(
                {**exchange.body, "messages": plan.result.messages}, plan.max_tokens
            )
            response = await self.send(request, bridge.path, content, route.format.name, from_root=True)
            learn = functools.partial(self.planner.read_report, plan)
            return await relay_from_ollama(response, bridge, plan.headers(), learn, self.metrics)
        content = exchange.content(plan)
        response = await self.send(
            request, exchange.path, content, route.format.name, from_root=route.from_root
        )
        if response.status_code in OVERFLOW_STATUSES:
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
            return buffered_response(response, error, plan.headers())
        log.info(
            "The upstream reported an overflow (%s); retrying once, compacted harder. %s",
            overflow,
            harder.summary(),
        )
        self.metrics.retries.labels("retried").inc()
        plan = await self.summarise(request, exchange.conversation.request, harder)
        route = exchange.route
        content = exchange.content(plan)
        response = await self.send(
            request, exchange.path, content, route.format.name, from_root=route.from_root
        )
        return plan, response

    # ------------------------------------------------------------------ every route's last steps

    async def send(
        self, request: Request, path: str, content: bytes, route: str, *, from_root: bool = False
    ) -> httpx.Response:
        """Send to the upstream; the response comes back with its body unread."""
        upstream, metrics = self.upstream, self.metrics
        check_path(path)
        headers = self.upstream_headers(request)
        if route != "passthrough":  # a compacted route's body is read decoded, and sent so
            headers = [(k, v) for k, v in headers if k.lower() != b"content-encoding"]
        if b"x-request-id" not in {k.lower() for k, _ in headers}:
            headers.append((b"x-request-id", request_id.get().encode()))
        url = upstream.url(path, request.scope.get("query_string", b""), from_root=from_root)
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
        metrics, planner = self.metrics, self.planner
        if plan is None or exchange is None:
            stream_format = self.routes.for_path(request.url.path).format.name
            return StreamedResponse(response, metrics=metrics, stream_format=stream_format)
        extra = plan.headers()
        reported = exchange.route.format.reported_prompt_tokens
        if exchange.streamed or is_event_stream(response):
            return StreamedResponse(
                response,
                extra,
                on_complete=lambda tail: planner.learn(plan, reported(tail)),
                metrics=metrics,
                stream_format=exchange.route.format.name,
            )
        body = await read_raw(response)
        readable = response.is_success and "content-encoding" not in response.headers
        if readable and planner.read_report(plan, reported(body[-TAIL_BYTES:])):
            extra = {**extra, TRUNCATED_HEADER: "true"}
        return buffered_response(response, body, extra)

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

    def credentials(self, request: Request) -> list[tuple[bytes, bytes]]:
        """What the proxy's own requests to the upstream (probes, counts) carry: the upstream key
        when one is configured, else the client's bearer token unless it was the proxy's own key."""
        headers = self.upstream_headers(request, key_header=b"authorization")
        return [(k, v) for k, v in headers if k.lower() == b"authorization"]

    def upstream_headers(
        self, request: Request, *, key_header: bytes | None = None
    ) -> list[tuple[bytes, bytes]]:
        """The client's headers for the upstream. A configured upstream key goes in `key_header`,
        else in the header the server of this request's format reads (Anthropic's `x-api-key`,
        Azure's `api-key`), else where the client put its own."""
        incoming = request.headers.raw
        if self.api_keys:  # the client's key was for the proxy: it is not forwarded
            incoming = [(k, v) for k, v in incoming if k.lower() not in CREDENTIAL_HEADERS]
        if key_header is None:
            key_header = self.routes.for_path(request.url.path).key_header
        return self.upstream.request_headers(incoming, key_header=key_header)

    # ------------------------------------------------------------------ the dry run

    async def compact_report(
        self, request: Request, route: Route, body: dict[str, Any], params: dict[str, str]
    ) -> Response:
        """`/compact`: what the proxy would send on `route`, without calling the upstream."""
        wire = route.format
        body, _, conversation = self.adapt(wire, body, b"", params)
        if conversation is None:
            report: dict[str, Any] = {"messages": None, "report": {"compacted": False, "left_alone": True}}
            return Response(dump_json(report), media_type="application/json")
        plan, _ = await self.plan(request, route, body, conversation)
        report = {"messages": plan.result.messages, "report": plan.report()}
        if route.report_body:
            report["body"] = wire.write(body, conversation, plan) if plan.result.changed else body
        return Response(dump_json(report), media_type="application/json")
