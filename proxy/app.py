"""The FastAPI app: routes that read a request, compact a chat, forward it and relay the answer.

`create_app(settings)` wires the parts together. The upstream transport is built in the lifespan,
or injected (tests pass a mock transport, since `httpx.ASGITransport` skips lifespan).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
import os
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from email.utils import formatdate
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy import __version__
from proxy.cache import SummaryCache
from proxy.chat import ChatPlan, context_length_error, dump_json, parse_json_object
from proxy.encoding import decode_body
from proxy.errors import ProxyError, error_response
from proxy.formats import (
    FORMATS,
    ROUTES,
    Conversation,
    Route,
    WireFormat,
    client_field,
    context_edits,
    format_for_path,
    match_route,
    server_manages_context,
)
from proxy.logs import request_id
from proxy.metrics import Metrics
from proxy.ollama import OllamaUpstream
from proxy.ollama_bridge import OllamaBridge
from proxy.ollama_relay import TRUNCATED_HEADER, relay_from_ollama
from proxy.overflow import OVERFLOW_STATUSES, parse_overflow
from proxy.planner import Planner
from proxy.probes import UpstreamTokenCounter, WindowDetector
from proxy.settings import Settings
from proxy.summarizer import Summarizer
from proxy.upstream import (
    CREDENTIAL_HEADERS,
    TAIL_BYTES,
    StreamBroken,
    StreamedResponse,
    Upstream,
    buffered_response,
    build_timeout,
    build_transport,
    is_event_stream,
    read_raw,
)

log = logging.getLogger("proxy")

LOGGED_BODY_BYTES = 64 * 1024
OFFLOAD_BYTES = 1024 * 1024
# Where a configured upstream key goes, by wire format, when that server reads its own header.
KEY_HEADERS = {"messages": b"x-api-key", "azure": b"api-key"}
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
# `/readyz` is open to anyone: its answer is reused this long, so it cannot be made a way to send
# the upstream a request per request.
READY_TTL = 2.0
READY_TIMEOUT = 5.0
# Where clients put their key: OpenAI's bearer token, Anthropic's `x-api-key`, Azure's `api-key`.


def create_app(settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None) -> FastAPI:
    """The proxy for `settings`. Its upstream transport is built in the lifespan, or injected."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if transport is None:
            wire(build_transport(settings))
        try:
            yield
        finally:
            if app.state.summarizer:
                await app.state.summarizer.cache.close()
            if transport is None:
                await app.state.http.aclose()  # closes the transport too

    app = FastAPI(title="compacting-proxy", version=__version__, lifespan=lifespan)
    metrics = Metrics()
    state = app.state
    state.settings = settings
    state.metrics = metrics

    def wire(shared: httpx.AsyncBaseTransport) -> None:
        key = settings.upstream_api_key.get_secret_value() if settings.upstream_api_key else None
        state.upstream = Upstream(shared, settings.upstream_url, key, build_timeout(settings))
        # Probes and summaries are off the hot path: they may use the client's conveniences.
        state.http = http = httpx.AsyncClient(
            transport=shared,
            timeout=build_timeout(settings),
            trust_env=False,
            headers={"accept-encoding": "gzip, deflate"},  # what `read_decoded` can undo, bounded
        )
        detector = WindowDetector(http, settings.upstream_url, refresh=settings.window_refresh)
        exact = UpstreamTokenCounter(http, settings.upstream_url)
        state.planner = Planner(settings, detector=detector, exact=exact, metrics=metrics)
        state.ollama = OllamaUpstream(http, settings)
        planner = state.planner
        for name, table in (
            ("windows", detector._cache),
            ("ollama_windows", state.ollama._windows),
            ("ollama_unknown", state.ollama._window_retry),
            ("calibration", planner.calibrator),
            ("seen_windows", planner.seen_windows),
            ("notes", planner.notes),
            ("upstream_urls", state.upstream._urls),
        ):
            metrics.watch_table(name, functools.partial(len, table))
        if settings.summarize:
            cache = SummaryCache(
                size=settings.cache_size, redis_url=settings.cache_url, ttl=settings.cache_ttl
            )
            state.summarizer = Summarizer(
                http,
                settings.summary_url or settings.upstream_url,
                cache,
                model=settings.summary_model,
                max_tokens=settings.summary_tokens,
                timeout=settings.summary_timeout,
            )

    state.summarizer = None
    if transport is not None:
        wire(transport)
    api_keys = [key.get_secret_value().encode() for key in settings.api_keys]
    upstream_kind = {"upstream_url": settings.upstream_url, "upstream_kind": settings.upstream_kind}

    # Errors in the shape of the client's protocol (Anthropic's on its routes).
    @app.exception_handler(ProxyError)
    async def on_proxy_error(request: Request, exc: ProxyError) -> Response:
        return exc.to_response(shape=format_for_path(request.url.path).error_body)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return error_response(
            exc.status_code,
            str(exc.detail),
            type="invalid_request_error",
            code=code,
            shape=format_for_path(request.url.path).error_body,
        )

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, exc: RequestValidationError) -> Response:
        return error_response(
            400, str(exc), type="invalid_request_error", shape=format_for_path(request.url.path).error_body
        )

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, StreamBroken):  # a broken upstream stream was logged where it broke
            log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response(
            500,
            "The proxy failed to handle this request.",
            type="server_error",
            code="internal_error",
            shape=format_for_path(request.url.path).error_body,
        )

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """The process is alive and serving."""
        return {"status": "ok"}

    ready_lock = asyncio.Lock()
    ready: list[Any] = [float("-inf"), None]  # when the last answer was had, and its error (None: ready)

    @app.get("/readyz")
    async def readyz(request: Request) -> Response:
        """The upstream answers (any HTTP status counts: it is reachable). Only its status line is
        read, and one answer serves every `/readyz` for `READY_TTL` seconds."""
        async with ready_lock:
            if time.monotonic() - ready[0] >= READY_TTL:
                ready[1] = await ask_ready(request.app.state.upstream)
                ready[0] = time.monotonic()
        if ready[1] is not None:
            return error_response(
                503,
                f"The upstream does not answer: {ready[1]}.",
                type="upstream_error",
                code="upstream_unreachable",
            )
        return Response(b'{"status":"ready"}', media_type="application/json")

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/compact")
    async def dry_run(request: Request) -> Response:
        """Compact a request without calling the upstream: the body of a chat request, or of another
        format named by a `format` field (`responses`, `messages`, `ollama`, `azure`)."""
        body = parse_json_object(await read_json_body(request, settings.max_body_bytes))
        named = body.get("format")
        if isinstance(named, str) and named in FORMATS:
            body = {k: v for k, v in body.items() if k != "format"}
            return await compact_report(request, FORMATS[named], body, {})
        return await compact_report(request, FORMATS["chat"], body, {})

    @app.post("/compact/{path:path}", include_in_schema=False)
    async def dry_run_for(request: Request, path: str) -> Response:
        """The dry run for the format a compacted route speaks, e.g. `/compact/v1/messages`."""
        matched = match_route("/" + path)
        if matched is None:
            raise ProxyError(404, f"No compacted route /{path}.", code="not_found")
        body = parse_json_object(await read_json_body(request, settings.max_body_bytes))
        return await compact_report(request, matched[0].format, body, matched[1])

    async def compact_report(
        request: Request, wire: WireFormat, body: dict[str, Any], params: dict[str, str]
    ) -> Response:
        if server_manages_context(wire, body, **upstream_kind):
            conversation = None
        else:
            body = context_edits(wire, body)
            conversation = wire.read(body, params)
        if conversation is None:
            report: dict[str, Any] = {"messages": None, "report": {"compacted": False, "left_alone": True}}
            return Response(dump_json(report), media_type="application/json")
        check_messages(conversation.request, settings.max_messages)
        planner: Planner = request.app.state.planner
        bridge = await ollama_bridge(request, wire, body)
        window = conversation.window or (bridge.num_ctx if bridge else None)  # what it would get
        plan = await planner.plan(conversation.request, credentials(request), window_tokens=window)
        report = {"messages": plan.result.messages, "report": plan.report()}
        if wire is not FORMATS["chat"]:
            report["body"] = wire.write(body, conversation, plan) if plan.result.changed else body
        return Response(dump_json(report), media_type="application/json")

    def compacting(route: Route) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        async def compact_route(request: Request) -> Response:
            return await compact_and_forward(request, route)

        return compact_route

    for route in ROUTES:
        app.add_api_route(
            route.path, compacting(route), methods=["POST"], include_in_schema=route.format is FORMATS["chat"]
        )

    async def compact_and_forward(request: Request, route: Route) -> Response:
        """Read the request into the neutral conversation, compact it, forward it, relay the answer."""
        raw = await read_json_body(request, settings.max_body_bytes)
        # A large body is parsed in a worker thread, like its plan: other clients are served meanwhile.
        big = len(raw) >= OFFLOAD_BYTES
        body = await asyncio.to_thread(parse_json_object, raw) if big else parse_json_object(raw)
        wire = route.format
        path = route.upstream or raw_path(request)
        if server_manages_context(wire, body, **upstream_kind):  # the server compacts this itself
            return await until_disconnect(request, forward(request, path, raw, route))
        if (edited := context_edits(wire, body)) is not body:
            body, raw = edited, dump_json(edited)
        conversation = wire.read(body, request.path_params)
        if conversation is None:  # the server keeps or compacts this history itself
            return await until_disconnect(request, forward(request, path, raw, route))
        check_messages(conversation.request, settings.max_messages)
        planner: Planner = request.app.state.planner
        bridge = await ollama_bridge(request, wire, body)
        window = conversation.window or (bridge.num_ctx if bridge else None)
        plan = await planner.plan(conversation.request, credentials(request), window_tokens=window)
        plan = await summarized(request, conversation.request, plan)
        metrics.record_compaction(plan.result)
        if plan.result.overflow:
            rejected = settings.overflow == "reject" or plan.result.over_window  # never over the window
            metrics.overflows.labels("reject" if rejected else settings.overflow).inc()
            if rejected:
                field = wire.reply_field or plan.reply_field
                raise context_length_error(
                    replace(plan, reply_field=field),
                    wire=wire.name,
                    field_of=functools.partial(client_field, wire, body, conversation),
                    streamed=wire.streamed(body),
                )
        if plan.result.changed:
            log.info(plan.summary())
        if settings.log_bodies:
            log.info("request body: %s", raw[:LOGGED_BODY_BYTES].decode("utf-8", "replace"))
            if plan.result.changed:
                compacted = dump_json(plan.result.messages)[:LOGGED_BODY_BYTES]
                log.info("compacted messages: %s", compacted.decode("utf-8", "replace"))
        exchange = Exchange(route, path, raw, body, conversation, bridge)
        return await until_disconnect(request, forward_compacted(request, exchange, plan))

    async def ollama_bridge(request: Request, wire: WireFormat, body: dict[str, Any]) -> OllamaBridge | None:
        """For an Ollama upstream, an OpenAI chat goes to its native API with the window the proxy
        compacts for (its `/v1` ignores `num_ctx`); None when the request stays on its route."""
        if wire is not FORMATS["chat"]:
            return None
        ollama: OllamaUpstream = request.app.state.ollama
        return await ollama.bridge(body, credentials(request))

    async def forward_compacted(request: Request, exchange: Exchange, plan: ChatPlan) -> Response:
        """Forward a planned request; on an overflow the upstream reports, retry once, harder."""
        route = exchange.route
        planner: Planner = request.app.state.planner
        if exchange.bridge is not None:  # Ollama cuts instead of rejecting: there is no overflow to retry
            bridge = exchange.bridge
            content = bridge.request_bytes(
                {**exchange.body, "messages": plan.result.messages}, plan.max_tokens
            )
            response = await send(request, "/api/chat", content, route.format.name, from_root=True)
            learn = functools.partial(planner.read_report, plan)
            return await relay_from_ollama(response, bridge, plan.headers(), learn, metrics)
        response = await send(
            request, exchange.path, exchange.content(plan), route.format.name, from_root=route.from_root
        )
        if response.status_code in OVERFLOW_STATUSES:
            error = await read_raw(response)
            overflow = parse_overflow(response.status_code, error)
            harder = planner.harder(exchange.conversation.request, plan, overflow) if overflow else None
            if harder is None:
                if overflow:
                    metrics.retries.labels("not_possible").inc()
                return buffered_response(response, error, plan.headers())
            log.info(
                "The upstream reported an overflow (%s); retrying once, compacted harder. %s",
                overflow,
                harder.summary(),
            )
            metrics.retries.labels("retried").inc()
            plan = await summarized(request, exchange.conversation.request, harder)
            response = await send(
                request, exchange.path, exchange.content(plan), route.format.name, from_root=route.from_root
            )
        return await relay(request, response, plan, exchange)

    async def forward(request: Request, path: str, content: bytes, route: Route) -> Response:
        response = await send(request, path, content, route.format.name, from_root=route.from_root)
        return await relay(request, response, None)

    @app.api_route(
        "/v1/{path:path}",
        methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"],
        include_in_schema=False,  # any other route of the upstream's, forwarded as it is
    )
    async def passthrough(request: Request, path: str) -> Response:
        return await forward_as_is(request, raw_path(request).removeprefix("/v1"), from_root=False)

    @app.api_route(
        "/api/{path:path}",
        methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"],
        include_in_schema=False,  # Ollama's native API, forwarded as it is (not compacted)
    )
    async def native_passthrough(request: Request, path: str) -> Response:
        return await forward_as_is(request, raw_path(request), from_root=True)

    @app.api_route(
        "/openai/{path:path}",
        methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"],
        include_in_schema=False,  # Azure OpenAI's other routes, forwarded as they are, like its chat
    )
    async def azure_passthrough(request: Request, path: str) -> Response:
        return await forward_as_is(request, raw_path(request), from_root=True)

    @app.api_route(
        "/deployments/{path:path}",
        methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"],
        include_in_schema=False,
    )
    async def deployment_passthrough(request: Request, path: str) -> Response:
        return await forward_as_is(request, raw_path(request), from_root=False)

    async def forward_as_is(request: Request, path: str, *, from_root: bool) -> Response:
        content = await read_body(request, settings.max_body_bytes)

        async def forward() -> Response:
            response = await send(request, path, content, "passthrough", from_root=from_root)
            return await relay(request, response, None)

        return await until_disconnect(request, forward())

    async def summarized(request: Request, body: dict[str, object], plan: ChatPlan) -> ChatPlan:
        """Level 3: the dropped runs of `plan` replaced by summaries, when summaries are on."""
        summarizer: Summarizer | None = request.app.state.summarizer
        if summarizer is None or not plan.result.dropped:
            return plan
        if settings.summary_api_key:
            auth = [(b"authorization", f"Bearer {settings.summary_api_key.get_secret_value()}".encode())]
        elif settings.summary_url:
            auth = []  # another server: the upstream's credentials are not sent there
        else:
            auth = upstream_headers(request, key_header=b"authorization")  # a /chat/completions call
        planner: Planner = request.app.state.planner
        counter = planner.counter_for(plan)
        done = await summarizer.apply(plan, body["messages"], counter, auth)  # type: ignore[arg-type]
        if done.summarized:
            metrics.summaries.labels("written").inc(done.summarized)
        return done

    def credentials(request: Request) -> list[tuple[bytes, bytes]]:
        """What the proxy's own requests to the upstream (probes, counts) carry: the upstream key
        when one is configured, else the client's bearer token unless it was the proxy's own key."""
        headers = upstream_headers(request, key_header=b"authorization")
        return [(k, v) for k, v in headers if k.lower() == b"authorization"]

    def upstream_headers(request: Request, *, key_header: bytes | None = None) -> list[tuple[bytes, bytes]]:
        """The client's headers for the upstream. A configured upstream key goes in `key_header`,
        else in the header the server of this request's format reads (Anthropic's `x-api-key`,
        Azure's `api-key`), else where the client put its own."""
        upstream: Upstream = request.app.state.upstream
        incoming = request.headers.raw
        if api_keys:  # the client's key was for the proxy: it is not forwarded
            incoming = [(k, v) for k, v in incoming if k.lower() not in CREDENTIAL_HEADERS]
        if key_header is None:
            key_header = KEY_HEADERS.get(format_for_path(request.url.path).name)
        return upstream.request_headers(incoming, key_header=key_header)

    async def send(
        request: Request, path: str, content: bytes, route: str, *, from_root: bool = False
    ) -> httpx.Response:
        """Send to the upstream; the response comes back with its body unread."""
        upstream: Upstream = request.app.state.upstream
        check_path(path)
        headers = upstream_headers(request)
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
        request: Request, response: httpx.Response, plan: ChatPlan | None, exchange: Exchange | None = None
    ) -> Response:
        """The upstream's answer for the client: streamed as it comes, or read whole for an answer
        that was not asked to stream (to learn the prompt size it reports)."""
        stream_format = format_for_path(request.url.path).name
        if plan is None or exchange is None:
            return StreamedResponse(response, metrics=metrics, stream_format=stream_format)
        extra = plan.headers()
        planner: Planner = request.app.state.planner
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

    app.add_middleware(RequestContext, metrics=metrics, api_keys=api_keys)
    return app


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


