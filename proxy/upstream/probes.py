"""What the upstream can tell about itself: a model's real window, and a prompt's real token count.

Window detection asks, in order, what each kind of server answers: an OpenAI-style `/v1/models`
entry that carries a context length (vLLM's `max_model_len`, LM Studio's and OpenRouter's fields),
llama.cpp's `/props` (the `n_ctx` of a slot, which is what a request gets), and Ollama's `/api/ps`
(the `context_length` a loaded model runs at) or `/api/show` (`num_ctx` from its parameters, else
Ollama's smallest default context, at most the model's trained `context_length`), and the Gemini
API's model (`inputTokenLimit`, asked with the client's `x-goog-api-key`). The parsing is pure;
`WindowDetector` does the I/O, caches each
answer for a refresh interval, and asks once per model however many requests arrive together.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from proxy.counting.cache import ModelTable
from proxy.counting.tokens import token_count
from proxy.upstream.forwarding import (
    BEARER_OR_GOOGLE_KEY,
    AnswerTooLarge,
    credential_headers,
    read_decoded,
    root_url,
)

log = logging.getLogger("proxy.probes")

PROBE_TIMEOUT = httpx.Timeout(5.0)
# The most of a probe's answer read, once decoded: Ollama's `/api/show` with its template and license,
# or a router's whole model list, are well under it; a hostile upstream's gzip bomb is cut at it.
MAX_PROBE_BYTES = 16 * 1024 * 1024
# The longest model name asked about by name (Ollama's `/api/show`, the Gemini API's model): Ollama
# v0.33 takes at most 350 + 3 x 80 characters and separators (types/model/name.go), Gemini's and
# vLLM's names are far shorter; a longer one is no server's, and would be sent whole in each probe.
MAX_ASKED_NAME_CHARS = 1024
MODEL_LENGTH_FIELDS = (
    "max_model_len",
    "loaded_context_length",
    "context_length",
    "context_window",
    "max_context_length",
)


@dataclass(frozen=True, slots=True)
class DetectedWindow:
    tokens: int
    source: str


def window_from_models(payload: Any, model: str) -> DetectedWindow | None:
    """From an OpenAI-style model list: the entry named `model` (or the only entry)."""
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        return None
    entries = [e for e in data if isinstance(e, dict)]
    matches = [e for e in entries if e.get("id") == model] or (entries if len(entries) == 1 else [])
    for entry in matches:
        for name in MODEL_LENGTH_FIELDS:
            if tokens := token_count(entry.get(name)):
                return DetectedWindow(tokens, f"/v1/models {name}")
    return None


def window_from_llama_props(payload: Any) -> DetectedWindow | None:
    """From llama.cpp's `/props`: the context of one slot (the server's `-c` divided by `-np`)."""
    if not isinstance(payload, dict):
        return None
    settings = payload.get("default_generation_settings")
    if isinstance(settings, dict) and (tokens := token_count(settings.get("n_ctx"))):
        return DetectedWindow(tokens, "llama.cpp /props n_ctx")
    return None


def window_from_ollama_ps(payload: Any, model: str) -> DetectedWindow | None:
    """From Ollama's `/api/ps`: the context a loaded model runs at right now."""
    models = payload.get("models") if isinstance(payload, dict) else None
    for entry in models if isinstance(models, list) else ():
        named = isinstance(entry, dict) and model in (entry.get("name"), entry.get("model"))
        if named and (tokens := token_count(entry.get("context_length"))):
            return DetectedWindow(tokens, "ollama /api/ps context_length (in effect)")
    return None


_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)
# Ollama's default context when neither the request, the Modelfile nor OLLAMA_CONTEXT_LENGTH sets one
# is chosen by VRAM: 4,096 below 24 GiB, 32,768 below 48 GiB, 262,144 above (server/routes.go, v0.33).
# The proxy cannot see the VRAM, so it assumes the smallest: compacting early beats a silent cut.
OLLAMA_DEFAULT_CONTEXT = 4096


