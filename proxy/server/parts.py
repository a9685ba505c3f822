"""The proxy's parts, wired once per app over one upstream transport.

`Parts.wire` builds them from the settings: the upstream (the hot path's pooled sender), an httpx
client over the same transport for the calls off the hot path (window probes, exact counts, Ollama's
`/api/show`, summaries), the planner, the room where a large body is worked on off the loop, the
Ollama probe, the bridges, the summariser and its cache, the `/readyz` check and the choice of
headers sent upstream; it registers their tables with the metrics.
With `COMPACT_CACHE_URL` set, the learned tables are shared with the other replicas
(`proxy.sharing.link`, plugged in by `share_learning`). `start` starts what runs in the
background; `aclose` closes what they opened. What a request does with them is `pipeline.py`.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import time
from dataclasses import dataclass
from typing import Any

import httpx

from proxy.bodies.work import Bodies
from proxy.formats import RouteTable
from proxy.live import Records
from proxy.live.shared import SharedRecords
from proxy.metrics import Metrics
from proxy.planning.planner import Planner
from proxy.server.flight import Credentials
from proxy.server.readiness import Readiness
from proxy.settings import Settings
from proxy.sharing.link import SharedCalibrator, SharedState, SharedTable
from proxy.sharing.summaries import SummaryCache
from proxy.upstream.forwarding import Upstream, build_timeout
from proxy.upstream.probes import DetectedWindow, UpstreamTokenCounter, WindowDetector
from proxy.upstream.summarizer import Summarizer
from proxy.ways.choice import Bridges
from proxy.ways.gemini.choice import GeminiOnChat
from proxy.ways.ollama.choice import OllamaNative
from proxy.ways.ollama.detection import OllamaUpstream


@dataclass(frozen=True, slots=True)
class Parts:
    """Everything a request's steps use, built once per app."""

    settings: Settings
    metrics: Metrics
    routes: RouteTable
    upstream: Upstream
    http: httpx.AsyncClient
    planner: Planner
    bodies: Bodies  # a large body parsed, read and freed off the event loop
    ollama: OllamaUpstream
    bridges: Bridges  # which bridge a request takes, if any (Ollama's is one)
    summarizer: Summarizer | None
    credentials: Credentials  # the headers of a request's calls upstream
    readiness: Readiness
    api_keys: list[bytes]  # the keys clients give the proxy itself
    records: Records  # what the live page shows
    shared: SharedState | None  # the learned tables' link to the other replicas

    @classmethod
    def wire(
        cls, settings: Settings, transport: httpx.AsyncBaseTransport, metrics: Metrics, routes: RouteTable
    ) -> Parts:
        key = settings.upstream_api_key.get_secret_value() if settings.upstream_api_key else None
        upstream = Upstream(transport, settings.upstream_url, key, build_timeout(settings))
        # Probes and summaries are off the hot path: they may use the client's conveniences.
        http = httpx.AsyncClient(
            transport=transport,
            timeout=build_timeout(settings),
            trust_env=False,
            headers={"accept-encoding": "gzip, deflate"},  # what `read_decoded` can undo, bounded
        )
        detector = WindowDetector(http, settings.upstream_url, refresh=settings.window_refresh)
        exact = UpstreamTokenCounter(http, settings.upstream_url)
        shared = SharedState(settings.cache_url) if settings.cache_url else None
        planner = Planner(settings, detector=detector, exact=exact, metrics=metrics)
        ollama = OllamaUpstream(http, settings)
        if shared:
            share_learning(shared, planner, detector, ollama)
        summarizer = summarizer_for(settings, http)
        for name, table in (
            ("windows", detector.cache),
            ("ollama_windows", ollama.windows),
            ("ollama_unknown", ollama.window_retry),
            ("calibration", planner.calibrator),
            ("seen_windows", planner.seen_windows),
            ("notes", planner.notes),
            ("upstream_urls", upstream.urls),
        ):
            metrics.watch_table(name, functools.partial(len, table))
        metrics.watch_table_bytes("notes", lambda: planner.notes.bytes)
        if summarizer is not None:
            metrics.watch_table_bytes("summaries", lambda: summarizer.cache.local.bytes)
        records = Records(settings, planner.counter_for)
        if shared and records.enabled:
            SharedRecords(shared, records)  # every replica's page shows every replica's traffic
        metrics.watch_table("ui_records", functools.partial(len, records))
        metrics.watch_table("ui_pages", functools.partial(len, records.pages))
        metrics.watch_table_bytes("ui_pages", lambda: records.pages.backlog_bytes)
        return cls(
            settings=settings,
            metrics=metrics,
            routes=routes,
            upstream=upstream,
            http=http,
            planner=planner,
            bodies=Bodies(planner.offloader),
            ollama=ollama,
            bridges=Bridges((OllamaNative(ollama), GeminiOnChat.from_settings(settings, ollama))),
            summarizer=summarizer,
            credentials=Credentials(settings, upstream),
            readiness=Readiness(upstream, needs_upstream=settings.ready_needs_upstream),
            api_keys=[key.get_secret_value().encode() for key in settings.api_keys],
            records=records,
            shared=shared,
        )

    async def start(self) -> None:
        """Start what must start while the process is small (the large bodies' parsing children), then
        read the vocabularies the planner counts with (0.1-1 s each, in a worker thread), before the
        process serves anything, `/readyz` included: never inside a request. Then start sharing what
        this replica learns (in the background: requests never wait for it)."""
        self.bodies.start()
        await asyncio.to_thread(self.planner.vocabularies.load)
        # What they left in Python objects (a tiktoken vocabulary's 150,000 ranks, with the extra),
        # left out of every later collection, as the app's own objects are.
        gc.collect()
        gc.freeze()
        if self.shared:
            await self.shared.start()

    async def aclose(self, *, transport: bool) -> None:
        """Close the summary cache, and the transport too when the app built it."""
        if self.summarizer:
            await self.summarizer.cache.close()
        if self.shared:
            await self.shared.close()
        if transport:
            await self.http.aclose()  # closes the transport too


