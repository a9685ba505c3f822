"""The real upstream itself: llama-server counts prompts exactly and rejects over-long ones.

These pin the behaviour the end-to-end proxy tests rely on, straight from the server with the
official SDK: ``usage.prompt_tokens`` is what ``/apply-template`` + ``/tokenize`` say, and a chat
longer than the window is a 400 ``exceed_context_size_error`` before any stream starts.
"""

from __future__ import annotations

from typing import Any, cast

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.support.upstreams.chats import TOOLS, short_chat, support_chat
from tests.support.upstreams.llama import LlamaServer, count_prompt_tokens

pytestmark = pytest.mark.llama

MODEL = "tiny"  # llama-server serves its one model whatever name is asked for
MAX_TOKENS = 4


def sdk(server: LlamaServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0, timeout=60)


def complete(server: LlamaServer, body: dict[str, Any]) -> ChatCompletion:
    # Bodies are plain dicts (as a proxy sees them), so the SDK's TypedDict overloads don't apply.
    params: dict[str, Any] = {"model": MODEL, "max_tokens": MAX_TOKENS, **body}
    return cast(ChatCompletion, sdk(server).chat.completions.create(**params))


def stream(server: LlamaServer, body: dict[str, Any]) -> list[ChatCompletionChunk]:
    params: dict[str, Any] = {"model": MODEL, "max_tokens": MAX_TOKENS, "stream": True, **body}
    return list(sdk(server).chat.completions.create(**params))


def long_tool_chat() -> dict[str, Any]:
    return {"messages": support_chat(8, result_items=20), "tools": TOOLS}


def test_models_lists_the_tiny_model(llama_server: LlamaServer) -> None:
    models = sdk(llama_server).models.list()
    assert len(models.data) == 1
    assert models.data[0].id.endswith("tiny.gguf")


def test_short_chat_reports_exact_prompt_tokens(llama_server: LlamaServer) -> None:
    messages = short_chat()
    reply = complete(llama_server, {"messages": messages})
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == count_prompt_tokens(llama_server.base_url, {"messages": messages})
    assert reply.choices[0].message.role == "assistant"


def test_short_tool_chat_is_accepted_and_counted(llama_server: LlamaServer) -> None:
    body = {"messages": support_chat(1, result_items=2), "tools": TOOLS}
    reply = complete(llama_server, body)
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == count_prompt_tokens(llama_server.base_url, body)
    assert reply.usage.prompt_tokens < llama_server.n_ctx


def test_streamed_short_chat_ends_with_usage(llama_server: LlamaServer) -> None:
    messages = short_chat()
    chunks = stream(llama_server, {"messages": messages, "stream_options": {"include_usage": True}})
    usage = [chunk.usage for chunk in chunks if chunk.usage is not None]
    assert len(usage) == 1
    assert usage[0].prompt_tokens == count_prompt_tokens(llama_server.base_url, {"messages": messages})


def assert_exceeds_context(error: openai.BadRequestError, server: LlamaServer, expected_tokens: int) -> None:
    assert error.status_code == 400
    assert error.type == "exceed_context_size_error"
    body = error.body
    assert isinstance(body, dict)
    assert body["n_ctx"] == server.n_ctx
    assert body["n_prompt_tokens"] == expected_tokens
    assert body["message"] == (
        f"request ({expected_tokens} tokens) exceeds the available context size "
        f"({server.n_ctx} tokens), try increasing it"
    )


def test_long_tool_chat_is_rejected(llama_server: LlamaServer) -> None:
    body = long_tool_chat()
    expected = count_prompt_tokens(llama_server.base_url, body)
    assert expected > llama_server.n_ctx
    with pytest.raises(openai.BadRequestError) as caught:
        complete(llama_server, body)
    assert_exceeds_context(caught.value, llama_server, expected)


def test_long_tool_chat_is_rejected_before_the_stream_starts(llama_server: LlamaServer) -> None:
    body = long_tool_chat()
    expected = count_prompt_tokens(llama_server.base_url, body)
    with pytest.raises(openai.BadRequestError) as caught:
        stream(llama_server, body)
    assert_exceeds_context(caught.value, llama_server, expected)