class RequestContext:
    """Plain ASGI middleware (cheap on the hot path): the request id, the API-key check, and the
    per-route request counter."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics, api_keys: list[bytes]) -> None:
        self.app = app
        self.metrics = metrics
        self.api_keys = api_keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict((k.lower(), v) for k, v in scope["headers"])
        incoming = headers.get(b"x-request-id", b"")[:128].decode("latin-1").strip()
        rid = incoming if incoming.isprintable() and incoming else uuid.uuid4().hex
        token = request_id.set(rid)
        path: str = scope["path"]
        route = route_of(path)
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                sent = list(message.get("headers", []))
                names = {name.lower() for name, _ in sent}
                if b"x-request-id" not in names:  # the upstream's own wins
                    sent.append((b"x-request-id", rid.encode()))
                if b"date" not in names:  # RFC 9110 6.6.1: the upstream's own, or the proxy's clock
                    sent.append((b"date", formatdate(usegmt=True).encode()))
                message["headers"] = sent
            await send(message)

        try:
            if self.api_keys and path not in OPEN_PATHS and not self._authorized(headers):
                await error_response(
                    401,
                    "Missing or invalid API key for this proxy.",
                    type="invalid_request_error",
                    code="invalid_api_key",
                    shape=format_for_path(path).error_body,
                )(scope, receive, send_with_id)
                return
            await self.app(scope, receive, send_with_id)
        finally:
            self.metrics.requests.labels(route, str(status)).inc()
            request_id.reset(token)

    def _authorized(self, headers: dict[bytes, bytes]) -> bool:
        scheme, _, bearer = headers.get(b"authorization", b"").partition(b" ")
        given = [bearer.strip()] if scheme.lower() == b"bearer" else []
        given += [headers[name].strip() for name in (b"x-api-key", b"api-key") if name in headers]
        return any(hmac.compare_digest(key, allowed) for key in given for allowed in self.api_keys)


async def until_disconnect(request: Request, work: Coroutine[Any, Any, Response]) -> Response:
    """Run `work` (the upstream exchange up to the response headers, or the whole answer when it is
    read at once), and cancel it if the client goes away first: an upstream generating for nobody
    is closed instead of working on until it answers or times out."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    log.info("the client went away before the upstream answered; upstream request cancelled")
    return Response(status_code=499)


