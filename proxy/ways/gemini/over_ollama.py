"""A Gemini API request on Ollama's native API: the Gemini bridge's chat carried by the Ollama
bridge, so the model runs with the window the proxy compacts for (Ollama's OpenAI-compatible `/v1`
ignores `num_ctx` and runs at Ollama's default). The answer goes back through both translations:
Ollama's NDJSON as OpenAI's chunks (`proxy.ways.ollama.openai_answer`), those as Gemini's events
(`proxy.ways.gemini.gemini_answer`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import httpx
import orjson
from starlette.responses import Response

from proxy.engine.plan import ChatPlan
from proxy.formats import Conversation
from proxy.formats.gemini import gemini_error
from proxy.upstream.forwarding import MAX_ANSWER_BYTES, map_transport_errors, read_decoded
from proxy.ways.base import Answer, Body, Headers
from proxy.ways.gemini.bridge import GeminiChatBridge
from proxy.ways.gemini.chat_request import chat_body, chat_request
from proxy.ways.gemini.gemini_answer import StreamTranslator, error_from_chat, generate_response
from proxy.ways.ollama.bridge import OllamaBridge
from proxy.ways.ollama.native_request import to_ollama_chat
from proxy.ways.ollama.openai_answer import (
    SseTranslator,
    chat_completion,
    completion_id,
    error_from_ollama,
)
from proxy.ways.ollama.relay import SseResponse

JSON = "application/json"


def ollama_chat(chat: Body) -> Body:
    """The chat as the Ollama bridge takes it: `top_k` (which OpenAI's API lacks) as an option."""
    if "top_k" in chat:
        chat = {**chat, "options": {"top_k": chat["top_k"]}}
        del chat["top_k"]
    return chat


def carried(body: Body, conversation: Conversation, *, streamed: bool) -> bool:
    """Whether Ollama's native API carries this request as its `/v1` would (compaction only
    shortens it, so what carries now carries once compacted)."""
    neutral = conversation.request
    chat = chat_body(body, neutral, neutral["messages"], None, stream=streamed)
    return to_ollama_chat(ollama_chat(chat), num_ctx=1) is not None


@dataclass(frozen=True, slots=True)
class GeminiOverOllama:
    """How one Gemini API request goes to Ollama's `/api/chat` with `num_ctx` set."""

    gemini: GeminiChatBridge
    ollama: OllamaBridge
    path: ClassVar[str] = "/api/chat"
    from_root: ClassVar[bool] = True
    retries: ClassVar[bool] = False  # Ollama cuts a prompt past num_ctx instead of refusing it

    @property
    def window(self) -> int:
        return self.ollama.num_ctx

    def outgoing(self, headers: Headers, query: bytes) -> tuple[Headers, bytes]:
        return self.gemini.outgoing(headers, query)

    def content(self, raw: bytes, body: Body, conversation: Conversation, plan: ChatPlan) -> bytes:
        chat = ollama_chat(chat_request(body, conversation, plan, stream=self.gemini.streamed))
        return self.ollama.request_bytes(chat, plan.max_tokens)

    async def relay(self, response: httpx.Response, answer: Answer) -> Response:
        if self.gemini.streamed and response.is_success:
            return SseResponse(response, GeminiLines(), answer)
        try:
            with map_transport_errors():
                content = await read_decoded(response, MAX_ANSWER_BYTES)
        except ValueError:
            return Response(
                gemini_error(502, "The upstream's answer could not be read."), 502, media_type=JSON
            )
        if not response.is_success:
            body = error_from_chat(response.status_code, error_from_ollama(response.status_code, content))
            return Response(body, response.status_code, media_type=JSON, headers=answer.headers)
        try:
            native = orjson.loads(content)
        except orjson.JSONDecodeError:
            native = None
        if not isinstance(native, dict):
            return Response(gemini_error(502, "The upstream's answer is not JSON."), 502, media_type=JSON)
        headers = answer.whole(native.get("prompt_eval_count"))
        translated = generate_response(chat_completion(native, completion_id()), "")
        return Response(orjson.dumps(translated), media_type=JSON, headers=headers)


@dataclass
class GeminiLines:
    """Ollama's NDJSON lines in, Gemini's events out: through OpenAI's chunks."""

    chat: SseTranslator = field(default_factory=lambda: SseTranslator(completion_id(), include_usage=True))
    gemini: StreamTranslator = field(default_factory=lambda: StreamTranslator(""))

    @property
    def done(self) -> bool:
        return self.chat.done

    @property
    def prompt_eval_count(self) -> int | None:
        return self.chat.prompt_eval_count

    def line(self, line: bytes) -> bytes:
        events = self.chat.line(line).split(b"\n\n")
        return b"".join(
            self.gemini.data(e.removeprefix(b"data: ")) for e in events if e.startswith(b"data: ")
        )
