from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from proxy.engine.caps import CAP_WORDS
from proxy.engine.notes import NOTE_PREFIX
from tests.support.conversations import bike_shop_chat
from tests.support.fakes import ClosingStream, RecordingUpstream, completion, proxy_client, sse_chunks


def chat_body(**extra: object) -> dict[str, object]:
    return {"model": "llama3.1:8b", "messages": bike_shop_chat(items=5), **extra}


async def test_under_the_line_the_body_is_forwarded_byte_for_byte() -> None:
    upstream = RecordingUpstream()
    # Odd spacing, key order, unicode and unknown fields: all must reach the upstream as sent.
    raw = (
        b'{ "model":"llama3.1:8b",  "messages":[{"role":"user","content":"caf\\u00e9 \xe2\x98\x95"}],'
        b' "options":{"num_ctx":8192}, "keep_alive":"5m", "x_vendor": [1, 2.50, null]}'
    )
    async with proxy_client(upstream) as client:
        response = await client.post(
            "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
        )
    assert response.status_code == 200
    assert upstream.last.content == raw
    assert response.json() == completion()
    assert not any(name.startswith("x-compaction") for name in response.headers)


async def test_over_the_line_the_upstream_receives_the_compacted_chat() -> None:
    upstream = RecordingUpstream()
    body = {"model": "llama3.1:8b", "messages": bike_shop_chat(), "options": {"num_ctx": 8000}, "seed": 7}
    async with proxy_client(upstream, window=8000, keep_recent_tool_results=1) as client:
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    sent = upstream.last_json()
    assert sent["options"] == {"num_ctx": 8000} and sent["seed"] == 7 and sent["model"] == "llama3.1:8b"
    assert sent["messages"][3]["content"].startswith(NOTE_PREFIX)
    assert sent["messages"][5:] == body["messages"][5:]
    assert int(response.headers["x-compaction-tokens-before"]) > int(
        response.headers["x-compaction-tokens-after"]
    )
    assert response.headers["x-compaction-truncated"] == "1"
    assert response.headers["x-compaction-dropped"] == "0"


async def test_per_model_windows_decide(caplog: pytest.LogCaptureFixture) -> None:
    upstream = RecordingUpstream()
    body = {"model": "big-model", "messages": bike_shop_chat()}
    async with proxy_client(
        upstream, window=8000, keep_recent_tool_results=1, model_windows="big-*=128000"
    ) as client:
        untouched = await client.post("/v1/chat/completions", json=body)
        with caplog.at_level("INFO", logger="proxy"):
            compacted = await client.post("/v1/chat/completions", json={**body, "model": "small"})
    assert "x-compaction-tokens-before" not in untouched.headers
    assert "x-compaction-tokens-before" in compacted.headers
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Context optimized")]
    assert "model=small" in line and "truncated 1 tool results" in line


async def test_reply_room_comes_from_max_tokens() -> None:
    upstream = RecordingUpstream()
    body = {"model": "m", "messages": bike_shop_chat(items=110)}  # about 4,070 tokens
    async with proxy_client(upstream, window=8000) as client:
        roomy = await client.post("/v1/chat/completions", json=body)
        tight = await client.post("/v1/chat/completions", json={**body, "max_tokens": 5000})
    assert "x-compaction-tokens-before" not in roomy.headers
    assert "x-compaction-tokens-before" in tight.headers


