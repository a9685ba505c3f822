"""The bare passthrough: the ceiling of the proxy's own stack.

FastAPI + one shared upstream client, forwarding every request unchanged (method, path, query,
body bytes, end-to-end headers) and the response back (raw bytes, ``content-encoding`` as it
came; SSE relayed chunk by chunk). No JSON parsing, no compaction: whatever the real proxy costs
above this is the proxy's own work.

``--transport`` picks the upstream client, all behind the same handler:

- ``httpx``: ``httpx.AsyncClient()`` with its defaults (httpcore, 100 connections, 20 kept alive).
- ``httpx-tuned``: ``httpx.AsyncHTTPTransport(http1=True, retries=0)`` with a keep-alive pool big
  enough for every client (no connection churn at 64) and ``trust_env=False``.
- ``httpx-fixedpool``: ``httpx-tuned`` with httpcore's pool assignment fixed
  (``httpcore_pool_fix.py``, an experiment that reaches into httpcore internals).
- ``aiohttp``: the httpx API over ``httpx_aiohttp.AiohttpTransport`` (PyPI ``httpx-aiohttp``).
- ``aiohttp-lean`` / ``httpx-lean``: ``httpx.Request`` objects sent straight into the
  ``AiohttpTransport`` / tuned ``AsyncHTTPTransport`` (``handle_async_request``), skipping
  ``AsyncClient`` (URL merging, auth and redirect flows, cookie extraction): still the httpx types
  and exceptions, without the client's per-request bookkeeping.
- ``aiohttp-native``: ``aiohttp.ClientSession`` directly, no httpx: what the httpx layer costs.

Served by uvicorn with uvloop + httptools, one worker, no access log.
``python -m benchmarks.throughput.bare_passthrough --port P --upstream http://127.0.0.1:UP``
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request, Response
from starlette.background import BackgroundTask
from starlette.responses import StreamingResponse

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "date",
        "server",
    }
)
TRANSPORTS = (
    "httpx",
    "httpx-tuned",
    "httpx-fixedpool",
    "aiohttp",
    "aiohttp-lean",
    "httpx-lean",
    "aiohttp-native",
)
BIG_POOL = httpx.Limits(max_connections=256, max_keepalive_connections=256, keepalive_expiry=60)
TIMEOUT = httpx.Timeout(60.0, connect=5.0)


def _end_to_end(headers: Any) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers.items() if k.lower() not in HOP_BY_HOP]


def build_httpx_client(transport: str, upstream: str) -> httpx.AsyncClient:
    if transport == "httpx":
        return httpx.AsyncClient(base_url=upstream, timeout=TIMEOUT)
    if transport == "httpx-tuned":
        pool = httpx.AsyncHTTPTransport(http1=True, http2=False, retries=0, limits=BIG_POOL)
        return httpx.AsyncClient(base_url=upstream, timeout=TIMEOUT, transport=pool, trust_env=False)
    if transport == "httpx-fixedpool":
        from httpcore_pool_fix import fixed_pool_transport  # type: ignore[import-not-found]  # run by its path

        return httpx.AsyncClient(
            base_url=upstream, timeout=TIMEOUT, transport=fixed_pool_transport(BIG_POOL), trust_env=False
        )
    if transport == "aiohttp":
        from httpx_aiohttp import AiohttpTransport

        return httpx.AsyncClient(
            base_url=upstream, timeout=TIMEOUT, transport=AiohttpTransport(limits=BIG_POOL), trust_env=False
        )
    raise ValueError(transport)


Forward = Callable[[Request], Awaitable[Response]]


def httpx_forwarder(client: httpx.AsyncClient) -> Forward:
    async def forward(request: Request) -> Response:
        upstream_request = client.build_request(
            request.method,
            request.url.path,
            params=request.url.query,
            content=await request.body(),
            headers=_end_to_end(request.headers),
        )
        upstream = await client.send(upstream_request, stream=True)
        headers = dict(_end_to_end(upstream.headers))
        if upstream.headers.get("content-type", "").startswith("text/event-stream"):
            return StreamingResponse(
                upstream.aiter_raw(),
                upstream.status_code,
                headers,
                background=BackgroundTask(upstream.aclose),
            )
        try:
            body = b"".join([chunk async for chunk in upstream.aiter_raw()])
        finally:
            await upstream.aclose()
        return Response(body, upstream.status_code, headers)

    return forward


def lean_forwarder(transport: httpx.AsyncBaseTransport, upstream: str) -> Forward:
    base = httpx.URL(upstream)
    urls: dict[str, httpx.URL] = {}
    timeout = {"timeout": TIMEOUT.as_dict()}

    async def forward(request: Request) -> Response:
        path = request.url.path
        url = urls.get(path)
        if url is None:
            url = urls.setdefault(path, base.copy_with(path=path))
        if request.url.query:
            url = url.copy_with(query=request.url.query.encode())
        headers = _end_to_end(request.headers)
        headers.append(("host", base.netloc.decode()))
        upstream_request = httpx.Request(
            request.method, url, content=await request.body(), headers=headers, extensions=timeout
        )
        upstream = await transport.handle_async_request(upstream_request)
        headers_out = dict(_end_to_end(upstream.headers))
        if upstream.headers.get("content-type", "").startswith("text/event-stream"):
            return StreamingResponse(
                upstream.aiter_raw(),
                upstream.status_code,
                headers_out,
                background=BackgroundTask(upstream.aclose),
            )
        try:
            body = b"".join([chunk async for chunk in upstream.aiter_raw()])
        finally:
            await upstream.aclose()
        return Response(body, upstream.status_code, headers_out)

    return forward


def aiohttp_forwarder(session: Any, upstream: str) -> Forward:
    async def forward(request: Request) -> Response:
        url = upstream + request.url.path + (f"?{request.url.query}" if request.url.query else "")
        resp = await session.request(
            request.method,
            url,
            data=await request.body(),
            headers=_end_to_end(request.headers),
            allow_redirects=False,
            auto_decompress=False,
        )
        headers = dict(_end_to_end(resp.headers))
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            return StreamingResponse(
                resp.content.iter_any(), resp.status, headers, background=BackgroundTask(resp.release)
            )
        try:
            body = await resp.read()
        finally:
            resp.release()
        return Response(body, resp.status, headers)

    return forward


def create_app(transport: str, upstream: str) -> FastAPI:
    state: dict[str, Forward] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if transport == "aiohttp-native":
            import aiohttp

            connector = aiohttp.TCPConnector(limit=256, keepalive_timeout=60)
            async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
                state["forward"] = aiohttp_forwarder(session, upstream.rstrip("/"))
                yield
        elif transport in ("aiohttp-lean", "httpx-lean"):
            if transport == "aiohttp-lean":
                from httpx_aiohttp import AiohttpTransport

                lean: httpx.AsyncBaseTransport = AiohttpTransport(limits=BIG_POOL)
            else:
                lean = httpx.AsyncHTTPTransport(http1=True, http2=False, retries=0, limits=BIG_POOL)
            async with lean:
                state["forward"] = lean_forwarder(lean, upstream)
                yield
        else:
            async with build_httpx_client(transport, upstream) as client:
                state["forward"] = httpx_forwarder(client)
                yield

    app = FastAPI(lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None)

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def passthrough(request: Request) -> Response:
        return await state["forward"](request)

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18001)
    parser.add_argument("--upstream", default="http://127.0.0.1:18000", help="upstream origin, no /v1")
    parser.add_argument("--transport", choices=TRANSPORTS, default="httpx")
    parser.add_argument(
        "--lifetime", type=float, default=3600.0, help="stop by itself after this many seconds"
    )
    args = parser.parse_args()
    config = uvicorn.Config(
        create_app(args.transport, args.upstream),
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    timer = threading.Timer(args.lifetime, lambda: signal.raise_signal(signal.SIGTERM))
    timer.daemon = True
    timer.start()
    server.run()


if __name__ == "__main__":
    main()