@dataclass(frozen=True, slots=True)
class OllamaModelInfo:
    """What Ollama's `/api/show` says about a model's window."""

    num_ctx: int | None  # set in its parameters (the Modelfile's `PARAMETER num_ctx`)
    trained: int | None  # `model_info["<arch>.context_length"]`: the most it can run at


def ollama_model_info(payload: Any) -> OllamaModelInfo | None:
    if not isinstance(payload, dict):
        return None
    num_ctx = trained = None
    parameters = payload.get("parameters")
    if isinstance(parameters, str) and (match := _NUM_CTX.search(parameters)):
        num_ctx = token_count(int(match.group(1)))
    info = payload.get("model_info")
    if isinstance(info, dict):
        trained = next((v for k, v in info.items() if k.endswith(".context_length") and token_count(v)), None)
    return OllamaModelInfo(num_ctx, trained) if num_ctx or trained else None


def window_from_ollama_show(payload: Any) -> DetectedWindow | None:
    """From Ollama's `/api/show`: `num_ctx` set in the model's parameters, else the default context a
    request without `num_ctx` gets (never more than the trained length)."""
    info = ollama_model_info(payload)
    if info is None:
        return None
    if info.num_ctx:
        return DetectedWindow(info.num_ctx, "ollama /api/show num_ctx parameter")
    tokens = min(OLLAMA_DEFAULT_CONTEXT, info.trained or OLLAMA_DEFAULT_CONTEXT)
    return DetectedWindow(tokens, "ollama default context (its smallest; /api/show has no num_ctx)")


def window_from_gemini_model(payload: Any) -> DetectedWindow | None:
    """From the Gemini API's `GET /v1beta/models/{model}`: its `inputTokenLimit`."""
    tokens = token_count(payload.get("inputTokenLimit")) if isinstance(payload, dict) else None
    return DetectedWindow(tokens, "Gemini API inputTokenLimit") if tokens else None


async def fetch(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    headers: Sequence[tuple[bytes, bytes]],
    content: bytes | None = None,
    *,
    timeout: httpx.Timeout | float = PROBE_TIMEOUT,
    limit: int = MAX_PROBE_BYTES,
) -> tuple[int, bytes] | None:
    """The status and the decoded body of an answer to one of the proxy's own requests, read within
    `limit` bytes, compressed or not; None when there is no answer or it is too large to read."""
    try:
        request = client.build_request(method, url, headers=list(headers), content=content, timeout=timeout)
        response = await client.send(request, stream=True)
        try:
            return response.status_code, await read_decoded(response, limit)
        finally:
            # httpx binds the stream to its response, a cycle that would keep the request's body
            # until a full collection (the serving process runs few: `server/collector.py`).
            response.stream = EMPTY_STREAM
    except AnswerTooLarge as exc:
        log.warning("the upstream's answer to %s %s was too large: %s", method, httpx.URL(url).path, exc)
        return None
    except (httpx.HTTPError, ValueError):
        return None


async def fetch_json(
    client: httpx.AsyncClient, method: str, url: str, headers: Sequence[tuple[bytes, bytes]], body: Any = None
) -> Any:
    """The JSON of a 200 answer, or None for anything else: no answer, another status, not JSON."""
    answer = await fetch(client, method, url, headers, orjson.dumps(body) if body is not None else None)
    if answer is None or answer[0] != 200:
        return None
    try:
        return orjson.loads(answer[1])
    except orjson.JSONDecodeError:
        return None


EMPTY_STREAM = httpx.ByteStream(b"")


def askable(model: str) -> bool:
    """Whether a server could have a model of this name: else it is not asked about by name."""
    return len(model) <= MAX_ASKED_NAME_CHARS


def short(name: str, limit: int = 200) -> str:
    """A client's name as a log line shows it: its head, when it is long."""
    return name if len(name) <= limit else f"{name[:limit]}... ({len(name)} chars)"


