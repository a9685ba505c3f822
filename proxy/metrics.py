"""Prometheus metrics, one registry per app (so several apps in one process, as in tests, don't clash).

Labels are only ever the proxy's own small sets (route, status, level, kind): never the model name
or anything else a client chooses, so a hostile client cannot blow up the series count.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from proxy.engine.compaction import CompactionResult

PREFIX = "compacting_proxy_"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
TOKEN_BUCKETS = (256, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 1048576)


class Metrics:
    """The proxy's series, each declared by its name (after `compacting_proxy_`), what it counts and
    its labels."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        counter, gauge = self._counter, self._gauge
        self.requests = counter("requests", "Requests answered, by route and status.", "route", "status")
        self.compactions = counter("compactions", "Requests compacted, by highest level used.", "level")
        self.overflows = counter("overflows", "Requests still over the line after compaction.", "action")
        self.tokens_before = counter("tokens_before", "Estimated prompt tokens received.")
        self.tokens_after = counter("tokens_after", "Estimated prompt tokens forwarded.")
        self.tokens_saved = counter("tokens_saved", "Estimated prompt tokens removed by compaction.")
        self.prompt_tokens = self._histogram(
            "prompt_tokens", "Estimated prompt size of chat requests.", "stage", TOKEN_BUCKETS
        )
        self.upstream_latency = self._histogram(
            "upstream_latency_seconds",
            "Time until the upstream's response headers arrived.",
            "route",
            LATENCY_BUCKETS,
        )
        self.upstream_errors = counter(
            "upstream_errors", "Upstream failures: unreachable, timeout, stream broken, 5xx.", "kind"
        )
        self.streams_open = gauge("streams_open", "Streamed responses being relayed now.")
        self.retries = counter(
            "overflow_retries", "Requests retried after the upstream reported a context overflow.", "outcome"
        )
        self.loop_messages = counter(
            "protected_messages",
            "Messages inside the protected recent part changed by the agent-loop rules, by action.",
            "action",
        )
        self.upstream_truncations = counter(
            "upstream_truncations",
            "Chat answers whose reported prompt size shows the upstream cut the prompt silently.",
        )
        self.table_entries = gauge(
            "table_entries",
            "Entries in the proxy's bounded tables keyed by client input (model names, paths).",
            "table",
        )
        self.table_bytes = gauge(
            "table_bytes",
            "Bytes held by the proxy's in-process memos (notes and caps, summaries): each bounded by "
            "COMPACT_MEMO_BYTES.",
            "table",
        )
        self.summaries = counter("summaries", "Summaries of dropped exchanges, by source.", "source")

    def _counter(self, name: str, documentation: str, *labels: str) -> Counter:
        return Counter(PREFIX + name, documentation, labels, registry=self.registry)

    def _gauge(self, name: str, documentation: str, *labels: str) -> Gauge:
        return Gauge(PREFIX + name, documentation, labels, registry=self.registry)

    def _histogram(self, name: str, documentation: str, label: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(PREFIX + name, documentation, [label], buckets=buckets, registry=self.registry)

    def record_compaction(self, result: CompactionResult) -> None:
        self.prompt_tokens.labels("before").observe(result.tokens_before)
        self.prompt_tokens.labels("after").observe(result.tokens_after)
        self.tokens_before.inc(result.tokens_before)
        self.tokens_after.inc(result.tokens_after)
        if result.changed:
            self.compactions.labels(str(result.level)).inc()
            self.tokens_saved.inc(max(0, result.tokens_before - result.tokens_after))
            for action, indices in (
                ("truncated", result.truncated),
                ("capped", result.capped),
                ("dropped", result.dropped),
            ):
                if inside := len(result.inside_protected(indices)):
                    self.loop_messages.labels(action).inc(inside)

    def watch_table(self, name: str, size: Callable[[], int]) -> None:
        """Report `size()` as the entries of the table `name` whenever metrics are read."""
        self.table_entries.labels(name).set_function(lambda: float(size()))

    def watch_table_bytes(self, name: str, size: Callable[[], int]) -> None:
        """Report `size()` as the bytes of the memo `name` whenever metrics are read."""
        self.table_bytes.labels(name).set_function(lambda: float(size()))

    def render(self) -> bytes:
        return generate_latest(self.registry)
