"""Knowing an Ollama upstream: whether the upstream is Ollama, and which window each model gets.

Ollama runs a model at a context it chooses (4,096 tokens on a laptop) and, when a prompt is longer,
silently drops the oldest messages. Its OpenAI-compatible `/v1` ignores `options`, so an OpenAI
client cannot ask for more. Its native `/api/chat` takes `options.num_ctx`: the proxy sends OpenAI
chats there (see `proxy.ways.ollama.native_request`) with the window it compacts for, so the window is set, not
guessed.

The window per model is chosen once and kept (a different `num_ctx` makes Ollama reload the model):
the configured window, else the Modelfile's `num_ctx`, else the model's trained length capped by
`COMPACT_OLLAMA_MAX_NUM_CTX` (memory grows with the context).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

import httpx
import orjson

from proxy.counting.cache import ModelTable
from proxy.counting.tokens import token_count
from proxy.settings import Settings
from proxy.upstream.forwarding import credential_headers, root_url
from proxy.upstream.probes import fetch, fetch_json, ollama_model_info, short
from proxy.ways.ollama.bridge import OllamaBridge
from proxy.ways.ollama.native_request import to_ollama_chat

log = logging.getLogger("proxy.ollama")

RawHeaders = Sequence[tuple[bytes, bytes]]


class OllamaUpstream:
    """Asks the upstream once whether it is Ollama (`GET /api/version`, unless `COMPACT_UPSTREAM_KIND`
    says: any answer but Ollama's means no), and each model's window (`POST /api/show`). A question
    that got no answer is asked again after `refresh` seconds; answers are kept."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        settings: Settings,
        *,
        refresh: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.settings = settings
        # The upstream may be given as Ollama's root or as its OpenAI-compatible `.../v1`.
        self.root_url = root_url(settings.upstream_url)
        self.refresh = refresh
        self.clock = clock
        self._kind: bool | None = {"ollama": True, "openai": False, "anthropic": False}.get(
            settings.upstream_kind
        )
        self._kind_retry = 0.0
        self._asking = asyncio.Lock()
        self.windows: ModelTable[int] = ModelTable()
        self.window_retry: ModelTable[float] = ModelTable()

    async def is_ollama(self, headers: RawHeaders = ()) -> bool:
        if self._kind is None and self.clock() >= self._kind_retry:
            async with self._asking:
                if self._kind is None and self.clock() >= self._kind_retry:
                    await self._ask_kind(headers)
        return bool(self._kind)

    async def _ask_kind(self, headers: RawHeaders) -> None:
        answer = await fetch(self.client, "GET", f"{self.root_url}/api/version", credential_headers(headers))
        if answer is None:  # no answer (yet): not Ollama for now, asked again later
            log.warning("could not ask the upstream whether it is Ollama")
            self._kind_retry = self.clock() + self.refresh
            return
        try:
            version = orjson.loads(answer[1]).get("version") if answer[0] == 200 else None
        except (orjson.JSONDecodeError, AttributeError):
            version = None
        self._kind = isinstance(version, str)
        if self._kind:
            log.info("the upstream is Ollama %s: OpenAI chats go to its /api/chat", version)

    async def bridge(self, body: dict[str, object], headers: RawHeaders = ()) -> OllamaBridge | None:
        """The way to send this OpenAI chat to Ollama's native API with its window set, or None: not
        Ollama, `COMPACT_OLLAMA_NUM_CTX` off, or a request the native API cannot carry faithfully
        (it then goes to `/v1` as it is)."""
        if not self.settings.ollama_num_ctx or not await self.is_ollama(headers):
            return None
        if to_ollama_chat(body, num_ctx=1) is None:
            return None
        options = body.get("options")
        if asked := token_count(options.get("num_ctx") if isinstance(options, dict) else None):
            return OllamaBridge.for_request(body, asked)  # the client set it (`extra_body`): it wins
        return OllamaBridge.for_request(body, await self.num_ctx(str(body.get("model") or ""), headers))

    async def native_window(self, model: str, headers: RawHeaders = ()) -> int | None:
        """The window `model` gets on Ollama's native API, or None: not Ollama, or
        `COMPACT_OLLAMA_NUM_CTX` off (for requests another bridge carries there)."""
        if not self.settings.ollama_num_ctx or not await self.is_ollama(headers):
            return None
        return await self.num_ctx(model, headers)

    async def num_ctx(self, model: str, headers: RawHeaders = ()) -> int:
        """The window `model` runs at when the proxy sends it: chosen once, then kept (only models
        Ollama has are kept, so the table stays as small as its model list)."""
        if (known := self.windows.get(model)) is not None:
            return known
        configured = self.settings.window_for(model)
        if not configured.auto:
            return configured.window
        if self.clock() < (self.window_retry.get(model) or 0.0):
            return min(configured.window, self.settings.ollama_max_num_ctx)
        show = await fetch_json(
            self.client, "POST", f"{self.root_url}/api/show", credential_headers(headers), {"model": model}
        )
        info = ollama_model_info(show)
        if info is None:
            log.warning(
                "Ollama gave no window for model %r; num_ctx %d for now", short(model), configured.window
            )
            self.window_retry[model] = self.clock() + self.refresh
            return min(configured.window, self.settings.ollama_max_num_ctx)
        if info.num_ctx:  # Ollama never runs a model past its trained length
            window, why = min(info.num_ctx, info.trained or info.num_ctx), "its Modelfile's num_ctx"
        else:
            trained = info.trained or configured.window
            window = min(trained, self.settings.ollama_max_num_ctx)
            why = f"trained for {trained}, COMPACT_OLLAMA_MAX_NUM_CTX {self.settings.ollama_max_num_ctx}"
        log.info("Ollama model %r runs with num_ctx %d (%s)", short(model), window, why)
        self.windows[model] = window
        return window
