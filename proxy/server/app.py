"""The FastAPI app: its routes, error handlers and middleware, over one `Pipeline`.

`create_app(settings)` wires the parts once (`parts.py`), over the pooled upstream transport or an
injected one (tests pass a mock transport); what a request goes through is read in `pipeline.py`.
"""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from proxy import __version__
from proxy.errors import ErrorShape, ProxyError, error_response
from proxy.formats import FormatRoute, Passthrough, RouteTable
from proxy.gateway.routes import Gateway
from proxy.live.routes import add_routes as add_live_page
from proxy.metrics import Metrics
from proxy.server.collector import tune_collector
from proxy.server.dry_run import dry_run, dry_run_for
from proxy.server.intake import raw_path
from proxy.server.middleware import CountRequests, RequestId, RequireApiKey
from proxy.server.parts import Parts
from proxy.server.pipeline import Pipeline
from proxy.settings import Settings
from proxy.upstream.forwarding import build_transport
from proxy.upstream.streaming import StreamBroken

log = logging.getLogger("proxy")

PASSTHROUGH_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]


def create_app(
    settings: Settings,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    routes: RouteTable | None = None,
) -> FastAPI:
    """The proxy for `settings`, over `transport` (the pooled upstream transport when None: tests
    inject a mock, since `httpx.ASGITransport` skips lifespan), routing by `routes` (the proxy's
    own table when None)."""
    table, metrics = routes or RouteTable(), Metrics()
    parts = Parts.wire(settings, transport or build_transport(settings), metrics, table)
    pipeline = Pipeline(parts)
    gateway = Gateway.wire(pipeline)  # Headroom's contract: /v1/compress, /v1/retrieve
    app = FastAPI(
        title="compacting-proxy",
        version=__version__,
        lifespan=lifespan_of(parts, owns_transport=transport is None, closing=(gateway.aclose,)),
    )
    app.state.settings, app.state.metrics, app.state.pipeline = settings, metrics, pipeline
    app.state.planner = parts.planner
    for kind, handler in error_handlers(table).items():
        app.add_exception_handler(kind, handler)
    add_own_routes(app, parts)
    app.add_api_route("/compact", dry_run(pipeline), methods=["POST"])
    app.add_api_route(
        "/compact/{path:path}", dry_run_for(pipeline), methods=["POST"], include_in_schema=False
    )
    gateway.add_routes(app)
    for route in table.routes:
        app.add_api_route(
            route.path, compacting(pipeline, route), methods=["POST"], include_in_schema=route.documented
        )
    add_live_page(app, parts.records)  # after the compacted routes: they are matched first
    for passthrough in table.passthroughs:
        app.add_api_route(
            passthrough.prefix + "/{path:path}",
            passing(pipeline, passthrough),
            methods=PASSTHROUGH_METHODS,
            include_in_schema=False,  # the upstream's other routes, forwarded as they are
        )
    app.add_middleware(RequireApiKey, api_keys=parts.api_keys, routes=table)
    app.add_middleware(RequestId)
    app.add_middleware(CountRequests, metrics=metrics, routes=table)
    return app


Handler = Callable[[Request], Coroutine[Any, Any, Response]]
ErrorHandler = Callable[[Request, Exception], Coroutine[Any, Any, Response]]


def lifespan_of(
    parts: Parts, *, owns_transport: bool, closing: tuple[Callable[[], Awaitable[None]], ...] = ()
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's start and end: what starts while the process is small, and what closes (the
    transport too, when the app built it, and `closing`, the app's other parts)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The process's own objects (modules, the app), left out of every later collection: a full
        # collection then walks only what requests allocated, not 100 ms of startup objects.
        gc.collect()
        gc.freeze()
        await parts.start()  # while the process is small: see `proxy.bodies.split_parse`
        try:
            yield
        finally:
            for close in closing:
                await close()
            await parts.aclose(transport=owns_transport)

    return lifespan


def add_own_routes(app: FastAPI, parts: Parts) -> None:
    """The proxy's own routes: `/healthz`, `/readyz`, `/metrics`."""
    app.add_api_route("/healthz", healthz, methods=["GET"])

    @app.get("/readyz")
    async def readyz() -> Response:
        """The upstream answers (any HTTP status counts: it is reachable)."""
        return await parts.readiness.answer()

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(parts.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


def compacting(pipeline: Pipeline, route: FormatRoute) -> Handler:
    async def compact_route(request: Request) -> Response:
        return await pipeline.compact_and_forward(request, route)

    return compact_route


def passing(pipeline: Pipeline, passthrough: Passthrough) -> Handler:
    async def forward_route(request: Request) -> Response:
        path = passthrough.upstream_path(raw_path(request))
        return await pipeline.forward_as_is(request, path, from_root=passthrough.from_root)

    return forward_route


async def healthz() -> dict[str, str]:
    """The process is alive and serving."""
    return {"status": "ok"}


def error_handlers(table: RouteTable) -> dict[Any, ErrorHandler]:
    """Errors in the shape of the client's protocol (Anthropic's on its routes)."""

    def shape(request: Request) -> ErrorShape:
        return table.for_path(request.url.path).format.error_body

    async def on_proxy_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ProxyError)
        return exc.to_response(shape=shape(request))

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return error_response(
            exc.status_code, str(exc.detail), type="invalid_request_error", code=code, shape=shape(request)
        )

    async def on_validation_error(request: Request, exc: Exception) -> Response:
        return error_response(400, str(exc), type="invalid_request_error", shape=shape(request))

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, StreamBroken):  # a broken upstream stream was logged where it broke
            log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response(
            500,
            "The proxy failed to handle this request.",
            type="server_error",
            code="internal_error",
            shape=shape(request),
        )

    return {
        ProxyError: on_proxy_error,
        StarletteHTTPException: on_http_error,
        RequestValidationError: on_validation_error,
        Exception: on_unexpected,
    }


def app_from_env() -> FastAPI:
    """The app as the command serves it: settings from the environment (and `.env`), built per worker."""
    env_file = os.environ.get("COMPACT_ENV_FILE")
    settings = Settings(_env_file=env_file) if env_file else Settings()  # type: ignore[call-arg]
    app = create_app(settings)
    tune_collector()  # a serving process's own settings (tests build apps in their own processes)
    return app
