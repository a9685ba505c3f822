"""OpenAI chats for an Ollama upstream, in-process against the fake Ollama (`tests/support/upstreams/ollama.py`,
v0.33): what reaches `/api/chat` (translated as Ollama's own `/v1` layer would, plus `num_ctx`), what
the client gets back, and what stays on `/v1`."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from proxy.formats import CHAT
from proxy.server.app import create_app
from proxy.settings import Settings, describe_validation_error
from proxy.ways.ollama.openai_answer import SseTranslator
from tests.support.fakes import RecordingUpstream, completion, make_settings, proxy_client, sse_chunks
from tests.support.upstreams.ollama import FakeOllama, ModelSpec

MODEL = "llama3.2:3b"
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
TOOL = {
    "type": "function",
    "function": {
        "name": "get_order",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "integer"}},
            "required": ["order_id"],
        },
    },
}


def proxy_for(fake: FakeOllama, **settings: Any) -> httpx.AsyncClient:
    """The proxy with Ollama's defaults for this issue (auto kind, auto window, and the default count:
    the vocabulary a model's name says) in front of `fake`."""
    settings = {
        "upstream_url": "http://ollama.test/v1",
        "upstream_kind": "auto",
        "window": "auto",
        "tokenizer": "auto",
        **settings,
    }
    app = create_app(make_settings(**settings), transport=httpx.ASGITransport(app=fake.app()))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy.test")


def chats(fake: FakeOllama) -> list[tuple[str, Any]]:
    return [(path, body) for path, body in fake.requests if "chat" in path]


async def test_an_openai_request_reaches_api_chat_as_ollama_would_read_it() -> None:
    fake = FakeOllama()
    body = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_order", "arguments": '{"order_id": 7}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "shipped"}'},
        ],
        "tools": [TOOL],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": "object"}},
        },
        "temperature": 0.2,
        "max_completion_tokens": 50,
        "stop": "END",
        "seed": 7,
        "user": "u1",
    }
    async with proxy_for(fake) as client:
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    [(path, sent)] = chats(fake)
    assert path == "/api/chat"
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is this?"},
        {"role": "user", "content": "", "images": [PIXEL]},  # one message per part, as openai.go does
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "call_1", "function": {"name": "get_order", "arguments": {"order_id": 7}}}],
        },
        {
            "role": "tool",
            "content": '{"status": "shipped"}',
            "tool_name": "get_order",
            "tool_call_id": "call_1",
        },
    ]
    assert sent["options"] == {
        "temperature": 0.2,
        "top_p": 1.0,  # what `/v1` sends when the request has none
        "num_predict": 50,
        "stop": ["END"],
        "seed": 7,
        "num_ctx": 32768,  # the trained 131,072, capped by COMPACT_OLLAMA_MAX_NUM_CTX
    }
    assert sent["format"] == {"type": "object"} and sent["tools"] == [TOOL] and sent["stream"] is False
    answer = response.json()
    assert answer["object"] == "chat.completion" and answer["model"] == MODEL
    [choice] = answer["choices"]
    assert choice["finish_reason"] == "stop" and choice["message"]["content"].startswith("Noted")
    read = fake.answers[-1].prompt_eval_count
    assert answer["usage"]["prompt_tokens"] == read
    assert answer["usage"]["total_tokens"] == read + answer["usage"]["completion_tokens"]


async def test_a_streamed_tool_call_comes_back_as_openai_chunks() -> None:
    fake = FakeOllama()
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Where is order 7?"}], "tools": [TOOL]}
    async with proxy_for(fake) as client:
        plain = await client.post("/v1/chat/completions", json={**body, "stream": True})
        usage = await client.post(
            "/v1/chat/completions", json={**body, "stream": True, "stream_options": {"include_usage": True}}
        )
    assert plain.headers["content-type"].startswith("text/event-stream")
    events = [line.removeprefix("data: ") for line in plain.text.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    calls = [
        c for chunk in chunks for choice in chunk["choices"] for c in choice["delta"].get("tool_calls", ())
    ]
    assert [(c["index"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        (0, "get_order", {"order_id": 4471})
    ]
    assert calls[0]["id"].startswith("call_") and calls[0]["type"] == "function"
    assert chunks[-1]["choices"] == [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]
    assert all("usage" not in chunk for chunk in chunks)
    last = json.loads(usage.text.split("\n\n")[-3].removeprefix("data: "))
    assert last["choices"] == [] and last["usage"]["prompt_tokens"] == fake.answers[-1].prompt_eval_count


@pytest.mark.parametrize(
    "change",
    [
        {"n": 2},
        {"logprobs": True},
        {"prediction": {"type": "content", "content": "x"}},
        {
            "messages": [
                {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AA=="}}]}
            ]
        },
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}],
                }
            ]
        },
    ],
    ids=["n", "logprobs", "unknown-field", "audio", "image-url"],
)
async def test_what_cannot_be_translated_goes_to_v1_compacted_for_the_window_in_effect(
    change: dict[str, Any],
) -> None:
    fake = FakeOllama()
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **change}
    async with proxy_for(fake) as client:
        await client.post("/v1/chat/completions", json=body)
        report = (await client.post("/compact", json=body)).json()["report"]
    [(path, sent)] = chats(fake)
    assert path == "/v1/chat/completions" and sent == body, "forwarded as it came"
    assert report["window"] == 4096 == fake.answers[-1].num_ctx, (
        "what Ollama runs a request without num_ctx at"
    )


