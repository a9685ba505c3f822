"""Which headers a request carries to the upstream, and which credentials the proxy's own calls
made for it carry (probes and counts to the upstream, summaries to the upstream or another server).

The client's key for the proxy (`COMPACT_API_KEYS`) is never forwarded; a configured upstream key
replaces the client's credentials, in the header the server of the request's format reads.
"""

from __future__ import annotations

from starlette.requests import Request

from proxy.formats import RouteTable
from proxy.settings import Settings
from proxy.upstream.forwarding import BEARER_OR_GOOGLE_KEY, CREDENTIAL_HEADERS, Upstream, credential_headers

Headers = list[tuple[bytes, bytes]]


class UpstreamHeaders:
    """The headers of one request's calls: its own, the probes' and the summaries'."""

    def __init__(self, settings: Settings, upstream: Upstream, routes: RouteTable) -> None:
        self.settings, self.upstream, self.routes = settings, upstream, routes
        self.proxy_keys = bool(settings.api_keys)

    def for_request(self, request: Request, *, key_header: bytes | None = None) -> Headers:
        """The client's headers for the upstream. A configured upstream key goes in `key_header`,
        else in the header the server of this request's format reads (Anthropic's `x-api-key`,
        Azure's `api-key`), else where the client put its own."""
        incoming = request.headers.raw
        if self.proxy_keys:  # the client's key was for the proxy: it is not forwarded
            incoming = [(k, v) for k, v in incoming if k.lower() not in CREDENTIAL_HEADERS]
        if key_header is None:
            key_header = self.routes.for_path(request.url.path).key_header
        return self.upstream.request_headers(incoming, key_header=key_header)

    def credentials(self, request: Request) -> Headers:
        """What the proxy's own requests to the upstream (probes, counts) carry: the upstream key
        when one is configured, else the client's bearer token (or Gemini API key) unless it was the
        proxy's own key."""
        headers = self.for_request(request, key_header=b"authorization")
        return credential_headers(headers, BEARER_OR_GOOGLE_KEY)

    def for_summary(self, request: Request) -> Headers:
        """What a summary request carries: the summary key when one is configured, nothing for another
        summary server, else the client's headers as for a `/chat/completions` call upstream."""
        settings = self.settings
        if settings.summary_api_key:
            return [(b"authorization", f"Bearer {settings.summary_api_key.get_secret_value()}".encode())]
        if settings.summary_url:
            return []  # another server: the upstream's credentials are not sent there
        return self.for_request(request, key_header=b"authorization")