async def test_streaming_passes_chunks_through_and_closes_the_upstream() -> None:
    upstream = RecordingUpstream()
    async with (
        proxy_client(upstream) as client,
        client.stream("POST", "/v1/chat/completions", json=chat_body(stream=True)) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        received = [chunk async for chunk in response.aiter_raw()]
    assert b"".join(received) == b"".join(sse_chunks(["Hel", "lo", "!"]))
    assert upstream.streams[0].closed


async def test_streaming_compacted_request_carries_the_headers() -> None:
    upstream = RecordingUpstream()
    body = {"model": "m", "messages": bike_shop_chat(), "stream": True}
    async with proxy_client(upstream, window=8000, keep_recent_tool_results=1) as client:
        response = await client.post("/v1/chat/completions", json=body)
    assert response.headers["x-compaction-truncated"] == "1"
    assert response.content.endswith(b"data: [DONE]\n\n")


async def test_a_stream_that_breaks_ends_with_an_error_event() -> None:
    stream = ClosingStream(sse_chunks(["a", "b", "c"]), fail_after=1)
    upstream = RecordingUpstream(
        respond=lambda r: httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)
    )
    async with proxy_client(upstream) as client:
        response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    assert response.content.startswith(sse_chunks(["a"])[0])
    last = response.content.strip().split(b"\n\n")[-1]
    assert json.loads(last.removeprefix(b"data: "))["error"]["code"] == "upstream_stream_error"
    assert stream.closed


async def test_upstream_errors_pass_through_with_status_and_body() -> None:
    error = {"error": {"message": "model 'x' not found", "type": "not_found"}}
    upstream = RecordingUpstream(
        respond=lambda r: httpx.Response(404, json=error, headers={"x-upstream": "yes", "retry-after": "3"})
    )
    async with proxy_client(upstream) as client:
        response = await client.post("/v1/chat/completions", json=chat_body())
    assert response.status_code == 404
    assert response.json() == error
    assert response.headers["x-upstream"] == "yes" and response.headers["retry-after"] == "3"


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_upstream_failures_keep_their_status(status: int) -> None:
    upstream = RecordingUpstream(respond=lambda r: httpx.Response(status, text="busy"))
    async with proxy_client(upstream) as client:
        response = await client.post("/v1/chat/completions", json=chat_body())
    assert response.status_code == status and response.text == "busy"


@pytest.mark.parametrize(
    ("failure", "status", "code"),
    [
        (httpx.ConnectError("connection refused"), 502, "upstream_unreachable"),
        (httpx.RemoteProtocolError("server disconnected"), 502, "upstream_unreachable"),
        (httpx.ReadTimeout("timed out"), 504, "upstream_timeout"),
        (httpx.ConnectTimeout("timed out"), 504, "upstream_timeout"),
    ],
)
async def test_transport_failures_are_502s_and_504s(failure: Exception, status: int, code: str) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise failure

    async with proxy_client(RecordingUpstream(respond=fail)) as client:
        response = await client.post("/v1/chat/completions", json=chat_body())
    assert response.status_code == status
    assert response.json()["error"]["code"] == code


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        (b'{"model": "m"}', "messages"),
        (b'{"model": "m", "messages": "hi"}', "messages"),
        (b'{"model": "m", "messages": ["hi"]}', "messages[0]"),
        (b'{"model": "m", "messages": [{"content": "hi"}]}', "messages[0].role"),
        (b'{"model": "m", "messages": [{"role": "assistant", "tool_calls": {}}]}', "messages[0].tool_calls"),
        (b'{"model": 5, "messages": []}', "model"),
    ],
)
async def test_bad_requests_are_400s_and_never_forwarded(raw: bytes, param: str | None) -> None:
    upstream = RecordingUpstream()
    async with proxy_client(upstream) as client:
        response = await client.post("/v1/chat/completions", content=raw)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"] and error["param"] == param
    assert upstream.requests == []


async def test_oversize_bodies_are_413s() -> None:
    upstream = RecordingUpstream()
    async with proxy_client(upstream, max_body_bytes=1000) as client:
        response = await client.post("/v1/chat/completions", json=chat_body())
        streamed = await client.post("/v1/chat/completions", content=chunked([b"x" * 600, b"x" * 600]))
    assert response.status_code == streamed.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert upstream.requests == []


