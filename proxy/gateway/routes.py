"""The gateway's parts, wired once per app over its pipeline, and its routes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from proxy.gateway.compress import Compressor
from proxy.gateway.contract import DROPPED_MODES
from proxy.gateway.counters import GatewayCounters
from proxy.gateway.originals import Originals
from proxy.gateway.retrieve import Retriever
from proxy.server.pipeline import Pipeline


@dataclass(frozen=True, slots=True)
class Gateway:
    compressor: Compressor
    retriever: Retriever
    originals: Originals | None

    @classmethod
    def wire(cls, pipeline: Pipeline) -> Gateway:
        settings = pipeline.parts.settings
        counters = GatewayCounters(pipeline.parts.metrics)
        originals = None
        if settings.retrieve:
            originals = Originals(
                ttl=settings.retrieve_ttl, max_bytes=settings.retrieve_bytes, redis_url=settings.cache_url
            )
            counters.watch_originals(originals.__len__, lambda: originals.bytes)
        compressor = Compressor(pipeline, originals, counters)
        return cls(compressor, Retriever(originals, counters, settings.max_body_bytes), originals)

    def add_routes(self, app: FastAPI) -> None:
        """`/v1/compress` (also as `/<dropped>/v1/compress`) and `/v1/retrieve`, before the
        upstream's other `/v1` routes."""
        compressor, retriever = self.compressor, self.retriever

        async def compress(request: Request) -> Response:
            return await compressor(request)

        def compress_as(dropped: str) -> Callable[[Request], Awaitable[Response]]:
            async def compress(request: Request) -> Response:
                return await compressor(request, dropped)

            return compress

        async def retrieve(request: Request) -> Response:
            return await retriever.by_body(request)

        async def retrieve_by_hash(request: Request, hash: str) -> Response:
            return await retriever.answer(request, hash)

        app.add_api_route("/v1/compress", compress, methods=["POST"])
        for dropped in DROPPED_MODES:  # for a caller that can only be given a URL (Kong, Portkey)
            app.add_api_route(f"/{dropped}/v1/compress", compress_as(dropped), methods=["POST"])
        app.add_api_route("/v1/retrieve", retrieve, methods=["POST"])
        app.add_api_route("/v1/retrieve/{hash}", retrieve_by_hash, methods=["GET"])

    async def aclose(self) -> None:
        if self.originals is not None:
            await self.originals.close()
