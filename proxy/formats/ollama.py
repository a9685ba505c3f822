"""Ollama's native chat API (`/api/chat`): the same messages as Chat Completions, a window the
request may set itself (`options.num_ctx`), NDJSON streamed by default, tool results named by
`tool_name`, the prompt's size reported as `prompt_eval_count`."""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from proxy.engine.chat import Body
from proxy.engine.refusal import Refusal
from proxy.errors import ContextOverflowError
from proxy.formats.base import Conversation, int_field
from proxy.formats.chat import ChatCompletions


class OllamaChat(ChatCompletions):
    def __init__(self) -> None:
        super().__init__(name="ollama")

    def read(self, body: Body, params: Mapping[str, str]) -> Conversation:
        conversation = super().read(body, params)
        options = body.get("options")
        num_ctx = int_field(options.get("num_ctx")) if isinstance(options, dict) else None
        return Conversation(conversation.request, window=num_ctx)

    def streamed(self, body: Body) -> bool:
        return body.get("stream") is not False

    @staticmethod
    def error_body(status: int, message: str, type: str, code: str | None, param: str | None) -> bytes:
        """Ollama's own error shape (`{"error": "..."}`, api/types.go), which its clients raise."""
        return orjson.dumps({"error": message})

    def overflow_message(self, refusal: Refusal) -> str:
        """Ollama's own wording ("input length exceeds maximum context length")."""
        return (
            f"input length exceeds maximum context length ({refusal.tokens} tokens > {refusal.maximum}). "
            f"{refusal.detail}"
        )

    def overflow_error(self, refusal: Refusal, *, streamed: bool) -> ContextOverflowError:
        """In Ollama's own shape whatever the path; a 400 for a streamed request too."""
        return ContextOverflowError(
            self.overflow_message(refusal), param=refusal.field or "messages", shape=self.error_body
        )
