"""The seam between an OpenAI chat and Ollama's native `/api/chat`: `OllamaBridge`, how one request
goes there (its window, streamed or not). The request's translation is `native_request`, the
answer's `openai_answer`; `relay` carries the answer back over the wire.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import orjson

from proxy.bridges.ollama.native_request import Body, to_ollama_chat


@dataclass(frozen=True, slots=True)
class OllamaBridge:
    """How one OpenAI chat goes to Ollama's native API: with this window, streamed or not."""

    num_ctx: int
    stream: bool = False
    include_usage: bool = False
    path: ClassVar[str] = "/api/chat"  # from the server's root

    @classmethod
    def for_request(cls, body: Body, num_ctx: int) -> OllamaBridge:
        options = body.get("stream_options")
        usage_asked = isinstance(options, dict) and options.get("include_usage") is True
        return cls(num_ctx, stream=body.get("stream") is True, include_usage=usage_asked)

    def request_bytes(self, body: Body, num_predict: int | None = None) -> bytes:
        """The native request for `body` (already compacted). It was checked translatable before."""
        native = to_ollama_chat(body, num_ctx=self.num_ctx, num_predict=num_predict)
        if native is None:
            raise ValueError("compaction made the request untranslatable")  # it only shortens strings
        return orjson.dumps(native)
