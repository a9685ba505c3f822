"""Prometheus metrics, one registry per app (so several apps in one process, as in tests, don't clash).

Labels are only ever the proxy's own small sets (route, status, level, kind): never the model name
or anything else a client chooses, so a hostile client cannot blow up the series count.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from proxy.engine.compaction import CompactionResult

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
TOKEN_BUCKETS = (256, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 1048576)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "compacting_proxy_requests",
            "Requests answered, by route and status.",
            ["route", "status"],
            registry=r,
        )
        self.compactions = Counter(
            "compacting_proxy_compactions",
            "Requests compacted, by highest level used.",
            ["level"],
            registry=r,
        )
        self.overflows = Counter(
            "compacting_proxy_overflows",
            "Requests still over the line after compaction.",
            ["action"],
            registry=r,
        )
        self.tokens_before = Counter(
            "compacting_proxy_tokens_before", "Estimated prompt tokens received.", registry=r
        )
        self.tokens_after = Counter(
            "compacting_proxy_tokens_after", "Estimated prompt tokens forwarded.", registry=r
        )
        self.tokens_saved = Counter(
            "compacting_proxy_tokens_saved", "Estimated prompt tokens removed by compaction.", registry=r
        )
        self.prompt_tokens = Histogram(
            "compacting_proxy_prompt_tokens",
            "Estimated prompt size of chat requests.",
            ["stage"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.upstream_latency = Histogram(
            "compacting_proxy_upstream_latency_seconds",
            "Time until the upstream's response headers arrived.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_errors = Counter(
            "compacting_proxy_upstream_errors",
            "Upstream failures: unreachable, timeout, stream broken, 5xx.",
            ["kind"],
            registry=r,
        )
        self.streams_open = Gauge(
            "compacting_proxy_streams_open", "Streamed responses being relayed now.", registry=r
        )
        self.retries = Counter(
            "compacting_proxy_overflow_retries",
            "Requests retried after the upstream reported a context overflow.",
            ["outcome"],
            registry=r,
        )
        self.loop_messages = Counter(
            "compacting_proxy_protected_messages",
            "Messages inside the protected recent part changed by the agent-loop rules, by action.",
            ["action"],
            registry=r,
        )
        self.upstream_truncations = Counter(
            "compacting_proxy_upstream_truncations",
            "Chat answers whose reported prompt size shows the upstream cut the prompt silently.",
            registry=r,
        )
        self.table_entries = Gauge(
            "compacting_proxy_table_entries",
            "Entries in the proxy's bounded tables keyed by client input (model names, paths).",
            ["table"],
            registry=r,
        )
        self.table_bytes = Gauge(
            "compacting_proxy_table_bytes",
            "Bytes held by the proxy's in-process memos (notes and caps, summaries): each bounded by "
            "COMPACT_MEMO_BYTES.",
            ["table"],
            registry=r,
        )
        self.summaries = Counter(
            "compacting_proxy_summaries", "Summaries of dropped exchanges, by source.", ["source"], registry=r
        )

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
