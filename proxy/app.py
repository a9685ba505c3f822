"""The FastAPI app: routes that read a request, compact a chat, forward it and relay the answer.

`create_app(settings)` wires the parts together. The upstream client is built in the lifespan,
or injected (tests pass one with a mock transport, since `httpx.ASGITransport` skips lifespan).
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from proxy import __version__
from proxy.chat import ChatPlan, context_length_error, dump_json, parse_json_object, plan_chat
from proxy.errors import ProxyError, error_response
from proxy.settings import Settings
from proxy.tokens import RequestCounter, count_chars4
from proxy.upstream import (
    StreamedResponse,
    Upstream,
    buffered_response,
    build_client,
    is_event_stream,
    read_raw,
)

log = logging.getLogger("proxy")


def create_app(settings: Settings, *, client: httpx.AsyncClient | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = None if client else build_client(settings)
        if owned:
            app.state.upstream = _upstream(owned)
        try:
            yield
        finally:
            if owned:
                await owned.aclose()

    def _upstream(http: httpx.AsyncClient) -> Upstream:
        key = settings.upstream_api_key.get_secret_value() if settings.upstream_api_key else None
        return Upstream(http, settings.upstream_url, key)

    app = FastAPI(title="compacting-proxy", version=__version__, lifespan=lifespan)
    app.state.settings = settings
    app.state.upstream = _upstream(client) if client else None
    counter = RequestCounter(count_chars4, image_tokens=settings.image_tokens)

    @app.exception_handler(ProxyError)
    async def on_proxy_error(request: Request, exc: ProxyError) -> Response:
        return exc.to_response()

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> Response:
        code = (
            "not_found"
            if exc.status_code == 404
            else "method_not_allowed"
            if exc.status_code == 405
            else None
        )
        return error_response(exc.status_code, str(exc.detail), type="invalid_request_error", code=code)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, exc: RequestValidationError) -> Response:
        return error_response(400, str(exc), type="invalid_request_error")

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response(
            500, "The proxy failed to handle this request.", type="server_error", code="internal_error"
        )

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/compact")
    async def dry_run(request: Request) -> Response:
        """Compact a chat request's messages without calling the upstream."""
        body = parse_json_object(await read_body(request, settings.max_body_bytes))
        plan = plan_chat(body, settings, counter)
        report = {"messages": plan.result.messages, "report": plan.report()}
        return Response(dump_json(report), media_type="application/json")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        raw = await read_body(request, settings.max_body_bytes)
        body = parse_json_object(raw)
        plan = plan_chat(body, settings, counter)
        if plan.result.overflow and settings.overflow == "reject":
            raise context_length_error(plan)
        if plan.result.changed:
            log.info(plan.summary())
        return await forward(request, "/chat/completions", plan.body_bytes(raw, body), plan)

    @app.api_route("/v1/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"])
    async def passthrough(request: Request, path: str) -> Response:
        raw_path: bytes = request.scope.get("raw_path") or request.url.path.encode()
        suffix = raw_path.decode("latin-1").removeprefix("/v1")
        return await forward(request, suffix, await read_body(request, settings.max_body_bytes), None)

    async def forward(request: Request, path: str, content: bytes, plan: ChatPlan | None) -> Response:
        upstream: Upstream = request.app.state.upstream
        check_path(path)
        extra = plan.headers() if plan else {}
        url = upstream.url(path, request.scope.get("query_string", b""))
        response = await upstream.open(
            request.method, url, upstream.request_headers(request.headers.raw), content
        )
        if plan is None or is_event_stream(response):
            return StreamedResponse(response, extra)
        return buffered_response(response, await read_raw(response), extra)

    return app


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
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> ProxyError:
    return ProxyError(
        413, f"The request body is larger than the proxy's limit of {limit} bytes.", code="request_too_large"
    )


def app_from_env() -> FastAPI:
    """The app as the command serves it: settings from the environment (and `.env`), built per worker."""
    env_file = os.environ.get("COMPACT_ENV_FILE")
    settings = Settings(_env_file=env_file) if env_file else Settings()  # type: ignore[call-arg]
    return create_app(settings)