class WindowDetector:
    """Asks the upstream for each model's window; caches answers (and failures) for `refresh` s."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        *,
        refresh: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.root_url = root_url(base_url)
        self.refresh = refresh
        self.clock = clock
        self.cache: ModelTable[tuple[float, DetectedWindow | None]] = ModelTable()
        self._pending: dict[str, asyncio.Future[DetectedWindow | None]] = {}

    async def window(self, model: str, headers: Sequence[tuple[bytes, bytes]] = ()) -> DetectedWindow | None:
        cached = self.cache.get(model)
        if cached and self.clock() < cached[0]:
            return cached[1]
        if model in self._pending:
            return await asyncio.shield(self._pending[model])
        future: asyncio.Future[DetectedWindow | None] = asyncio.get_running_loop().create_future()
        self._pending[model] = future
        try:
            detected = await self._detect(model, headers)
        except Exception as exc:  # detection must never fail a request
            log.warning("window detection for %r failed: %s", short(model), exc)
            detected = None
        finally:
            del self._pending[model]
        if detected and (not cached or cached[1] != detected):
            log.info(
                "detected window for model %r: %d tokens (%s)", short(model), detected.tokens, detected.source
            )
        elif detected is None and (not cached or cached[1] is not None):
            log.warning(
                "could not detect the window of model %r; using the configured fallback", short(model)
            )
        self.cache[model] = (self.clock() + self.refresh, detected)
        future.set_result(detected)
        return detected

    async def _detect(self, model: str, headers: Sequence[tuple[bytes, bytes]]) -> DetectedWindow | None:
        auth = credential_headers(headers, BEARER_OR_GOOGLE_KEY)
        models = await fetch_json(self.client, "GET", f"{self.base_url}/models", auth)
        if found := window_from_models(models, model):
            return found
        if found := window_from_llama_props(
            await fetch_json(self.client, "GET", f"{self.root_url}/props", auth)
        ):
            return found
        if found := window_from_ollama_ps(
            await fetch_json(self.client, "GET", f"{self.root_url}/api/ps", auth), model
        ):
            return found
        if not askable(model):
            return None
        show = await fetch_json(self.client, "POST", f"{self.root_url}/api/show", auth, {"model": model})
        if found := window_from_ollama_show(show):
            return found
        name = urllib.parse.quote(model, safe="")
        return window_from_gemini_model(
            await fetch_json(self.client, "GET", f"{self.root_url}/v1beta/models/{name}", auth)
        )


class UpstreamTokenCounter:
    """Exact prompt counts from the upstream's own tokenizer: vLLM's `/tokenize` with messages, or
    llama.cpp's `/apply-template` then `/tokenize`, so that the chat template's markers are counted."""

    def __init__(self, client: httpx.AsyncClient, base_url: str) -> None:
        self.client = client
        self.root_url = root_url(base_url)

    async def count(self, body: dict[str, Any], headers: Sequence[tuple[bytes, bytes]] = ()) -> int | None:
        auth = credential_headers(headers)
        request = {key: body[key] for key in ("model", "messages", "tools") if key in body}
        answer = await fetch_json(self.client, "POST", f"{self.root_url}/tokenize", auth, request)
        if isinstance(answer, dict) and (count := token_count(answer.get("count"))):
            return count  # vLLM
        templated = await fetch_json(self.client, "POST", f"{self.root_url}/apply-template", auth, request)
        prompt = templated.get("prompt") if isinstance(templated, dict) else None
        if isinstance(prompt, str):
            tokens = await fetch_json(
                self.client, "POST", f"{self.root_url}/tokenize", auth, {"content": prompt}
            )
            if isinstance(tokens, dict) and isinstance(tokens.get("tokens"), list):
                return len(tokens["tokens"])
        log.warning("the upstream gave no exact token count; using the estimate")
        return None
