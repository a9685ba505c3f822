"""The new formats against a real llama-server: its ``/v1/responses`` and ``/v1/messages`` (which
convert to its chat template, ``server_chat_convert_responses_to_chatcmpl`` and
``server_chat_convert_anthropic_to_oai``) reject the long tool-using support chat directly with
``exceed_context_size_error``; through the proxy, with the format's official client, it is
compacted and answered, plain and streamed. With ``exact`` counting (``COMPACT_WINDOW=auto``,
``COMPACT_TOKENIZER=upstream``) the neutral conversation each adapter reads is what the server's
``/apply-template`` takes, so the first attempt fits: no overflow retry."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from tests.support.format_chats import as_anthropic, as_responses
from tests.support.upstreams.chats import TOOLS, support_chat
from tests.support.upstreams.llama import LlamaServer
from tests.support.upstreams.proxy_server import overflow_retries, proxy_for_llama

pytestmark = pytest.mark.llama

MODEL = "tiny"
MAX_TOKENS = 8


def responses_tools() -> list[Any]:
    return [{"type": "function", **tool["function"]} for tool in TOOLS]


def anthropic_tools() -> list[Any]:
    return [
        {"name": f["name"], "description": f["description"], "input_schema": f["parameters"]}
        for f in (tool["function"] for tool in TOOLS)
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("config", ["estimate", "exact"])
def test_responses_long_history_fails_directly_and_succeeds_through_the_proxy(
    llama_server: LlamaServer, stream: bool, config: str
) -> None:
    instructions, items = as_responses(support_chat(8, result_items=20), reasoning=False)
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "instructions": instructions,
        "input": items,
        "tools": responses_tools(),
        # The tools stay in the prompt; the tiny model's random reply is not parsed as a tool call
        # (on some prompts its fixed-seed reply breaks llama.cpp's tool-call parser: a 500).
        "tool_choice": "none",
        "max_output_tokens": MAX_TOKENS,
        "stream": stream,
    }
    direct = openai.OpenAI(base_url=f"{llama_server.base_url}/v1", api_key="x", max_retries=0, timeout=60)
    with pytest.raises(openai.BadRequestError) as caught:
        direct.responses.create(**kwargs)
    assert caught.value.type == "exceed_context_size_error"

    with proxy_for_llama(f"{llama_server.base_url}/v1", llama_server.n_ctx, config) as proxy:
        client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="x", max_retries=0, timeout=60)
        with client.responses.with_streaming_response.create(**kwargs) as response:
            assert response.status_code == 200
            assert int(response.headers["x-compaction-tokens-after"]) < int(
                response.headers["x-compaction-tokens-before"]
            )
            if stream:
                final = [e for e in response.parse() if e.type == "response.completed"][-1].response
            else:
                final = response.parse()
        retried = overflow_retries(proxy)
    assert final.usage is not None
    if config == "exact":
        assert retried == 0, "with the server's own counts the first attempt must fit"
    assert final.usage.input_tokens + MAX_TOKENS <= llama_server.n_ctx


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("config", ["estimate", "exact"])
def test_anthropic_long_history_fails_directly_and_succeeds_through_the_proxy(
    llama_server: LlamaServer, stream: bool, config: str
) -> None:
    system, messages = as_anthropic(support_chat(8, result_items=20))
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "system": system,
        "messages": messages,
        "tools": anthropic_tools(),
        "max_tokens": MAX_TOKENS,
        "stream": stream,
    }
    direct = anthropic.Anthropic(base_url=llama_server.base_url, api_key="x", max_retries=0, timeout=60)
    with pytest.raises(anthropic.BadRequestError) as caught:
        direct.messages.create(**kwargs)
    assert "exceed_context_size_error" in str(caught.value) or "context" in str(caught.value)

    with proxy_for_llama(f"{llama_server.base_url}/v1", llama_server.n_ctx, config) as proxy:
        client = anthropic.Anthropic(base_url=proxy.base_url, api_key="x", max_retries=0, timeout=60)
        with client.messages.with_streaming_response.create(**kwargs) as response:
            assert response.status_code == 200
            assert int(response.headers["x-compaction-tokens-after"]) < int(
                response.headers["x-compaction-tokens-before"]
            )
            if stream:
                events = list(response.parse())
                started = next(e for e in events if e.type == "message_start")
                input_tokens = started.message.usage.input_tokens
                assert events[-1].type == "message_stop"
            else:
                input_tokens = response.parse().usage.input_tokens
        retried = overflow_retries(proxy)
    if config == "exact":
        assert retried == 0, "with the server's own counts the first attempt must fit"
    assert input_tokens + MAX_TOKENS <= llama_server.n_ctx