@pytest.mark.parametrize(
    ("settings", "path"),
    [
        ({"upstream_url": "http://ollama.test"}, "/api/chat"),  # the root, not .../v1
        ({"upstream_kind": "ollama"}, "/api/chat"),
        ({"upstream_kind": "openai"}, "/v1/chat/completions"),
        ({"ollama_num_ctx": False}, "/v1/chat/completions"),
    ],
)
async def test_knowing_ollama(settings: dict[str, Any], path: str) -> None:
    fake = FakeOllama()
    async with proxy_for(fake, **settings) as client:
        response = await client.post(
            "/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        )
    assert response.status_code == 200 and response.json()["object"] == "chat.completion"
    assert [p for p, _ in chats(fake)] == [path]
    asked_version = ("/api/version", None) in fake.requests
    assert asked_version == (
        settings.get("upstream_kind") is None and settings.get("ollama_num_ctx") is not False
    )


@pytest.mark.parametrize(
    ("fake", "settings", "body_options", "num_ctx"),
    [
        (FakeOllama(), {"window": 8192}, None, 8192),  # the configured window
        (FakeOllama(), {"model_windows": f"{MODEL}=6144"}, None, 6144),
        (FakeOllama(models={MODEL: ModelSpec(num_ctx=12288)}), {}, None, 12288),  # the Modelfile's
        (FakeOllama(models={MODEL: ModelSpec(trained=2048)}), {}, None, 2048),  # the trained length
        (FakeOllama(), {"ollama_max_num_ctx": 16384}, None, 16384),
        (FakeOllama(), {}, {"num_ctx": 10000, "top_k": 5}, 10000),  # the client's, via extra_body
    ],
)
async def test_the_window_set_per_model(
    fake: FakeOllama, settings: dict[str, Any], body_options: Any, num_ctx: int
) -> None:
    body: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    if body_options:
        body["options"] = body_options
    async with proxy_for(fake, **settings) as client:
        for _ in range(3):
            await client.post("/v1/chat/completions", json=body)
        report = (await client.post("/compact", json=body)).json()["report"]
    sent = [b for p, b in chats(fake)]
    assert [b["options"]["num_ctx"] for b in sent] == [num_ctx] * 3 and report["window"] == num_ctx
    assert fake.loads == [(MODEL, num_ctx)], "stable: the model is loaded once"
    assert [p for p, _ in fake.requests].count("/api/show") <= 1, "asked once per model"
    if body_options:
        assert sent[0]["options"]["top_k"] == 5


async def test_ollama_errors_come_back_in_openai_shape() -> None:
    fake = FakeOllama()
    async with proxy_for(fake) as client:
        response = await client.post(
            "/v1/chat/completions", json={"model": "nope:1b", "messages": [{"role": "user", "content": "hi"}]}
        )
    assert response.status_code == 404
    assert response.json() == {
        "error": {
            "message": "model 'nope:1b' not found",
            "type": "not_found_error",
            "param": None,
            "code": None,
        }
    }


def test_a_stream_error_line_becomes_an_error_event() -> None:
    translator = SseTranslator("chatcmpl-1")
    first = translator.line(b'{"model":"m","message":{"role":"assistant","content":"Hi"},"done":false}')
    error = translator.line(b'{"error":"an error was encountered while running the model"}')
    assert first.startswith(b"data: ") and b'"role":"assistant"' in first
    event = json.loads(error.strip().removeprefix(b"data: "))
    assert event["error"]["message"] == "an error was encountered while running the model"
    assert error == CHAT.stream_error_event(event["error"]["message"]), "the chat format's own event"
    assert translator.line(b'{"done":true}') == b"", "nothing after the error"


async def test_an_upstream_that_is_not_ollama_is_asked_once() -> None:
    upstream = RecordingUpstream(
        respond=lambda r: (
            httpx.Response(404, text="404 page not found")
            if r.url.path.startswith("/api/")
            else httpx.Response(200, json=completion())
        )
    )
    async with proxy_client(upstream, upstream_kind="auto") as client:
        for _ in range(3):
            response = await client.post(
                "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            )
            assert response.json() == completion()
    assert [r.url.path for r in upstream.requests] == ["/api/version"] + ["/v1/chat/completions"] * 3


async def test_a_window_ollama_cannot_give_is_caught_on_the_native_api_too() -> None:
    """Told 16,384 for a model trained for 4,096, the proxy asks for num_ctx 16,384; Ollama caps it at
    4,096 and cuts. The answer says so, and the next request is compacted to fit."""
    fake = FakeOllama(models={MODEL: ModelSpec(trained=4096)})
    sentence = "The wheel arrived bent and the rim was scratched near the valve, so I want a refund. "
    messages = [{"role": "system", "content": "Be brief."}]
    for turn in range(12):
        messages += [
            {"role": "user", "content": f"{turn}: {sentence * 40}"},
            {"role": "assistant", "content": "Noted."},
        ]
    messages.append({"role": "user", "content": "So?"})
    async with proxy_for(fake, window=16384) as client:
        first = await client.post("/v1/chat/completions", json={"model": MODEL, "messages": messages})
        second = await client.post("/v1/chat/completions", json={"model": MODEL, "messages": messages})
        metrics = (await client.get("/metrics")).text
    assert [b["options"]["num_ctx"] for p, b in chats(fake)] == [16384, 16384], "stable, even so"
    assert first.headers["x-compaction-upstream-truncated"] == "true"
    assert "x-compaction-upstream-truncated" not in second.headers
    assert int(second.headers["x-compaction-dropped"]) > 0
    assert len(fake.truncations) == 1 and fake.truncations[0].num_ctx == 4096
    assert "compacting_proxy_upstream_truncations_total 1.0" in metrics


async def test_a_cut_is_learned_for_the_window_that_was_asked_for() -> None:
    """The bridge loads the model with num_ctx 32,768 (`/api/ps` then says so); a native request without
    num_ctx makes Ollama reload it at its default and cut. That is learned for such requests only."""
    fake = FakeOllama()
    sentence = "The wheel arrived bent and the rim was scratched near the valve, so I want a refund. "
    long_chat = [{"role": "system", "content": "Be brief."}]
    for turn in range(12):
        long_chat += [
            {"role": "user", "content": f"{turn}: {sentence * 40}"},
            {"role": "assistant", "content": "Ok."},
        ]
    long_chat.append({"role": "user", "content": "So?"})
    native = {"model": MODEL, "messages": long_chat, "stream": False}
    async with proxy_for(fake) as client:
        await client.post(
            "/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        )
        first = await client.post("/api/chat", json=native)
        second = await client.post("/api/chat", json=native)
        report = (await client.post("/compact", json={"model": MODEL, "messages": long_chat})).json()[
            "report"
        ]
    assert fake.loads == [(MODEL, 32768), (MODEL, 4096)]
    assert first.headers["x-compaction-upstream-truncated"] == "true"
    assert "x-compaction-upstream-truncated" not in second.headers and len(fake.truncations) == 1
    assert report["window"] == 32768, "OpenAI chats, sent with num_ctx, still get their window"


async def test_a_count_far_under_from_a_server_that_cannot_cut_is_no_cut() -> None:
    """An OpenAI-style server (not Ollama, not llama.cpp: it refuses what does not fit, it never cuts
    silently) whose streamed usage says 900 tokens were read of the ~4,000 sent: its tokenizer's
    way (issue 34, row 4), never taken for a cut: no header, no metric,
    the window as it was."""
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":900,"completion_tokens":2,"total_tokens":902}}\n\n'
    upstream = RecordingUpstream(
        respond=lambda r: httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            content=b"".join([*sse_chunks(["Hi"])[:-1], usage, b"data: [DONE]\n\n"]),
        )
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "word " * 4000}], "stream": True}
    async with proxy_client(upstream) as client:
        for _ in range(3):
            streamed = await client.post("/v1/chat/completions", json=body)
        metrics = (await client.get("/metrics")).text
        report = (await client.post("/compact", json=body)).json()["report"]
    assert streamed.status_code == 200 and "x-compaction-upstream-truncated" not in streamed.headers
    assert "compacting_proxy_upstream_truncations_total 0.0" in metrics
    assert report["window"] == 8192


def test_the_new_settings() -> None:
    defaults = Settings(_env_file=None)  # type: ignore[call-arg]
    assert (defaults.window, defaults.upstream_kind, defaults.ollama_num_ctx) == ("auto", "auto", True)
    assert defaults.ollama_max_num_ctx == 32768 and defaults.fallback_window == 8192
    with pytest.raises(ValidationError) as error:
        Settings(_env_file=None, upstream_kind="vllm")  # type: ignore[call-arg]
    assert "COMPACT_UPSTREAM_KIND" in describe_validation_error(error.value)