async def chunked(parts: list[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_overflow_reject_answers_context_length_exceeded() -> None:
    upstream = RecordingUpstream()
    body = {"model": "m", "messages": [{"role": "user", "content": "word " * 7000}]}  # 7,000 tokens
    async with proxy_client(upstream, window=8000, overflow="reject") as client:
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"
    assert upstream.forwarded == []


async def test_overflow_forward_sends_the_best_effort_and_marks_it() -> None:
    upstream = RecordingUpstream()
    # Over the line (6,400), within the window (8,000): it may go out, marked.
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 28000}]}
    async with proxy_client(upstream, window=8000) as client:
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert response.headers["x-compaction-overflow"] == "true"
    assert json.loads(upstream.last.content) == body


async def test_over_the_window_is_never_forwarded_even_with_overflow_forward() -> None:
    upstream = RecordingUpstream()
    chat = [*bike_shop_chat(), {"role": "assistant", "content": "Sure."}]
    chat.append({"role": "user", "content": "Here is my log: " + "word " * 10000})  # 10,000 tokens
    async with proxy_client(upstream, window=8000) as client:
        response = await client.post("/v1/chat/completions", json={"model": "m", "messages": chat})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["type"] == "invalid_request_error"
    assert "messages[11], about 10010 tokens" in error["message"] and "8000 tokens" in error["message"]
    assert error["param"] == "messages[11]"
    assert upstream.forwarded == []


async def test_headers_hop_by_hop_dropped_authorization_forwarded() -> None:
    upstream = RecordingUpstream()
    headers = {
        "authorization": "Bearer client-key",
        "connection": "keep-alive, x-drop",
        "te": "trailers",
        "x-custom": "kept",
        "openai-organization": "org-1",
    }
    async with proxy_client(upstream) as client:
        await client.post("/v1/chat/completions", json=chat_body(), headers=headers)
    sent = upstream.last.headers
    assert sent["authorization"] == "Bearer client-key"
    assert sent["x-custom"] == "kept" and sent["openai-organization"] == "org-1"
    assert "te" not in sent and sent.get("connection") != "keep-alive, x-drop"
    assert sent["host"] == "upstream.test"


async def test_upstream_api_key_replaces_the_clients() -> None:
    upstream = RecordingUpstream()
    async with proxy_client(upstream, upstream_api_key="sk-upstream") as client:
        await client.get("/v1/models", headers={"authorization": "Bearer client-key"})
    assert upstream.last.headers.get_list("authorization") == ["Bearer sk-upstream"]


async def test_other_v1_routes_are_forwarded_unchanged() -> None:
    upstream = RecordingUpstream(
        respond=lambda r: httpx.Response(
            201, content=b"raw-bytes", headers={"content-type": "application/x-test"}
        )
    )
    async with proxy_client(upstream) as client:
        response = await client.post("/v1/embeddings?api-version=2024", content=b'{"input": "hi"}')
        models = await client.get("/v1/models/llama3.1%3A8b")
    assert response.status_code == 201 and response.content == b"raw-bytes"
    assert response.headers["content-type"] == "application/x-test"
    assert str(upstream.requests[0].url) == "http://upstream.test/v1/embeddings?api-version=2024"
    assert upstream.requests[0].content == b'{"input": "hi"}'
    assert models.status_code == 201
    assert upstream.requests[1].url.raw_path == b"/v1/models/llama3.1%3A8b"


async def test_content_encoding_is_passed_through_raw() -> None:
    import gzip

    packed = gzip.compress(json.dumps(completion()).encode())
    upstream = RecordingUpstream(
        respond=lambda r: httpx.Response(
            200,
            stream=ClosingStream([packed]),
            headers={"content-encoding": "gzip", "content-type": "application/json"},
        )
    )
    async with proxy_client(upstream) as client:
        response = await client.post("/v1/chat/completions", json=chat_body())
    assert response.headers["content-encoding"] == "gzip"
    assert response.json() == completion()  # httpx decodes what the proxy passed on unchanged