async def _disconnected(request: Request) -> None:
    """Wait for the client to disconnect (the request body has been read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def route_of(path: str) -> str:
    """The metrics label of a path: the format of a compacted route, else what kind of path it is."""
    matched = match_route(path)
    if matched is not None:
        return matched[0].format.name
    if path.startswith(("/v1/", "/api/", "/openai/", "/deployments/")):
        return "passthrough"
    return {"/compact": "compact", "/healthz": "healthz", "/readyz": "readyz", "/metrics": "metrics"}.get(
        path, "other"
    )


def raw_path(request: Request) -> str:
    """The path as the client sent it (still percent-encoded)."""
    raw: bytes = request.scope.get("raw_path") or request.url.path.encode()
    return raw.decode("latin-1")


def check_messages(body: dict[str, object], limit: int) -> None:
    messages = body.get("messages")
    if isinstance(messages, list) and len(messages) > limit:
        raise ProxyError(
            400,
            f"Too many messages: {len(messages)}, the proxy's limit is {limit}.",
            code="too_many_messages",
            param="messages",
        )


def check_path(path: str) -> None:
    """Nothing in a path may step outside the upstream's base URL, encoded or not."""
    path = urllib.parse.unquote(path)
    segments = path.split("/")
    if ".." in segments or "." in segments or "//" in path or "\\" in path or "://" in path or "@" in path:
        raise ProxyError(400, "The request path is not allowed.", code="invalid_path")


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with a 413 as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
    except ClientDisconnect:  # gone, or closed by the body timeout: nobody reads an answer
        raise ProxyError(
            400, "The client went away before its body was complete.", code="incomplete_body"
        ) from None
    return b"".join(chunks)


