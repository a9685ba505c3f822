"""An experiment: is httpcore's connection pool what makes httpx slow under concurrency?

httpcore 1.0.9's ``AsyncConnectionPool._assign_requests_to_connections`` hands *every* queued
request the first available connection in one pass (a connection only stops being available once a
request has actually started on it). All but one of them then hit ``ConnectionNotAvailable`` and go
round the loop again, each pass re-checking every connection (``has_expired`` polls each socket).
With 16 clients a profile shows about 12 pool passes per request. It also counts *all* connections,
not the idle ones, against ``max_keepalive_connections``.

This subclass fixes only those two things (an available HTTP/1.1 connection takes one request per
pass; idle connections are counted as idle), so the benchmark can tell the pool's cost from the
rest of httpcore/anyio. It reaches into httpcore internals (``_pool``, ``_requests``,
``_connections``): evidence for a decision, not code for the proxy.
"""

from __future__ import annotations

from typing import Any

import httpcore
import httpx


class OneRequestPerPassPool(httpcore.AsyncConnectionPool):
    def _assign_requests_to_connections(self) -> list[Any]:
        closing: list[Any] = []
        idle_count = sum(1 for c in self._connections if c.is_idle())
        for connection in list(self._connections):
            if connection.is_closed():
                self._connections.remove(connection)
            elif connection.has_expired():
                self._connections.remove(connection)
                closing.append(connection)
            elif connection.is_idle() and idle_count > self._max_keepalive_connections:
                self._connections.remove(connection)
                closing.append(connection)
                idle_count -= 1

        taken: set[int] = set()
        for pool_request in [r for r in self._requests if r.is_queued()]:
            origin = pool_request.request.url.origin
            available = [
                c
                for c in self._connections
                if id(c) not in taken and c.can_handle_request(origin) and c.is_available()
            ]
            if available:
                connection = available[0]
            elif len(self._connections) < self._max_connections:
                connection = self.create_connection(origin)
                self._connections.append(connection)
            else:
                idle = [c for c in self._connections if id(c) not in taken and c.is_idle()]
                if not idle:
                    continue
                self._connections.remove(idle[0])
                closing.append(idle[0])
                connection = self.create_connection(origin)
                self._connections.append(connection)
            taken.add(id(connection))  # HTTP/1.1 only: one request per connection
            pool_request.assign_to_connection(connection)
        return closing


def fixed_pool_transport(limits: httpx.Limits) -> httpx.AsyncHTTPTransport:
    transport = httpx.AsyncHTTPTransport(http1=True, http2=False, retries=0, limits=limits)
    transport._pool = OneRequestPerPassPool(
        ssl_context=None,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        http1=True,
        http2=False,
        retries=0,
    )
    return transport