def summarizer_for(settings: Settings, http: httpx.AsyncClient) -> Summarizer | None:
    """Level 3's summariser and its cache, when summaries are on."""
    if not settings.summarize:
        return None
    cache = SummaryCache(
        size=settings.cache_size,
        redis_url=settings.cache_url,
        ttl=settings.cache_ttl,
        max_bytes=settings.memo_bytes,
    )
    return Summarizer(
        http,
        settings.summary_url or settings.upstream_url,
        cache,
        model=settings.summary_model,
        max_tokens=settings.summary_tokens,
        timeout=settings.summary_timeout,
    )


def share_learning(
    shared: SharedState, planner: Planner, detector: WindowDetector, ollama: OllamaUpstream
) -> None:
    """Swap the learned tables for shared ones: the calibration (the last one learned anywhere wins),
    the windows an upstream was seen cutting at (the smallest wins), the detected windows (with their
    expiry on the wall clock), and the `num_ctx` chosen per Ollama model (the first one known is
    kept: another makes Ollama reload the model)."""
    calibrator = SharedCalibrator(shared, planner.settings.calibrate)
    planner.calibrator = planner.reports.calibrator = calibrator
    seen: SharedTable[int] = SharedTable(shared, "seen_windows", encode=int, decode=int, merge=_smallest)
    planner.seen_windows = planner.reports.seen_windows = seen

    def encode(entry: tuple[float, DetectedWindow | None]) -> Any:
        expires, found = entry
        return (
            None if found is None else [time.time() + expires - detector.clock(), found.tokens, found.source]
        )

    def decode(value: Any) -> tuple[float, DetectedWindow | None]:
        expires, tokens, source = value
        return detector.clock() + float(expires) - time.time(), DetectedWindow(int(tokens), str(source))

    detector.cache = SharedTable(shared, "windows", encode=encode, decode=decode)
    ollama.windows = SharedTable(
        shared,
        "ollama_windows",
        encode=int,
        decode=int,
        merge=lambda local, got: got if local is None else local,
    )


def _smallest(local: int | None, received: int) -> int:
    return received if local is None else min(local, received)