async def ask_ready(upstream: Upstream) -> str | None:
    """None if the upstream answers `GET /models` at all, else why not. The body is never read."""
    try:
        response = await asyncio.wait_for(
            upstream.open("GET", upstream.url("/models"), upstream.request_headers([]), b""), READY_TIMEOUT
        )
    except TimeoutError:
        return "ReadTimeout"
    except ProxyError as exc:
        return type(exc.__cause__).__name__ if exc.__cause__ else exc.code or "error"
    with contextlib.suppress(httpx.HTTPError):
        await response.aclose()
    return None


async def read_json_body(request: Request, limit: int) -> bytes:
    """A body compaction must read: decoded when it was sent compressed."""
    raw = await read_body(request, limit)
    encoding = request.headers.get("content-encoding")
    return decode_body(raw, encoding, limit) if encoding else raw


def _too_large(limit: int) -> ProxyError:
    return ProxyError(
        413, f"The request body is larger than the proxy's limit of {limit} bytes.", code="request_too_large"
    )


def app_from_env() -> FastAPI:
    """The app as the command serves it: settings from the environment (and `.env`), built per worker."""
    env_file = os.environ.get("COMPACT_ENV_FILE")
    settings = Settings(_env_file=env_file) if env_file else Settings()  # type: ignore[call-arg]
    return create_app(settings)
