from __future__ import annotations

import json

import httpx
import pytest

from proxy.stub import create_stub
from proxy.upstream.overflow import parse_overflow
from tests.support.conversations import bike_shop_chat
from tests.support.fakes import RecordingUpstream, proxy_client

LLAMA = (
    b'{"error":{"code":400,"message":"request (3184 tokens) exceeds the available context size (1024 tokens), '
    b'try increasing it","type":"exceed_context_size_error","n_prompt_tokens":3184,"n_ctx":1024}}'
)
OPENAI = json.dumps(
    {
        "error": {
            "message": "This model's maximum context length is 8192 tokens. However, your "
            "messages resulted in 9100 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
)
VLLM = json.dumps(
    {
        "object": "error",
        "message": "This model's maximum context length is 4096 tokens. However, you "
        "requested 5000 tokens (4500 in the messages, 500 in the completion). Please reduce the length "
        "of the messages or completion.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
)
VLLM_NEW = json.dumps(
    {
        "error": {
            "message": "This model's maximum context length is 2048 tokens. However, your "
            "request has 2100 input tokens. Please reduce the length of the input messages.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    }
)
# vLLM main's renderer (vllm/renderers/params.py, TokenizeParams._token_len_check and
# _text_len_check, as of 1aa021e), as its VLLMValidationError reads once str() adds the parameter.
VLLM_RENDERER = json.dumps(
    {
        "error": {
            "message": "You passed 9000 input tokens and requested 500 output tokens. However, the "
            "model's context length is only 8192 tokens, resulting in a maximum input length of 7692 "
            "tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value=9000)",
            "type": "BadRequestError",
            "param": "input_tokens",
            "code": 400,
        }
    }
)
VLLM_RENDERER_CHARS = json.dumps(
    {
        "error": {
            "message": "You passed 250000 input characters and requested 0 output tokens. However, "
            "the model's context length is only 8192 tokens, resulting in a maximum input length of "
            "8192 tokens (at most 204800 characters). Please reduce the length of the input prompt. "
            "(parameter=input_text, value=250000)",
            "type": "BadRequestError",
            "param": "input_text",
            "code": 400,
        }
    }
)
OLLAMA = json.dumps(
    {"error": {"message": "the input length exceeds the context length", "type": "api_error"}}
)

# Anthropic's two wordings (docs.anthropic.com, "Errors" and "Context windows"), in its error shape.
ANTHROPIC_PROMPT = json.dumps(
    {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 208437 tokens > 200000 maximum",
        },
    }
)
ANTHROPIC_INPUT = json.dumps(
    {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "input length and `max_tokens` exceed context limit: 197626 + 8192 > 200000, "
            "decrease input length or `max_tokens` and try again",
        },
    }
)
# OpenAI's Responses API.
RESPONSES = json.dumps(
    {
        "error": {
            "message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
            "type": "invalid_request_error",
            "param": "input",
            "code": "context_length_exceeded",
        }
    }
)


@pytest.mark.parametrize(
    ("body", "tokens", "window"),
    [
        (LLAMA, 3184, 1024),
        (OPENAI, 9100, 8192),
        (VLLM, 4500, 4096),
        (VLLM_NEW, 2100, 2048),
        (VLLM_RENDERER, 9000, 8192),
        (VLLM_RENDERER_CHARS, None, 8192),  # characters, not tokens: no count
        (OLLAMA, None, None),
        (ANTHROPIC_PROMPT, 208437, 200000),
        (ANTHROPIC_INPUT, 197626, 200000),
        (RESPONSES, None, None),
    ],
)
def test_each_servers_overflow_is_recognised(
    body: str | bytes, tokens: int | None, window: int | None
) -> None:
    raw = body if isinstance(body, bytes) else body.encode()
    overflow = parse_overflow(400, raw)
    assert overflow is not None
    assert (overflow.prompt_tokens, overflow.window) == (tokens, window)


def test_other_errors_are_not_overflows() -> None:
    assert (
        parse_overflow(400, b'{"error": {"message": "invalid model", "type": "invalid_request_error"}}')
        is None
    )
    assert parse_overflow(500, OPENAI.encode()) is None
    assert parse_overflow(400, b"not json at all") is None


def stub_transport(window: int) -> httpx.AsyncBaseTransport:
    return httpx.ASGITransport(app=create_stub(window))


@pytest.mark.parametrize("stream", [False, True])
async def test_an_upstream_overflow_is_retried_once_compacted_harder(stream: bool) -> None:
    body = {"model": "stub", "messages": bike_shop_chat(items=100), "stream": stream}
    # The proxy is told 16,000 tokens; the server really has 3,000 and says so in its error.
    async with proxy_client(stub_transport(3000), window=16000) as client:
        response = await client.post("/v1/chat/completions", json=body)
        metrics = (await client.get("/metrics")).text
    assert response.status_code == 200, response.text
    assert int(response.headers["x-compaction-tokens-after"]) <= 3000
    assert 'compacting_proxy_overflow_retries_total{outcome="retried"} 1.0' in metrics
    if stream:
        assert response.text.endswith("data: [DONE]\n\n")


async def test_an_overflow_that_cannot_be_helped_is_passed_through() -> None:
    body = {"model": "stub", "messages": [{"role": "user", "content": "x" * 20000}]}
    async with proxy_client(stub_transport(1000), window=16000) as client:
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"


async def test_only_one_retry() -> None:
    upstream = RecordingUpstream(respond=lambda r: httpx.Response(400, content=LLAMA))
    async with proxy_client(upstream, window=16000) as client:
        response = await client.post(
            "/v1/chat/completions", json={"model": "m", "messages": bike_shop_chat()}
        )
    assert response.status_code == 400 and response.content == LLAMA
    assert len(upstream.requests) == 2