@pytest.mark.parametrize(
    "path", ["/v1/../admin", "/v1/%2e%2e/admin", "/v1/models/..%2f..%2fetc", "/v1//evil.test/x"]
)
async def test_paths_cannot_leave_the_upstream(path: str) -> None:
    upstream = RecordingUpstream()
    async with proxy_client(upstream) as client:
        response = await client.get(path)
    assert response.status_code in (400, 404)
    assert all(r.url.host == "upstream.test" and r.url.path.startswith("/v1/") for r in upstream.requests)
    assert "error" in response.json()


async def test_dry_run_reports_without_calling_the_upstream() -> None:
    upstream = RecordingUpstream()
    async with proxy_client(upstream, window=8000) as client:
        response = await client.post("/compact", json={"model": "m", "messages": bike_shop_chat()})
    assert response.status_code == 200
    report = response.json()["report"]
    # The request after the second search was over the line with everything protected: the first
    # result was capped then (the three last results are kept), and stays capped.
    assert report["compacted"] and report["truncated"] == [] and report["capped"] == [3]
    assert report["limit"] == 6400 and report["protected_from"] == 5 and not report["over_window"]
    assert report["inside_protected"] == {"truncated": [], "capped": [], "dropped": []}
    assert report["tokens_before"] > report["tokens_after"]
    assert CAP_WORDS in response.json()["messages"][3]["content"]
    assert upstream.requests == []


async def test_healthz_and_unknown_routes() -> None:
    async with proxy_client(RecordingUpstream()) as client:
        health = await client.get("/healthz")
        missing = await client.get("/nope")
    assert health.json() == {"status": "ok"}
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


async def test_clamp_max_tokens_lowers_the_reply_limit_instead() -> None:
    upstream = RecordingUpstream()
    body = {"model": "m", "messages": bike_shop_chat(items=60), "max_tokens": 7000}
    async with proxy_client(upstream, window=8000, clamp_max_tokens=True) as client:
        response = await client.post("/v1/chat/completions", json=body)
    sent = upstream.last_json()
    assert sent["messages"] == body["messages"], "no compaction needed once the reply may shrink"
    assert sent["max_tokens"] == int(response.headers["x-compaction-max-tokens"]) < 7000
    assert sent["max_tokens"] + int(response.headers["x-compaction-tokens-after"]) <= 8000


async def test_integers_beyond_64_bits_survive_a_compaction_exactly() -> None:
    upstream = RecordingUpstream()
    body = {"model": "m", "messages": bike_shop_chat(), "x_seed": 123456789012345678901234567890}
    async with proxy_client(upstream, window=8000) as client:
        response = await client.post("/v1/chat/completions", content=json.dumps(body).encode())
    assert "x-compaction-tokens-before" in response.headers
    assert b'"x_seed":123456789012345678901234567890' in upstream.last.content


async def test_ollamas_native_api_is_forwarded_from_the_servers_root() -> None:
    upstream = RecordingUpstream(respond=lambda r: httpx.Response(200, json={"models": []}))
    async with proxy_client(upstream) as client:
        tags = await client.get("/api/tags")
        show = await client.post("/api/show", json={"model": "llama3.1:8b"})
        sneaky = await client.get("/api/%2e%2e/etc")
    assert tags.status_code == show.status_code == 200
    assert [str(r.url) for r in upstream.requests] == [
        "http://upstream.test/api/tags",
        "http://upstream.test/api/show",
    ]
    assert sneaky.status_code == 400


