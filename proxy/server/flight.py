"""One request in flight (mitmproxy's `flow` is the model): built when the request is read, handed
to every step of `pipeline.py`, each step filling in what it learns (the body, the conversation, the
way upstream, the plan, the live page's record); what goes upstream is asked of it (`outgoing`, the
headers and query; `content`, the bytes).

`Credentials` says which headers the request carries upstream and which the proxy's own calls made
for it carry (probes and counts to the upstream, summaries to the upstream or another server). The
client's key for the proxy (`COMPACT_API_KEYS`) is never forwarded; a configured upstream key
replaces the client's credentials, in the header the server of the request's format reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from proxy.engine.plan import ChatPlan
from proxy.formats import Conversation, FormatRoute
from proxy.live import Record
from proxy.server.intake import raw_path
from proxy.server.logs import request_id
from proxy.settings import Settings
from proxy.upstream.forwarding import BEARER_OR_GOOGLE_KEY, CREDENTIAL_HEADERS, Upstream, credential_headers
from proxy.ways.base import Way
from proxy.ways.passing import Passing

Headers = list[tuple[bytes, bytes]]
PASSTHROUGH = "passthrough"  # the metrics label of a request sent as it came


@dataclass(slots=True, eq=False)
class Flight:
    """One request on its way: the client's request, the route whose format it speaks, its way
    upstream, its bytes (decoded on a compacted route, and as the proxy's own edits left them), and
    once read and planned, its body, conversation, plan and record."""

    request: Request
    route: FormatRoute
    way: Way
    raw: bytes
    compacted: bool  # a compacted route's: its body was read decoded, and is sent so
    body: dict[str, Any] | None = None
    conversation: Conversation | None = None
    plan: ChatPlan | None = None
    record: Record | None = None
    resend: bytes | None = None  # what goes once more after a refusal its format repaired

    @property
    def label(self) -> str:
        """Its metrics label: its format's name on a compacted route."""
        return self.route.format.name if self.compacted else PASSTHROUGH

    def outgoing(self, credentials: Credentials) -> tuple[Headers, bytes]:
        """The headers and query it goes upstream with, as its way makes them from the client's: with
        its request id, and on a compacted route without `content-encoding` (the body was decoded)."""
        query: bytes = self.request.scope.get("query_string", b"")
        client = credentials.for_request(self.request, self.route.key_header)
        headers, query = self.way.outgoing(client, query)
        if self.compacted:
            headers = [(k, v) for k, v in headers if k.lower() != b"content-encoding"]
        if b"x-request-id" not in {k.lower() for k, _ in headers}:
            headers.append((b"x-request-id", request_id.get().encode()))
        return headers, query

    def content(self) -> bytes:
        """What goes upstream: the way's bytes for the plan, or the bytes as they came."""
        if self.resend is not None:
            return self.resend
        if self.plan is None or self.body is None or self.conversation is None:
            return self.raw
        return self.way.content(self.raw, self.body, self.conversation, self.plan)

    @classmethod
    def read(cls, request: Request, route: FormatRoute, raw: bytes) -> Flight:
        """A compacted route's request, as read: it goes where its route sends it, as it came,
        until it is planned."""
        way = Passing(route.upstream_path or raw_path(request), route.from_root)
        return cls(request, route, way, raw, compacted=True)


class Credentials:
    """The headers of one request's calls: its own, the probes' and the summaries'."""

    def __init__(self, settings: Settings, upstream: Upstream) -> None:
        self.settings, self.upstream = settings, upstream
        self.proxy_keys = bool(settings.api_keys)

    def for_request(self, request: Request, key_header: bytes | None) -> Headers:
        """The client's headers for the upstream. A configured upstream key goes in `key_header`
        (the header the server of this request's format reads: Anthropic's `x-api-key`, Azure's
        `api-key`), else where the client put its own."""
        incoming = request.headers.raw
        if self.proxy_keys:  # the client's key was for the proxy: it is not forwarded
            incoming = [(k, v) for k, v in incoming if k.lower() not in CREDENTIAL_HEADERS]
        return self.upstream.request_headers(incoming, key_header=key_header)

    def credentials(self, request: Request) -> Headers:
        """What the proxy's own requests to the upstream (probes, counts) carry: the upstream key
        when one is configured, else the client's bearer token (or Gemini API key) unless it was the
        proxy's own key."""
        headers = self.for_request(request, b"authorization")
        return credential_headers(headers, BEARER_OR_GOOGLE_KEY)

    def for_summary(self, request: Request) -> Headers:
        """What a summary request carries: the summary key when one is configured, nothing for another
        summary server, else the client's headers as for a `/chat/completions` call upstream."""
        settings = self.settings
        if settings.summary_api_key:
            return [(b"authorization", f"Bearer {settings.summary_api_key.get_secret_value()}".encode())]
        if settings.summary_url:
            return []  # another server: the upstream's credentials are not sent there
        return self.for_request(request, b"authorization")
