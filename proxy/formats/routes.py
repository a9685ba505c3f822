"""The one table that routes the wire formats: each compacted path with its format (the adapter,
its error shape, its metrics label), where it goes upstream, the other paths that speak it, and
where a configured upstream key goes. The server reads everything per format from here, and asks
the format object itself, never its name; a new format is one module and one `FormatRoute`. What
else a format's requests may take is registered by that format object: a bridge to a server of
another API (`proxy.ways.choice`), a step before all others (`proxy.server.remote_compaction`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from starlette.routing import compile_path

from proxy.formats.anthropic import AnthropicMessages
from proxy.formats.base import WireFormat
from proxy.formats.chat import ChatCompletions
from proxy.formats.gemini import Gemini
from proxy.formats.ollama import OllamaChat
from proxy.formats.responses import Responses

CHAT = ChatCompletions()
AZURE = ChatCompletions(model_param="deployment", name="azure")
OLLAMA = OllamaChat()
RESPONSES = Responses()
ANTHROPIC = AnthropicMessages()
GEMINI, GEMINI_STREAM = Gemini(stream=False), Gemini(stream=True)


@dataclass(frozen=True, slots=True)
class FormatRoute:
    """A compacted route (a path in one wire format; not Starlette's `Route`): the proxy's path
    (FastAPI syntax), its format, and where it goes upstream: `upstream_path` relative to the
    upstream's base URL, or the client's own path when None; `from_root` against the server's root
    (the base without `/v1`) instead. `scope`: the other paths whose requests speak this format (an
    entry ending in `/` is a prefix, else a path), for their error shape and key header;
    `key_header`: where a configured upstream key goes when this server reads its own header;
    `documented`: in the OpenAPI schema; `report_body`: the dry run shows the rewritten body, not
    only the messages."""

    path: str
    format: WireFormat
    upstream_path: str | None
    from_root: bool = False
    scope: tuple[str, ...] = ()
    key_header: bytes | None = None
    documented: bool = False
    report_body: bool = True


@dataclass(frozen=True, slots=True)
class Passthrough:
    """The upstream's other routes under `prefix`, forwarded as they are: without the `/v1` prefix
    (the upstream's base URL has it) when `strip`, against the server's root when `from_root`."""

    prefix: str
    strip: bool = False
    from_root: bool = False

    def upstream_path(self, path: str) -> str:
        return path.removeprefix(self.prefix) if self.strip else path


ROUTES: tuple[FormatRoute, ...] = (
    FormatRoute("/v1/chat/completions", CHAT, "/chat/completions", documented=True, report_body=False),
    FormatRoute("/v1/responses", RESPONSES, "/responses"),
    FormatRoute(
        "/v1/messages",
        ANTHROPIC,
        "/messages",
        scope=("/v1/messages", "/v1/messages/"),
        key_header=b"x-api-key",
    ),
    FormatRoute("/api/chat", OLLAMA, "/api/chat", from_root=True, scope=("/api/",)),
    FormatRoute(
        "/openai/deployments/{deployment}/chat/completions",
        AZURE,
        None,
        from_root=True,
        scope=("/openai/", "/deployments/"),
        key_header=b"api-key",
    ),
    FormatRoute("/deployments/{deployment}/chat/completions", AZURE, None, key_header=b"api-key"),
    # Google's Gemini API: one format, its two methods (the path says whether it streams).
    *(
        FormatRoute(
            f"/v1beta/models/{{model}}:{method}",
            wire,
            None,
            from_root=True,
            scope=("/v1beta/",),
            key_header=b"x-goog-api-key",
        )
        for method, wire in (("generateContent", GEMINI), ("streamGenerateContent", GEMINI_STREAM))
    ),
)
PASSTHROUGHS: tuple[Passthrough, ...] = (
    Passthrough("/v1", strip=True),  # any other route of the upstream's
    Passthrough("/api", from_root=True),  # Ollama's native API (not compacted)
    Passthrough("/openai", from_root=True),  # Azure OpenAI's other routes, like its chat
    Passthrough("/deployments"),
    Passthrough("/v1beta", from_root=True),  # the Gemini API's other methods (`:countTokens`, models)
)
# Metrics labels of the proxy's own paths.
OWN_PATHS = {
    "/compact": "compact",
    "/healthz": "healthz",
    "/readyz": "readyz",
    "/metrics": "metrics",
    "/v1/compress": "compress",
    "/v1/retrieve": "retrieve",
}


class RouteTable:
    """The routes looked up by path or format name. The first route is the default: its format
    answers for any path no route's scope covers, and `/compact` speaks it."""

    def __init__(
        self, routes: Iterable[FormatRoute] = ROUTES, passthroughs: Iterable[Passthrough] = PASSTHROUGHS
    ) -> None:
        self.routes = tuple(routes)
        self.passthroughs = tuple(passthroughs)
        self.default = self.routes[0]
        self._patterns = tuple((compile_path(r.path)[0], r) for r in self.routes)
        self._by_format: dict[str, FormatRoute] = {}
        for route in self.routes:
            self._by_format.setdefault(route.format.name, route)
        self._exact = {s: r for r in self.routes for s in r.scope if not s.endswith("/")}
        self._prefixes = tuple((s, r) for r in self.routes for s in r.scope if s.endswith("/"))
        self._passthrough_prefixes = tuple(p.prefix + "/" for p in self.passthroughs)

    def match(self, path: str) -> tuple[FormatRoute, dict[str, str]] | None:
        """The compacted route `path` is, with its path parameters."""
        for pattern, route in self._patterns:
            if match := pattern.fullmatch(path):
                return route, match.groupdict()
        return None

    def for_path(self, path: str) -> FormatRoute:
        """The route whose format a request to `path` speaks, compacted or not: whose error shape it
        expects (Anthropic's under `/v1/messages`) and whose server reads its key (Azure's `api-key`)."""
        if (route := self._exact.get(path)) is not None:
            return route
        for prefix, route in self._prefixes:
            if path.startswith(prefix):
                return route
        return self.default

    def for_format(self, name: str) -> FormatRoute | None:
        """The first route of the format named `name` (the dry run's `format` field)."""
        return self._by_format.get(name)

    def label(self, path: str) -> str:
        """The metrics label of a path: the format of a compacted route, else what kind of path it is."""
        matched = self.match(path)
        if matched is not None:
            return matched[0].format.name
        if (own := OWN_PATHS.get(path)) is not None or path.startswith("/v1/retrieve/"):
            return own or "retrieve"
        if path.startswith(self._passthrough_prefixes):
            return "passthrough"
        return "other"