def short_chat(turns: int = 5) -> list[dict[str, object]]:
    """About 130 tokens in 11 messages: far below any line."""
    messages: list[dict[str, object]] = [{"role": "system", "content": "You are terse."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Question {turn}: what is {turn} + {turn}?"})
        messages.append({"role": "assistant", "content": f"{turn + turn}, as always."})
    return messages


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("reply", [8192, 16384, 10**6])
async def test_a_reply_limit_at_or_past_the_window_keeps_a_chat_that_fits(field: str, reply: int) -> None:
    upstream = RecordingUpstream()
    raw = json.dumps({"model": "m", "messages": short_chat(), field: reply}).encode()
    async with proxy_client(upstream, clamp_max_tokens=False) as client:  # the default window, 8,192
        response = await client.post(
            "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
        )
    assert response.status_code == 200
    assert upstream.last.content == raw, "a chat that fits is forwarded as it came"
    assert not any(name.startswith("x-compaction") for name in response.headers)


async def test_a_reply_limit_past_the_window_is_clamped_when_allowed() -> None:
    upstream = RecordingUpstream()
    body = {"model": "m", "messages": short_chat(), "max_tokens": 16384}
    async with proxy_client(upstream, clamp_max_tokens=True) as client:
        response = await client.post("/v1/chat/completions", json=body)
    sent = upstream.last_json()
    assert sent["messages"] == body["messages"]
    assert 8000 < sent["max_tokens"] == int(response.headers["x-compaction-max-tokens"]) < 8192


async def test_a_large_reply_limit_lowers_the_line_at_most_to_half_the_window() -> None:
    """With clamping off, for a server that refuses prompt + reply over the window."""
    upstream = RecordingUpstream()
    # Over half the window (4,096) but under the usual line (6,553): compacted down to about half.
    body = {"model": "m", "messages": bike_shop_chat(items=130), "max_tokens": 16384}
    async with proxy_client(upstream, clamp_max_tokens=False) as client:
        response = await client.post("/v1/chat/completions", json=body)
    after = int(response.headers["x-compaction-tokens-after"])
    assert 2000 < after <= 4096
    assert len(upstream.last_json()["messages"]) == len(body["messages"]), "notes, not dropped history"


async def test_a_rejected_request_names_the_reply_limit_that_took_the_room() -> None:
    upstream = RecordingUpstream()
    messages = [*short_chat(), {"role": "user", "content": "x" * 24_000}]  # 6,000 tokens, protected
    async with proxy_client(upstream, overflow="reject", clamp_max_tokens=False) as client:
        response = await client.post(
            "/v1/chat/completions", json={"model": "m", "messages": messages, "max_completion_tokens": 9000}
        )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "max_completion_tokens=9000" in error["message"] and "8192" in error["message"]
    assert not upstream.requests


@pytest.mark.parametrize(
    ("path", "client_header", "client_value", "expected"),
    [
        ("/v1/chat/completions", "authorization", "Bearer client-key", ("authorization", "Bearer sk-up")),
        ("/v1/messages", "x-api-key", "client-key", ("x-api-key", "sk-up")),
        ("/v1/messages", "authorization", "Bearer client-key", ("x-api-key", "sk-up")),
        ("/openai/deployments/d1/chat/completions", "api-key", "client-key", ("api-key", "sk-up")),
        ("/v1/messages/count_tokens", "x-api-key", "client-key", ("x-api-key", "sk-up")),
        ("/v1/embeddings", "authorization", "Bearer client-key", ("authorization", "Bearer sk-up")),
    ],
)
@pytest.mark.parametrize("guarded", [False, True], ids=["open", "with-proxy-keys"])
async def test_the_upstream_key_goes_in_the_header_its_server_reads(
    path: str, client_header: str, client_value: str, expected: tuple[str, str], guarded: bool
) -> None:
    upstream = RecordingUpstream()
    keys = {"api_keys": "client-key"} if guarded else {}
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "Hi"}]}
    async with proxy_client(upstream, upstream_api_key="sk-up", **keys) as client:
        response = await client.post(path, json=body, headers={client_header: client_value})
    assert response.status_code == 200, response.text
    sent = {name: upstream.last.headers.get_list(name) for name in ("authorization", "x-api-key", "api-key")}
    header, value = expected
    assert sent.pop(header) == [value]
    if guarded or path != "/v1/messages/count_tokens":
        assert not any(sent.values()), f"the client's key is not forwarded beside it: {sent}"
