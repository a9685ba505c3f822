"""What `/metrics` counts of the gateway contract, on the app's own registry: `/v1/compress` calls
by outcome, `/v1/retrieve` lookups by outcome, and the bytes of originals kept."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Counter

from proxy.metrics import Metrics


class GatewayCounters:
    def __init__(self, metrics: Metrics) -> None:
        self.compress = Counter(
            "compacting_proxy_compress_calls",
            "/v1/compress calls, by outcome: compressed, unchanged, bypass, audit, failed_open, invalid.",
            ["outcome"],
            registry=metrics.registry,
        )
        self.retrieve = Counter(
            "compacting_proxy_retrievals",
            "/v1/retrieve lookups, by outcome: found, missing, off.",
            ["outcome"],
            registry=metrics.registry,
        )
        self.metrics = metrics

    def watch_originals(self, entries: Callable[[], int], size: Callable[[], int]) -> None:
        """The originals kept in this process, in the tables' gauges."""
        self.metrics.watch_table("originals", entries)
        self.metrics.watch_table_bytes("originals", size)
