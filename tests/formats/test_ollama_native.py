"""Ollama's native chat API (`/api/chat`): compacted like the OpenAI one, its window taken from the
request's own `options.num_ctx`, its NDJSON stream passed through as it comes."""

from __future__ import annotations

import json
from typing import Any

import httpx

from proxy.counting.tokens import RequestCounter, count_chars4
from proxy.engine.notes import NOTE_PREFIX
from proxy.formats import OLLAMA
from tests.support.conversations import SYSTEM, order_result, screenshot_steps
from tests.support.fakes import ClosingStream, RecordingUpstream, proxy_client

NDJSON = [
    b'{"model":"llama3.1:8b","message":{"role":"assistant","content":"Hel"},"done":false}\n',
    b'{"model":"llama3.1:8b","message":{"role":"assistant","content":"lo"},"done":false}\n',
    b'{"model":"llama3.1:8b","message":{"role":"assistant","content":""},"done":true,"prompt_eval_count":900,"eval_count":2}\n',
]


def native_chat() -> list[dict[str, Any]]:
    """Ollama's shapes: tool calls without ids, arguments as objects, results named by `tool_name`."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for turn in range(8):
        messages.append({"role": "user", "content": f"Question {turn} about order #4471"})
        call = {"function": {"name": "get_order", "arguments": {"order": 4471}}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append(
            {"role": "tool", "tool_name": "get_order", "content": order_result(4471, 25, seed=turn)}
        )
        messages.append({"role": "assistant", "content": f"Answer {turn}."})
    messages.append({"role": "user", "content": "And now?"})
    return messages


def ndjson_upstream() -> RecordingUpstream:
    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "application/x-ndjson"}, stream=ClosingStream(list(NDJSON))
        )

    return RecordingUpstream(respond=respond)


async def test_native_chat_is_compacted_to_the_requests_num_ctx() -> None:
    upstream = ndjson_upstream()
    body = {"model": "llama3.1:8b", "messages": native_chat(), "options": {"num_ctx": 4096, "temperature": 0}}
    async with proxy_client(upstream, window=128000) as client:
        response = await client.post("/api/chat", json=body)
    assert response.status_code == 200
    assert response.content == b"".join(NDJSON), "the NDJSON stream is passed on as it came"
    assert str(upstream.last.url) == "http://upstream.test/api/chat"
    sent = json.loads(upstream.last.content)
    assert sent["options"] == {"num_ctx": 4096, "temperature": 0}
    assert int(response.headers["x-compaction-tokens-after"]) <= 0.8 * 4096
    notes = [m["content"] for m in sent["messages"] if str(m.get("content")).startswith(NOTE_PREFIX)]
    assert notes and all("get_order" in note for note in notes)
    assert sent["messages"][-1] == {"role": "user", "content": "And now?"}


async def test_native_chat_under_the_line_is_forwarded_byte_for_byte() -> None:
    upstream = ndjson_upstream()
    raw = json.dumps(
        {"model": "llama3.1:8b", "messages": [{"role": "user", "content": "hi"}], "keep_alive": "5m"}
    ).encode()
    async with proxy_client(upstream) as client:
        response = await client.post("/api/chat", content=raw)
    assert upstream.last.content == raw
    assert response.content == b"".join(NDJSON)


async def test_native_chat_not_streamed_is_read_whole() -> None:
    upstream = RecordingUpstream(
        respond=lambda r: httpx.Response(
            200, json={"message": {"role": "assistant", "content": "ok"}, "done": True}
        )
    )
    async with proxy_client(upstream) as client:
        response = await client.post(
            "/api/chat", json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False}
        )
    assert response.json()["message"]["content"] == "ok"


# --- the neutral conversation: Ollama's own fields do not leak into counting and planning ------------


def screenshot_chat(steps: int) -> list[dict[str, Any]]:
    """A UI agent on Ollama: each step a screenshot whose result is a large image and a line of text."""
    opening = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Find the checkout button and click it."},
    ]
    return [*opening, *screenshot_steps(steps, 2048, 2048)]


def test_the_neutral_ollama_request_links_results_counts_images_and_names_the_reply_limit() -> None:
    body = {
        "model": "qwen3",
        "messages": [
            *screenshot_chat(1),
            {
                "role": "assistant",
                "thinking": "Two lookups at once.",
                "content": "",
                "tool_calls": [
                    {"function": {"name": "get_order", "arguments": {"order": 1}}},
                    {"function": {"name": "get_customer", "arguments": {"id": 7}}},
                ],
            },
            {"role": "tool", "tool_name": "get_customer", "content": "customer 7"},
            {"role": "tool", "tool_name": "get_order", "content": "order 1"},
        ],
        "options": {"num_ctx": 8192, "num_predict": 300, "temperature": 0},
        "keep_alive": "5m",
    }
    twice = [{"function": {"name": "get_order", "arguments": {"order": k}}} for k in (2, 3)]
    body["messages"] += [
        {"role": "assistant", "content": "", "tool_calls": twice},
        {"role": "tool", "tool_name": "get_order", "content": "order 2"},
        {"role": "tool", "tool_name": "get_order", "content": "order 3"},
    ]
    conversation = OLLAMA.read(body, {})
    request = conversation.request
    assert set(request) == {"model", "messages", "max_tokens"} and request["max_tokens"] == 300
    assert conversation.window == 8192
    neutral = request["messages"]
    calls = {c["function"]["name"]: c for c in neutral[4]["tool_calls"]}
    assert json.loads(calls["get_order"]["function"]["arguments"]) == {"order": 1}
    assert neutral[5]["tool_call_id"] == calls["get_customer"]["id"]  # by its tool_name, not its order
    assert neutral[6]["tool_call_id"] == calls["get_order"]["id"]
    assert neutral[3]["tool_call_id"] == neutral[2]["tool_calls"][0]["id"]
    assert neutral[4]["reasoning_content"] == "Two lookups at once."
    second, third = neutral[7]["tool_calls"]  # parallel calls of one tool: answered in their order
    assert (neutral[8]["tool_call_id"], neutral[9]["tool_call_id"]) == (second["id"], third["id"])
    assert not any(key in m for m in neutral for key in ("images", "tool_name", "thinking"))
    assert all(
        m["name"] == body["messages"][i]["tool_name"] for i, m in enumerate(neutral) if m["role"] == "tool"
    )
    counter = RequestCounter(count_chars4)
    assert counter.message(neutral[3]) > 700  # the 2048x2048 screenshot, as OpenAI's tiles count it


async def test_old_screenshots_go_once_their_images_are_counted() -> None:
    upstream = ndjson_upstream()
    body = {"model": "qwen3", "messages": screenshot_chat(12), "options": {"num_ctx": 8192}}
    async with proxy_client(upstream, window=128000) as client:
        response = await client.post("/api/chat", json=body)
    assert response.status_code == 200
    assert int(response.headers["x-compaction-tokens-before"]) > 12 * 700, "each screenshot counted"
    assert int(response.headers["x-compaction-tokens-after"]) <= 0.8 * 8192
    sent = json.loads(upstream.last.content)
    kept = [m for m in sent["messages"] if m["role"] == "tool"]
    assert 0 < len(kept) < 12
    assert kept[-1] == body["messages"][-1], "the latest screenshot stays whole, image and all"
    for message in kept:  # each kept result still follows the call it answers
        calls = sent["messages"][sent["messages"].index(message) - 1].get("tool_calls")
        assert calls and calls[0]["function"]["arguments"] == {"step": int(message["content"].split()[-1])}
    assert set(sent) == set(body) and sent["options"] == body["options"]


async def test_a_clamped_reply_limit_goes_back_to_num_predict() -> None:
    upstream = ndjson_upstream()
    options = {"num_ctx": 4096, "num_predict": 100000, "temperature": 0}
    body = {"model": "llama3.1:8b", "messages": native_chat(), "options": options}
    async with proxy_client(upstream, window=128000, clamp_max_tokens=True) as client:
        response = await client.post("/api/chat", json=body)
    assert response.status_code == 200
    sent = json.loads(upstream.last.content)
    clamped = sent["options"]["num_predict"]
    assert clamped < 4096 and str(clamped) == response.headers["x-compaction-max-tokens"]
    assert {**sent["options"], "num_predict": 100000} == options
    assert "max_tokens" not in sent
